"""What every command shares: the app, the options, exit statuses, the plan and the runs' folders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..config import ConfigError


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Run numeric test cases across inference-runtime versions and report a pass/fail matrix. "
                       "--debug (before or after the command) prints the full traceback if trtmatrix itself fails.")


ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="The matrix file.")]


# Commands over stored runs: a matrix file names the reports folder; without one they read ./reports.
RunsConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", "-c", help="The matrix file (default: matrix.toml where there is one; else runs are read from ./reports).")]


CasesOpt = Annotated[Optional[list[str]], typer.Option("--case", metavar="NAME", help="Only this case (repeatable).")]


EnvsOpt = Annotated[Optional[list[str]], typer.Option("--env", metavar="ENV", help="Only this environment (repeatable).")]


CellsOpt = Annotated[Optional[list[str]], typer.Option(
    "--cell", metavar="CELL", help="Only this cell: case/k=v/profile/env, as the matrix prints it (repeatable).")]


ShardOpt = Annotated[Optional[str], typer.Option(
    metavar="I/N", help="Only the I-th of N balanced parts of the plan (CI job matrices); "
                        "`trtmatrix merge` puts the N runs together.")]


BaselineOpt = Annotated[Optional[Path], typer.Option(
    metavar="PATH", help="Compare with this run for exit 1 instead of the previous run in the reports folder: a run "
                         "folder, or a folder that holds one (an unpacked artifact of the last nightly); the newest "
                         "whole run in it. For CI runners that start with an empty reports folder.")]


StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="Exit 1 also on any fail, error, crash or timeout that no known issue covers, new or not "
                     "(a first run, a runner with nothing to compare with).")]


RunArg = Annotated[Optional[str], typer.Argument(
    metavar="RUN", help="Run id, id prefix or run folder (default: the newest run).")]


# Exit statuses (docs/statuses.md); a run stopped by a signal exits 128 + its number.
EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def path_line(path: Path) -> str:
    """A path as stdout's last line, which scripts read (`tail -1`): as it is, or, where it holds a
    newline or another control character that one line cannot hold, quoted as bash's $'…' (what
    `printf %q` writes; `eval` reads it back)."""
    text = str(path)
    if not CONTROL.search(text):
        return text
    quoted = text.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + CONTROL.sub(lambda found: f"\\x{ord(found[0]):02x}" if ord(found[0]) < 0x80 else f"\\u{ord(found[0]):04x}",
                              quoted) + "'"


MAX_SHARDS = 1000  # more CI jobs than any CI system runs at once; a typo's 10**9 would take the plan's memory


def _say_error(message: str) -> None:
    """`error: …` as one line: a control character in it (an ESC from a model's op type, a line
    break from an engine's message) is written out as its escape, never sent to the terminal."""
    typer.echo("error: " + CONTROL.sub(lambda m: repr(m[0])[1:-1], message), err=True)


def _fail(message: str, code: int = EXIT_USAGE):
    _say_error(message)
    raise typer.Exit(code)


def _plan(config: Path, cases=None, envs=None, cells=None):
    from ..plan import build_plan

    if config.exists() and not config.is_file():
        _fail(_not_a_matrix_file(config))
    try:
        return build_plan(config, cases, envs, cells)
    except ConfigError as exc:
        _fail(str(exc))


def _check_output(flag: str, path: Path | None, config: Path | None = None) -> None:
    """A file the user names, checked before the work that makes it: a bad one costs nothing, and
    none of the user's own files (the matrix file, a case's model, inputs or expected outputs) is
    written over for a typo."""
    from ..store.outputs import output_problem

    if path is not None and (problem := output_problem(path) or _users_own(path, config)):
        _fail(f"{flag} {path}: {problem}")


def _users_own(path: Path, config: Path | None) -> str | None:
    """'is the matrix file …' where `path` is one of the files the matrix file reads, else None."""
    from ..config import load_config

    config = config if config is not None else Path("matrix.toml")
    if not (config.is_file() and path.is_file()):
        return None
    target = path.resolve()
    if target == config.resolve():
        return "is the matrix file: write elsewhere"
    try:
        cases = load_config(config).cases
    except ConfigError:
        return None
    for name, entry in cases.items():
        for key in ("onnx", "inputs", "expected"):
            value = getattr(entry, key, None) or ()
            if any((config.parent / item).resolve() == target for item in (value if isinstance(value, tuple) else (value,))):
                return f"is cases.{name}.{key} of {config}: write elsewhere"
    return None


def _write_output(flag: str, path: Path, write) -> None:
    """`write(p)` makes the output at p (store/outputs.py: links followed, FIFOs written into)."""
    from ..store.outputs import write_output

    try:
        write_output(path, write)
    except OSError as exc:
        _fail(f"{flag} {path}: {exc.strerror or exc}")


def _matrix_file(config: Path | None) -> Path | None:
    """The matrix file of a command over stored runs: the one given, which must be there (a typo
    must not read ./reports instead), else ./matrix.toml where there is one, else none."""
    if config is None:
        return Path("matrix.toml") if Path("matrix.toml").is_file() else None
    if not config.is_file():
        _fail(_not_a_matrix_file(config) if config.exists() else f"{config}: file not found")
    return config


def _not_a_matrix_file(config: Path) -> str:
    """-c names something there that is no file: said as what it is (/dev/null is no folder)."""
    return f"{config}: not a matrix file ({'a folder' if config.is_dir() else 'not a regular file: a pipe, a device or a socket'})"


def _reports_dir(config: Path | None) -> Path:
    """The matrix file's reports folder; ./reports without a matrix file (a copy of the reports,
    read alone)."""
    from ..config import load_config

    config = _matrix_file(config)
    if config is None:
        return Path("reports")
    try:
        return config.resolve().parent / load_config(config).run.reports_dir
    except ConfigError as exc:
        _fail(str(exc))


def _run_dir(config: Path | None, run_ref: str | None) -> Path:
    from ..store import find_run

    try:
        return find_run(_reports_dir(config), run_ref)
    except FileNotFoundError as exc:
        _fail(str(exc))


def _registry(config: Path | None) -> dict:
    """{id: known issue} of the matrix file's registry (none without a matrix file)."""
    from ..config import load_config
    from ..sources.known_issues import matrix_registry

    if (config := _matrix_file(config)) is None:
        return {}
    return {issue.id: issue for issue in matrix_registry(config, load_config(config))}


def _relative(path: Path, run_dir: Path) -> str:
    """A path inside the run folder relative to it (so the report links it), else absolute."""
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path.resolve())
