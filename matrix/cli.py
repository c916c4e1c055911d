"""The `trtmatrix` command. A thin layer: each command calls the library and prints."""

from __future__ import annotations

import atexit
import errno
import math
import os
import re
import signal
import sys
import tempfile
import traceback
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Optional

from .bytecode import keep_own_bytecode

keep_own_bytecode()  # before the imports below: a host without bytecode compiles them at every start

import typer  # noqa: E402

from .config import ConfigError
from .stops import (STOPPING, Stopped, adopt_orphans, end_descendants, remove_temporaries, stop_requested,
                    stop_signal)

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
MAX_SHARDS = 1000  # more CI jobs than any CI system runs at once; a typo's 10**9 would take the plan's memory


def _raise_stopped(signum, frame):
    stop_requested(signum)  # before anything else: no thread reports a cell this stop breaks
    if _importing(frame):  # an exception raised inside an extension module's init aborts the process
        _stop(Stopped(signum))
    raise Stopped(signum)


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _say_error(message: str) -> None:
    """`error: …` as one line: a control character in it (an ESC from a model's op type, a line
    break from an engine's message) is written out as its escape, never sent to the terminal."""
    typer.echo("error: " + CONTROL.sub(lambda m: repr(m[0])[1:-1], message), err=True)


def _fail(message: str, code: int = EXIT_USAGE):
    _say_error(message)
    raise typer.Exit(code)


def _plan(config: Path, cases=None, envs=None, cells=None):
    from .plan import build_plan

    if config.exists() and not config.is_file():
        _fail(f"{config}: not a matrix file (a folder?)")
    try:
        return build_plan(config, cases, envs, cells)
    except ConfigError as exc:
        _fail(str(exc))


@app.command()
def plan(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None,
         cell: CellsOpt = None, shard: ShardOpt = None) -> None:
    """Print the cells a run would execute, without running or writing anything: each cell id, its
    result key and whether a run would reuse a stored result (stored), run it (new), skip it
    here (skipped: its environment cannot run on this host) or cannot tell yet (unknown)."""
    from .environments import planned_fingerprints
    from .run import env_skip_reason
    from .store.cache import result_dir, result_key, stored_result

    the_plan = _plan(config, case, env, cell)
    if shard:
        the_plan = _shard(the_plan, shard)
    cache = the_plan.path("cache_dir")
    fingerprints = planned_fingerprints(list(the_plan.envs.values()), cache)
    skipped = {name for name, envdef in the_plan.envs.items() if env_skip_reason(envdef)}
    for cell in the_plan.cells:
        fingerprint = fingerprints[cell.env]
        key = result_key(cell.content_key, fingerprint or "")
        state = ("skipped" if cell.env in skipped else "unknown" if fingerprint is None
                 else "stored" if stored_result(result_dir(cache, cell.env, key)) else "new")
        typer.echo(f"{cell.cell_id}\t{key[:12]}\t{state}")
    typer.echo(f"{len(the_plan.cells)} cells: {len(the_plan.rows)} rows × {len({c.env for c in the_plan.cells})} environments",
               err=True)
    docker = sorted(e.name for e in the_plan.envs.values() if e.backend == "docker")
    if docker:
        how = ("looked up in Docker (read only)" if any(fingerprints[e] is not None for e in docker)
               else "unknown: no Docker engine answers, so their cells are 'unknown'")
        typer.echo(f"docker environments ({', '.join(docker)}): result keys include the image id, {how}", err=True)


@app.command()
def run(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None, cell: CellsOpt = None,
        reuse: Annotated[bool, typer.Option(help="Reuse stored results of cells whose result key is unchanged; "
                                                  "--no-reuse runs every cell again.")] = True,
        junit_xml: Annotated[Optional[Path], typer.Option(
            metavar="FILE", help="Also write the cells as JUnit XML here: a testsuite per environment, a testcase "
                                 "per row.")] = None,
        ray: Annotated[Optional[str], typer.Option(
            "--ray", metavar="ADDRESS", help="Run the environments on this Ray cluster ('auto', host:port, "
                                             "ray://host:10001); needs the ray extra.")] = None,
        shard: ShardOpt = None, baseline: BaselineOpt = None, strict: StrictOpt = False,
        ) -> None:
    """Run the matrix and write <reports_dir>/runs/<run-id>/ (results, report.html); progress and
    tables go to stderr, the run folder's path is stdout's last line. Exit 1 when a cell newly
    fails compared with the previous run (a regression; --baseline: compared with that run) or,
    with --strict, when any cell fails, errs, crashes or times out outside a known issue; 2 on bad
    input (one line naming the file and key), 3 when trtmatrix itself fails, 128 + n when stopped
    by signal n, 0 otherwise."""
    from .report.causes import no_tensorrt_compared
    from .report.reference_lines import reference_lines
    from .report.console import RunProgress, console, escape, left_out_line, print_results, totals_line
    from .report.junit import write_junit
    from .report.look_at import LOOK_AT
    from .run import MatrixRun
    from .store import REPORT, RUN_META, read_run, read_run_meta

    the_plan = _plan(config, case, env, cell)
    if shard:
        the_plan = _shard(the_plan, shard)
        if not the_plan.cells:  # an empty run would become "the previous run" of the next one
            typer.echo(f"shard {shard} of this plan has no cells ({len(the_plan.whole)} cells in all): "
                       "nothing run, nothing written", err=True)
            return
    _check_outputs(the_plan, junit_xml)
    baseline_run = _baseline(baseline)
    executor = _executor(the_plan, ray)
    with RunProgress(len(the_plan.cells)) as progress:  # a stop: main() ends it
        run_dir = MatrixRun(the_plan, reuse=reuse, on_event=progress, executor=executor).execute()
    frame = read_run(run_dir)
    print_results(frame, full_list=run_dir / LOOK_AT)
    if dropped := left_out_line(read_run_meta(run_dir).get("left_out", {}), run_dir / RUN_META):
        console.print(dropped, soft_wrap=True)
    console.print(escape(totals_line(frame)), soft_wrap=True)  # one line in a log too
    if said := no_tensorrt_compared(frame):  # a run that built engines must not read as one that checked them
        console.print(f"[bold]{escape(said)}[/]", soft_wrap=True)
    unjudged = reference_lines(frame)  # a reference not to be trusted is said, and the run is not all well
    for line in unjudged:
        console.print(f"[bold yellow]{escape(line)}[/]", soft_wrap=True)
    _warn_several_issues(frame, the_plan.known_issues)
    console.print(escape(f"report: {run_dir / REPORT}"), soft_wrap=True)  # a path is never wrapped
    newly_failing = _gate(the_plan.path("reports_dir"), run_dir, frame, baseline_run, strict)
    junit_failed = False
    if junit_xml:
        try:  # checked before the run; a full disk now must not hide the regressions below
            write_junit(frame, junit_xml, run_dir.name)
        except OSError as exc:
            console.print(escape(f"error: --junit-xml {junit_xml}: {exc.strerror or exc}"), soft_wrap=True)
            junit_failed = True
    typer.echo(str(run_dir))
    if newly_failing:
        raise typer.Exit(EXIT_REGRESSION)
    if junit_failed:
        raise typer.Exit(EXIT_INTERNAL)


def _baseline(path: Path | None):
    """--baseline's run and its results, read before anything runs: a wrong path or a damaged run
    costs no run."""
    from .store import read_run
    from .store.baseline import find_baseline

    if path is None:
        return None
    try:
        found = find_baseline(path)
        return found, read_run(found)
    except ConfigError as exc:
        _fail(f"--baseline {exc}")


def _gate(reports_dir: Path, run_dir: Path, frame, baseline, strict: bool) -> bool:
    """Whether the run exits 1: a regression against `baseline` ((run folder, results); else the
    previous whole run in the reports folder) or, `strict`, any failure no known issue covers
    (both listed on stderr); or a cell not judged for want of a trustworthy reference (said above)."""
    from .report.console import console, escape, uncovered_lines
    from .statuses import UNJUDGED

    if baseline is not None:
        console.print(escape(f"compared with the baseline run {baseline[0]}"), soft_wrap=True)
    newly = _newly_failing(reports_dir, run_dir, frame, baseline)
    uncovered = uncovered_lines(frame) if strict else []
    for line in uncovered:
        console.print(line, soft_wrap=True)
    return newly or bool(uncovered) or bool(frame["status"].isin(UNJUDGED).any())


def _newly_failing(reports_dir: Path, run_dir: Path, frame, before=None) -> bool:
    """Whether a cell of `frame` newly fails against `before` ((run folder, results)), by default
    the previous whole run (a regression: exit 1); each such cell listed on stderr."""
    from .report.console import console, escape
    from .report.error_text import worst_error
    from .report.upgrade import regressions
    from .store import previous_results

    before = before or previous_results(reports_dir, run_dir)
    newly = regressions(before[1], frame) if before else []
    if before and not frame["cell_id"].isin(before[1]["cell_id"]).any():
        console.print(escape(f"warning: run {before[0].name} has none of this run's cells: nothing to compare with "
                             "(another matrix?)"), soft_wrap=True)
    if len(newly):
        console.print(f"[bold red]{len(newly)} cell{'s' * (len(newly) != 1)} newly fail{'s' * (len(newly) == 1)} "
                      f"compared with run {before[0].name}:[/]")
        for _, r in newly.iterrows():
            worst = worst_error(r, 2)
            console.print(escape(f"  {r['cell_id']}: {r['status_before']} → {r['status_now']}"
                                 + (f" ({worst})" if worst else "")), soft_wrap=True)
    return bool(len(newly))


def _warn_several_issues(frame, issues) -> None:
    """Cells more than one known issue matches: each took the one whose expected verdict it met."""
    from .sources.known_issues import several_matches

    if said := several_matches(frame, issues):
        typer.echo(f"warning: {len(said)} cells match more than one known issue (each takes the one whose "
                   f"`expected` it met, else the first): {'; '.join(said[:3])}{'; …' if len(said) > 3 else ''}",
                   err=True)


def _check_outputs(the_plan, junit_xml: Path | None = None) -> None:
    """Every place a run writes, checked before anything runs: a bad one must never cost a run,
    nor turn a regression's exit 1 into an exit 3 after it."""
    from .report.publish import HISTORY, INDEX
    from .store import RUNS, folder_problem
    from .store.cache import artifacts_folder, results_folder
    from .store.outputs import output_problem

    reports = the_plan.path("reports_dir")
    _check_output("--junit-xml", junit_xml)  # first: it creates no folder
    for setting in ("reports_dir", "cache_dir"):
        problem = folder_problem(the_plan.path(setting))
        if problem and getattr(the_plan.config.run, setting) is None:  # not the file's: the user's cache
            _fail(f"the user's cache folder (no run.cache_dir in {the_plan.config_path}): {problem}")
        if problem:
            _fail(f"{the_plan.config_path}: run.{setting}: {problem}")
    cache = the_plan.path("cache_dir")  # its own folders too: a file there would break every cell of one
    for folder in (artifacts_folder(cache), *(results_folder(cache, env) for env in the_plan.envs)):
        if problem := folder_problem(folder):
            _fail(f"{the_plan.config_path}: run.cache_dir: {problem}")
    problem = folder_problem(reports / RUNS) or output_problem(reports / INDEX) or output_problem(reports / HISTORY)
    if problem:
        _fail(f"{the_plan.config_path}: run.reports_dir: {problem}")


def _check_output(flag: str, path: Path | None) -> None:
    """A file the user names, checked before the work that makes it: a bad one costs nothing."""
    from .store.outputs import output_problem

    if path is not None and (problem := output_problem(path)):
        _fail(f"{flag} {path}: {problem}")


def _write_output(flag: str, path: Path, write) -> None:
    """`write(p)` makes the output at p (store/outputs.py: links followed, FIFOs written into)."""
    from .store.outputs import write_output

    try:
        write_output(path, write)
    except OSError as exc:
        _fail(f"{flag} {path}: {exc.strerror or exc}")


def _shard(the_plan, text: str):
    from .plan import shard_plan

    found = re.fullmatch(r"([0-9]+)/([0-9]+)", text)  # ASCII digits: '¹/²' is no shard
    index, count = found.groups() if found else ("0", "0")
    if not (found and 1 <= int(index) <= int(count) <= MAX_SHARDS):
        _fail(f"--shard {text}: expected I/N with 1 <= I <= N <= {MAX_SHARDS}, e.g. 2/4")
    return shard_plan(the_plan, int(index), int(count))


def _executor(the_plan, ray_address: str | None):
    """Where the environments run; a missing Ray or an unreachable cluster is one line, exit 2."""
    from .executors import open_executor

    if ray_address is not None and not ray_address.strip():
        _fail("--ray: empty; give the cluster's address ('auto', host:port or ray://host:10001)")
    try:
        return open_executor(the_plan.config.run, ray_address)
    except ImportError as exc:
        _fail(str(exc))
    except ConnectionError as exc:
        address = ray_address or the_plan.config.run.ray_address
        _fail(f"no Ray cluster answers at {address}: {str(exc).splitlines()[0] if str(exc) else exc}")


def _stop(exc: Stopped) -> None:
    """End a stopped command at once: every worker and container stopped, what it was making
    removed, the processes it started ended, one line, exit 128 + signal. Environment threads
    still setting up are not waited for (os._exit): what they finished is in the result cache, and
    the next run resumes from there."""
    from .environments.backend import stop_all

    STOPPING.set()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second stop does not break this one
        signal.signal(signum, signal.SIG_IGN)
    # Environment threads may still turn a finished cell into a progress line: none may follow
    # the stop line, which must be the last thing the run says. rich checks `quiet` where it
    # writes, under this lock: no line is half-written when it flips. Not imported yet (the
    # signal came during the imports), or half imported: there is no progress line to silence.
    progress = getattr(sys.modules.get(f"{__package__}.report.console"), "console", None)
    if progress is not None:
        with progress._lock:
            progress.quiet = True
    stop_all()
    remove_temporaries()
    end_descendants()
    _flush()
    # The process's own stderr: the stop may come while a case file's output is being captured.
    print(f"stopped by {signal.Signals(exc.signum).name}: finished cells are kept in the cache; run again to resume",
          file=sys.__stderr__, flush=True)
    os._exit(128 + exc.signum)


def _matrix_file(config: Path | None) -> Path | None:
    """The matrix file of a command over stored runs: the one given, which must be there (a typo
    must not read ./reports instead), else ./matrix.toml where there is one, else none."""
    if config is None:
        return Path("matrix.toml") if Path("matrix.toml").is_file() else None
    if not config.is_file():
        _fail(f"{config}: not a matrix file (a folder?)" if config.exists() else f"{config}: file not found")
    return config


def _reports_dir(config: Path | None) -> Path:
    """The matrix file's reports folder; ./reports without a matrix file (a copy of the reports,
    read alone)."""
    from .config import load_config

    config = _matrix_file(config)
    if config is None:
        return Path("reports")
    try:
        return config.resolve().parent / load_config(config).run.reports_dir
    except ConfigError as exc:
        _fail(str(exc))


def _run_dir(config: Path | None, run_ref: str | None) -> Path:
    from .store import find_run

    try:
        return find_run(_reports_dir(config), run_ref)
    except FileNotFoundError as exc:
        _fail(str(exc))


@app.command()
def report(run_ref: RunArg = None, config: RunsConfigOpt = None,
           tolerances: Annotated[Optional[Path], typer.Option(
               help="A tolerance file (`tolerances suggest` writes one): its entries replace the matrix file's.")] = None,
           ) -> None:
    """Re-judge a stored run: tolerances from the matrix file (or --tolerances) and known issues
    re-applied to the stored outputs, nothing run again. Rewrites its tables and report.html in
    place; run.json and the report's header say when and with which files."""
    from .config import load_config, with_tolerances
    from .sources.known_issues import load_registry, registry_path
    from .report.publish import render_run
    from .report.rejudge import not_in_matrix, rejudge
    from .run import utc_now
    from .store import REPORT, note_rejudged, read_run, read_run_meta, write_tables

    config = _matrix_file(config)
    if config is None:
        _fail("no matrix.toml here: give the matrix file whose tolerances and known issues re-judge the run (-c FILE)")
    run_dir = _run_dir(config, run_ref)
    try:
        matrix = load_config(config)
        if tolerances is not None:
            matrix = with_tolerances(matrix, tolerances)
        issues = load_registry(registry_path(config, matrix))
    except ConfigError as exc:
        _fail(str(exc))
    stored = read_run(run_dir)
    made_from = read_run_meta(run_dir).get("config")
    if made_from and Path(made_from).resolve() != config.resolve():
        typer.echo(f"warning: run {run_dir.name} was made from {made_from}, not {config}: re-judged with the "
                   "tolerances and known issues of the second", err=True)
    if unknown := not_in_matrix(stored, matrix):
        typer.echo(f"warning: {len(unknown)} rows of run {run_dir.name} are of cases or profiles {config} does not "
                   f"have ({', '.join(unknown[:5])}{', …' if len(unknown) > 5 else ''}): their verdicts are kept as the run "
                   "judged them", err=True)
    frame, problems = rejudge(run_dir, stored, matrix, issues)
    _warn_several_issues(frame, issues)
    write_tables(run_dir, frame)
    # The verdicts are no longer the run's own: run.json and the report's header say with what.
    note_rejudged(run_dir, {"at": utc_now(), "config": str(config.resolve()),
                            "tolerances": str(tolerances.resolve()) if tolerances else None})
    render_run(run_dir, frame)
    typer.echo(str(run_dir / REPORT))
    if problems:  # the report is written, those cells marked; the verdicts it kept are said here
        _fail(f"{sum(problems.values())} cells not re-judged (their verdicts are the run's, marked in the report): "
              + "; ".join(problems))


@app.command()
def merge(runs: Annotated[list[str], typer.Argument(metavar="RUN", help="The shards' runs: ids, id prefixes or run folders.")],
          config: RunsConfigOpt = None,
          junit_xml: Annotated[Optional[Path], typer.Option(help="Also write the merged cells as JUnit XML here.")] = None,
          baseline: BaselineOpt = None, strict: StrictOpt = False,
          ) -> None:
    """Put the N shards of a sharded run (`run --shard I/N`) together as one new run in the matrix
    file's reports folder — the newest, with results, report, index and history. Refuses runs
    that are not all N shards of one plan. Exit 1 when a cell newly fails compared with the
    previous whole run (or --baseline), or with --strict on any failure outside a known issue,
    as `run` does."""
    from .report.publish import publish_staged
    from .run import new_run_id
    from .store import REPORT
    from .store.merge import MergeError, stage_merged

    reports_dir = _reports_dir(config)
    _check_output("--junit-xml", junit_xml)
    baseline_run = _baseline(baseline)
    run_dirs = [_run_dir(config, ref) for ref in runs]
    config = _matrix_file(config)
    order = [c.cell_id for c in _plan(config).cells] if config else []
    try:
        staged, frame = stage_merged(reports_dir, new_run_id(), run_dirs, order)
    except MergeError as exc:
        _fail(str(exc))
    run_dir = publish_staged(staged, frame)
    if junit_xml:
        from .report.junit import write_junit

        try:
            write_junit(frame, junit_xml, run_dir.name)
        except OSError as exc:
            _fail(f"--junit-xml {junit_xml}: {exc.strerror or exc}")
    typer.echo(f"{len(frame)} cells from {len(run_dirs)} shards", err=True)
    typer.echo(f"report: {run_dir / REPORT}", err=True)
    typer.echo(str(run_dir))  # the last line, as `run` prints it
    if _gate(reports_dir, run_dir, frame, baseline_run, strict):  # the merged run is judged as a whole run is
        raise typer.Exit(EXIT_REGRESSION)


@app.command()
def diff(run_ref: RunArg = None, config: RunsConfigOpt = None,
         from_env: Annotated[Optional[str], typer.Option(
             "--from", metavar="ENV", help="Environment A (default: the older of the two newest versions of one engine "
                                           "among the environments judged against the reference, else among those "
                                           "that built; --to alone: the nearest earlier version of its engine).")] = None,
         to_env: Annotated[Optional[str], typer.Option(
             "--to", metavar="ENV", help="Environment B (default: the newer of that pair; --from alone: the nearest "
                                         "later version of its engine).")] = None,
         timing: Annotated[bool, typer.Option("--timing", help="Speed instead: build time and median latency per row, "
                                                                 "with each change; across every version, or B against A "
                                                                 "with --from and --to.")] = False,
         factor: Annotated[Optional[float], typer.Option(
             min=1.0, help="--timing: the smallest ratio of median latencies flagged, as well as a Mann-Whitney U "
                           "p < 0.002 (default: report/timing.py's FACTOR; the output says which).")] = None,
         ) -> None:
    """The upgrade view in the terminal: what newly fails, newly passes or stays the same from A to B,
    and how far B's outputs are from A's; with --timing, speed across versions."""
    from .report.a_vs_b import a_vs_b, a_vs_b_text
    from .report.console import print_timing, print_upgrade
    from .report.timing import FACTOR, place_names, timing_view
    from .store import read_run
    from .report.upgrade import compare

    run_dir = _run_dir(config, run_ref)
    frame = read_run(run_dir)
    if timing:
        pair = _pair(frame, from_env, to_env) if from_env or to_env else None
        if pair and (places := place_names(frame))[pair[0]] != places[pair[1]]:
            _fail(f"{pair[0]} runs on {places[pair[0]]}, {pair[1]} on {places[pair[1]]}: timings of different places "
                  "are not compared")
        print_timing(*timing_view(frame, pair, factor or FACTOR), factor or FACTOR)
        return
    env_a, env_b = _pair(frame, from_env, to_env)
    compared = compare(frame, env_a, env_b)
    measured = a_vs_b(run_dir, frame, env_a, env_b)
    compared["a_vs_b"] = [a_vs_b_text(measured.get(row)) for row in compared["row_id"]]
    print_upgrade(compared, env_a, env_b)


def _pair(frame, from_env: str | None, to_env: str | None) -> tuple[str, str]:
    """The upgrade to show: the environments given (one alone: the other end is the nearest other
    version of its engine), else the run's default pair."""
    from .report.upgrade import default_pair, nearest_version

    envs = sorted(set(frame["env"]))
    for flag, name in (("--from", from_env), ("--to", to_env)):
        if name is not None and name not in envs:
            _fail(f"{flag} {name!r} is not an environment of this run ({', '.join(envs)})")
    if from_env and to_env:
        env_a, env_b = from_env, to_env
    elif from_env or to_env:
        given = from_env or to_env
        other = nearest_version(frame, given, later=bool(from_env))
        if other is None:
            _fail(f"{'--from' if from_env else '--to'} {given}: no other version of its engine "
                  f"{'after' if from_env else 'before'} it in this run; give {'--to' if from_env else '--from'} too "
                  f"({', '.join(envs)})")
        env_a, env_b = (given, other) if from_env else (other, given)
    else:
        pair = default_pair(frame)
        if pair is None:
            _fail(f"this run has no two versions of one engine to compare by default: give --from and --to "
                  f"({', '.join(envs)})")
        env_a, env_b = pair
    if env_a == env_b:
        _fail(f"--from and --to are both {env_a!r}: an upgrade needs two environments ({', '.join(envs)})")
    return env_a, env_b


@app.command()
def summary(run_ref: RunArg = None, config: RunsConfigOpt = None,
            from_env: Annotated[Optional[str], typer.Option("--from", metavar="ENV", help="Environment A (default: as diff).")] = None,
            to_env: Annotated[Optional[str], typer.Option("--to", metavar="ENV", help="Environment B (default: as diff).")] = None,
            link_base: Annotated[Optional[str], typer.Option(
                metavar="URL", help="The published report's URL; cell links are <URL>#cell-<id> (default: report.html, "
                     "relative to the run folder).")] = None,
            output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here (default: stdout).")] = None,
            everything: Annotated[bool, typer.Option("--all", help="Every cell of each group, not the first 20.")] = False,
            ) -> None:
    """A run as GitHub-flavoured Markdown for release notes and pull requests: a line per environment,
    then the upgrade from A to B (newly failing, passing, unsupported, supported), each cell linked
    to its permalink in the report."""
    from .report.a_vs_b import a_vs_b
    from .report.markdown_summary import summary_markdown
    from .report.upgrade import compare, default_pair
    from .store import REPORT, read_run, read_run_meta
    from .store.findings import read_findings

    _check_output("--output", output)
    run_dir = _run_dir(config, run_ref)
    frame = read_run(run_dir)
    # Without --from/--to and no two versions of one engine: the environments alone.
    pair = _pair(frame, from_env, to_env) if from_env or to_env else default_pair(frame)
    repros = {finding["cell"]: finding for finding in read_findings(run_dir)["repro"]}
    # Links work from where the file is read: beside the run's report, or from where -o writes it.
    here = os.path.relpath(run_dir / REPORT, Path(os.path.abspath(output)).parent) if output else REPORT
    text = summary_markdown(frame, read_run_meta(run_dir), pair, compare(frame, *pair) if pair else None,
                            a_vs_b(run_dir, frame, *pair) if pair else {}, _registry(config), link_base or here,
                            everything, repros)
    if output:
        _write_output("--output", output, lambda target: target.write_text(text))
    else:
        typer.echo(text, nl=False)
    if not link_base:  # the Markdown is made to be pasted, where a relative link leads nowhere
        typer.echo(f"note: the cell links point to {here}, relative to {'the file' if output else 'the run folder'}: "
                   "pasted into a pull request or release notes they break; --link-base URL (the published "
                   "report's address) makes links that work anywhere", err=True)


@app.command()
def support(run_ref: RunArg = None, config: ConfigOpt = Path("matrix.toml")) -> None:
    """A suite run as a support matrix in Markdown, for docs/: per release what its tests came to and
    what each upgrade gained, per ONNX operator built (or passed) / refused (the causes) / broke,
    and every test behind each. Printed; the page names the command that remakes it."""
    from .report.support_page import COLUMNS, support_markdown
    from .store import read_run, read_run_meta

    run_dir = _run_dir(config, run_ref)
    frame = read_run(run_dir, COLUMNS)
    if frame["suite"].isna().all():
        _fail(f"run {run_dir.name} has no suite rows (suite = or suite_dir = cases): nothing to tell per operator")
    command = f"trtmatrix support -c {config} > docs/{config.stem}-support.md"
    typer.echo(support_markdown(frame, read_run_meta(run_dir), command), nl=False)


def _registry(config: Path | None) -> dict:
    """{id: known issue} of the matrix file's registry (none without a matrix file)."""
    from .config import load_config
    from .sources.known_issues import load_registry, registry_path

    if (config := _matrix_file(config)) is None:
        return {}
    return {issue.id: issue for issue in load_registry(registry_path(config, load_config(config)))}


@app.command()
def history(config: RunsConfigOpt = None,
            last: Annotated[int, typer.Option(min=1, help="How many of the newest runs.")] = 10,
            cell: Annotated[Optional[str], typer.Option(
                metavar="GLOB", help="Only cell ids matching this glob (case/k=v/profile/env; * and ? as in a "
                                     "shell).")] = None) -> None:
    """Each cell's status over the newest runs (newest first): the nightly trend."""
    from .report.console import print_history
    from .store import DamagedRun, left_out, list_runs, read_run

    runs = list_runs(_reports_dir(config))[-last:][::-1]
    if not runs:
        _fail(f"no runs under {_reports_dir(config)}")
    readable = []
    for run_dir in runs:
        try:
            readable.append((run_dir.name, read_run(run_dir)))
        except DamagedRun as exc:
            left_out(exc)
    if cell and not any(fnmatchcase(c, cell) for _, frame in readable for c in frame["cell_id"]):
        _fail(f"--cell {cell}: matches no cell of the last {len(runs)} runs (cell ids look like "
              f"{readable[0][1]['cell_id'].iloc[0] if readable and len(readable[0][1]) else 'case/profile/env'!r})")
    print_history(readable, cell)


@app.command("export")
def export_cmd(run_ref: RunArg = None, config: RunsConfigOpt = None,
               fmt: Annotated[str, typer.Option("--format", help="csv, json, jsonl or parquet (parquet needs -o).")] = "csv",
               output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File (default: stdout for text formats).")] = None) -> None:
    """Write a run's results as CSV, JSON, JSON lines or parquet."""
    from .store import EXPORTS, export, read_run

    if fmt not in EXPORTS:
        _fail(f"unknown format {fmt!r}; one of {', '.join(EXPORTS)}")
    _check_output("-o", output)
    frame = read_run(_run_dir(config, run_ref))
    if output is None:
        if fmt == "parquet":
            _fail("parquet needs --output FILE")
        try:
            export(frame, sys.stdout, fmt)
            sys.stdout.flush()
        except BrokenPipeError:  # a reader that stopped reading (`| head`): no failure, nothing more to write
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    _write_output("-o", output, lambda target: export(frame, target, fmt))


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the finding as JSON.")]


def _investigation_progress(event: dict) -> None:
    from .investigations.repro import MUST
    from .report.console import console, escape

    if event["event"] in ("setup", "recorded", "bisect", "repro"):
        text = {"setup": lambda e: f"set up {e['env']}", "recorded": lambda e: f"{e['status']} {e['cell_id']}",
                "bisect": lambda e: f"bisect: {e['version']} ({e['env']})",
                "repro": lambda e: f"repro.py on {e['version']} ({e['env']}): must {MUST[e['expect']]}"}[event["event"]](event)
        console.print(escape(text), soft_wrap=True, highlight=False, style="dim")


@app.command()
def bisect(row: Annotated[str, typer.Argument(metavar="ROW", help="The row: case/k=v/profile, as the matrix prints it.")],
           good: Annotated[str, typer.Option(metavar="VERSION", help="A release where the row has its good verdict.")],
           bad: Annotated[str, typer.Option(metavar="VERSION", help="A release where it has the other verdict: later "
                                                                "(a regression) or earlier (a fix).")],
           engine: Annotated[str, typer.Option(help="onnxruntime (the releases on the package index pip is configured "
                                                     "with) or tensorrt (the TensorRT definitions in images/).")] = "onnxruntime",
           pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases and nightly builds (as pip --pre).")] = False,
           config: ConfigOpt = Path("matrix.toml"), as_json: JsonOpt = False) -> None:
    """Since which release does a row fail (or pass)? A binary search over the engine's releases
    from --good to --bad, each step an ordinary, cached cell run; the finding is also written
    into the newest run folder (bisect/<row>__<engine>-<good>..<bad>/bisect.json: every bisect of a
    row is kept) and shown in the report."""
    import json

    from .environments.definitions import ENGINES
    from .investigations.bisect import BisectError, bisect_row
    from .report.console import escape, out

    if engine not in ENGINES:
        _fail(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    the_plan = _plan(config)
    run_dir = _finding_run(the_plan)
    try:
        found = bisect_row(the_plan, row, engine, good, bad, pre, on_event=_investigation_progress)
    except BisectError as exc:
        _fail(str(exc))
    finding = found.to_json()
    # One finding per question asked: a fix bisect of a row beside its regression bisect, not over it.
    target = _keep_finding(run_dir, "bisect", f"{row}/{engine}-{good}..{bad}", finding)
    if as_json:
        typer.echo(json.dumps({k: finding[k] for k in ("row", "direction", *found.found(), "tested")}))
        return
    for step in sorted(found.tested, key=lambda s: found.versions.index(s.version)):
        worst = "" if step.max_abs is None else f"  max_abs {step.max_abs:.2e}"
        out.print(escape(f"{engine} {step.version:<12} {step.status:<8}{worst}  ({step.environment})"), soft_wrap=True)
    out.print(escape(found.summary()), soft_wrap=True)
    if target is not None:
        out.print(escape(f"written to {target}"), soft_wrap=True)


def _finding_run(the_plan, run_ref: str | None = None) -> Path | None:
    """The run folder an investigation writes into (the newest by default; None when there is no
    run yet), found before its trials run: a run asked for that does not exist costs nothing."""
    from .store import find_run

    try:
        return find_run(the_plan.path("reports_dir"), run_ref)
    except FileNotFoundError as exc:
        if run_ref is not None:
            _fail(str(exc))
        return None


def _keep_finding(run_dir: Path | None, kind: str, item: str, finding: dict, tables=None) -> Path | None:
    """Into the run folder, whose report is rendered again to show it."""
    from .report.publish import render_run
    from .store.findings import write_finding

    if run_dir is None:
        return None
    target = write_finding(run_dir, kind, item, finding, tables)
    render_run(run_dir)
    return target


@app.command()
def explain(cell: Annotated[str, typer.Argument(metavar="CELL", help="The cell: case/k=v/profile/env, as the matrix prints it.")],
            run_ref: RunArg = None, config: ConfigOpt = Path("matrix.toml"), as_json: JsonOpt = False,
            every: Annotated[bool, typer.Option("--all", help="Show the nodes nothing was measured on too "
                                                               "(Constant, Shape, integer nodes).")] = False) -> None:
    """Where does a cell leave tolerance? Every intermediate tensor of its model, run in the cell's
    environment and profile, against float64; the first divergent node is the first whose outputs
    leave tolerance while its inputs are within it, and where no node's error jumps over what its
    inputs handed it, the error is said to be rounding spread over the model. Written into the run
    folder (explain/<cell>/) and shown in the report's cell details."""
    import json

    from .investigations.explain import ExplainError, explain_cell
    from .report.console import escape, fits, out
    from .report.investigation_text import explain_lines, explain_table, first_divergent_line, hidden_line

    the_plan = _plan(config)
    run_dir = _finding_run(the_plan, run_ref)
    try:
        found = explain_cell(the_plan, cell, on_event=_investigation_progress)
    except (ExplainError, ConfigError) as exc:
        _fail(str(exc))
    finding = found.to_json()
    target = _keep_finding(run_dir, "explain", cell, finding, {"layers": found.nodes})
    if as_json:
        typer.echo(json.dumps({k: finding[k] for k in ("cell", "verdict", "first_divergent", "spread", "nodes", "observed",
                                                        "notes")}))
        return
    # Rounding spread over the model: no node is marked as the one where it went wrong.
    first = None if finding.get("spread") else finding["first_divergent"]
    table = explain_table(found.nodes, first, every)
    if fits(table, out):
        out.print(table)
    else:  # a log 80 columns wide: one line per node shown, names whole
        for line in explain_lines(found.nodes, first, every):
            out.print(escape(line), soft_wrap=True, highlight=False)
    hidden = hidden_line(found.nodes, every)
    for line in [*([hidden] if hidden else []), *found.notes, first_divergent_line(finding)] + \
            ([f"written to {target.parent}"] if target else []):
        out.print(escape(line), soft_wrap=True, highlight=False)


@app.command()
def precision(cell: Annotated[str, typer.Argument(metavar="CELL", help="A failing FP16 cell: case/k=v/profile/env.")],
              run_ref: RunArg = None, config: ConfigOpt = Path("matrix.toml"), as_json: JsonOpt = False) -> None:
    """Which layers must stay in FP32 for a failing FP16 cell to pass? Delta debugging over op
    types, then node names, each trial an ordinary cell; prints a profile ready to paste into
    the matrix file. Written into the run folder (precision/<cell>/) and shown in the report."""
    import json

    from .investigations.precision import PrecisionError, find_fp32_nodes
    from .report.console import escape, out
    from .report.investigation_text import fixes_to_paste

    the_plan = _plan(config)
    run_dir = _finding_run(the_plan, run_ref)
    try:
        finding = find_fp32_nodes(the_plan, cell, on_event=_investigation_progress)
    except (PrecisionError, ConfigError) as exc:
        _fail(str(exc))
    target = _keep_finding(run_dir, "precision", cell, finding)
    if as_json:
        typer.echo(json.dumps({k: finding.get(k) for k in ("cell", "keep_fp32", "op_types", "trials", "profile",
                                                             "control", "all_kept", "summary")}))
        return
    out.print(escape(finding["summary"]), soft_wrap=True, highlight=False)
    if finding["profile"]:
        out.print(escape(fixes_to_paste(finding["profile_name"], finding["profile"])), soft_wrap=True, highlight=False)
    if target is not None:
        out.print(escape(f"written to {target}"), soft_wrap=True, highlight=False)


@app.command()
def repro(cell: Annotated[str, typer.Argument(metavar="CELL", help="A failing cell: case/k=v/profile/env.")],
          output: Annotated[Optional[Path], typer.Option("--output", "-o", help="The folder to write (default: "
                                                         "repro/<cell> in the run folder).")] = None,
          run_ref: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="The run it concerns (default: the newest).")] = None,
          config: ConfigOpt = Path("matrix.toml"), as_json: JsonOpt = False) -> None:
    """A folder to file upstream for a failing cell: the smallest model that still fails (from
    explain's first divergent node), its inputs, the float64 expected outputs, a repro.py that
    uses only the engine's API and numpy, and ISSUE.md (the tracker's template filled in). It is
    verified first: repro.py must fail in the cell's environment and pass on the good versions the
    run or a bisect knows; one that does not is kept as repro-unconfirmed (exit 1)."""
    import json

    from .investigations.repro import ReproError, check_target, make_repro
    from .report.console import escape, out
    from .store.findings import finding_dir

    the_plan = _plan(config)
    run_dir = _finding_run(the_plan, run_ref)
    folder = (output or (finding_dir(run_dir, "repro", cell) if run_dir else Path("repro") / cell.replace("/", "__")))
    if problem := check_target(folder.resolve()):
        _fail(problem)
    try:
        found = make_repro(the_plan, cell, folder.resolve(), run_dir, on_event=_investigation_progress)
    except (ReproError, ConfigError) as exc:
        _fail(str(exc))
    finding = found.to_json()
    if run_dir is not None:
        _keep_finding(run_dir, "repro", cell, {**finding, "folder": _relative(found.folder, run_dir)})
    if as_json:
        typer.echo(json.dumps(finding))
    else:
        for line in [*found.notes, found.summary(), f"written to {found.folder}"]:
            out.print(escape(line), soft_wrap=True, highlight=False)
    if not found.confirmed:
        typer.echo(f"not reproduced as expected: kept as {found.folder}", err=True)
        raise typer.Exit(EXIT_REGRESSION)


@app.command("cache")
def cache_cmd(free: Annotated[Optional[list[str]], typer.Option(
                  "--free", metavar="PART", help="Remove this part of the cache (repeatable; all: every part).")] = None,
              config: ConfigOpt = Path("matrix.toml"),
              as_json: Annotated[bool, typer.Option("--json", help="Print the sizes as JSON (bytes).")] = False) -> None:
    """How much trtmatrix's cache (the matrix file's cache_dir) holds, part by part, and what freeing
    each costs; --free removes parts. Every part is made again when needed: freeing one costs time
    at the next run, never a result (run folders keep their own outputs). Don't free while a run
    or an investigation is going."""
    import json

    from .config import load_config
    from .report.console import escape, out
    from .store.cache_usage import PARTS, free as free_parts, size_text, usage

    if not config.is_file():
        _fail(f"{config}: no matrix file (its cache_dir is the cache)")
    cache = (config.resolve().parent / load_config(config).run.cache_dir).resolve()
    if free:
        try:
            freed = free_parts(cache, free)
        except ValueError as exc:
            _fail(str(exc))
        if as_json:
            typer.echo(json.dumps({"cache": str(cache), "freed": freed}))
            return
        for part, count in freed.items():
            out.print(escape(f"freed {part}: {size_text(count)}"), soft_wrap=True, highlight=False)
        out.print(escape(f"freed {size_text(sum(freed.values()))} of {cache}"), soft_wrap=True, highlight=False)
        return
    sizes = usage(cache)
    if as_json:
        typer.echo(json.dumps({"cache": str(cache), "parts": sizes, "total": sum(sizes.values())}))
        return
    for part, count in sizes.items():
        out.print(escape(f"{part:<15} {size_text(count):>9}  {PARTS[part]}"), soft_wrap=True, highlight=False)
    out.print(escape(f"{'total':<15} {size_text(sum(sizes.values())):>9}  in {cache}"), soft_wrap=True, highlight=False)


def _relative(path: Path, run_dir: Path) -> str:
    """A path inside the run folder relative to it (so the report links it), else absolute."""
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path.resolve())


tolerances_app = typer.Typer(no_args_is_help=True, help="Tolerances from measurements.")
app.add_typer(tolerances_app, name="tolerances")


@tolerances_app.command("suggest")
def tolerances_suggest(
        run_ref: RunArg = None, config: RunsConfigOpt = None,
        trusted: Annotated[list[str], typer.Option(metavar="ENV", help="An environment whose results you trust "
                                                                    "(repeatable).")] = ...,
        case: CasesOpt = None,
        factor: Annotated[float, typer.Option(min=1.0, help="Safety factor: atol = factor × the atol the trusted cells "
                                                             "needed (a rule: 1 − factor × their largest gap of cosine "
                                                             "from 1).")] = 2.0,
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the TOML here (default: stdout).")] = None,
) -> None:
    """Per case and profile, the tolerance the trusted environments need (times --factor, never
    below their measured noise) — for a profile judged by an acceptance rule, the rule's cosine
    threshold — as TOML in the matrix file's per-case layout; re-judge a run with it by
    `trtmatrix report RUN --tolerances FILE`."""
    from .config import load_config
    from .report.tolerance_suggestions import suggest, to_toml
    from .store import read_run

    if not math.isfinite(factor):
        _fail(f"--factor {factor}: give a finite number, at least 1")
    _check_output("-o", output)
    run_dir = _run_dir(config, run_ref)
    matrix = load_config(config) if (config := _matrix_file(config)) else None  # its rules, where there is one
    rules = {(name, profile): rule for name, entry in matrix.cases.items() for profile, rule in entry.accept.items()} \
        if matrix else {}
    try:
        found = suggest(read_run(run_dir), trusted, factor, case, rules)
    except ValueError as exc:
        _fail(str(exc))
    text = to_toml(found, run_dir.name, trusted, factor)
    if output is None:
        typer.echo(text)
        return
    _write_output("-o", output, lambda target: target.write_text(text))
    typer.echo(f"{sum(s.atol is not None or s.rule is not None for s in found)} suggestions written to {output}", err=True)


images_app = typer.Typer(no_args_is_help=True, help="Environment definitions under images/: list, build, check.")
app.add_typer(images_app, name="images")
ImagesDirOpt = Annotated[Optional[Path], typer.Option(
    "--images-dir", help="Your folder of environment definitions; those that ship with trtmatrix are taken too (yours "
                         "win a name they share). Default: ./images where there is one, else only those that ship.")]
NamesArg = Annotated[Optional[list[str]], typer.Argument(metavar="ENV", help="Environment names (default: all).")]


def _images_dir(images_dir: Path | None) -> Path:
    """--images-dir, or, not given, ./images where there is one, else the folder that ships with
    trtmatrix: a folder without ./images still has the shipped definitions."""
    from .environments.definitions import BUILTIN_IMAGES

    return images_dir if images_dir is not None else Path("images") if Path("images").is_dir() else BUILTIN_IMAGES


def _envdefs(images_dir: Path | None, names: list[str] | None):
    from .environments.definitions import available_envdefs

    given, images_dir = images_dir is not None, _images_dir(images_dir)
    if not images_dir.is_dir():
        _fail(f"--images-dir {images_dir}: " + ("not a folder" if images_dir.exists() else "no such folder"))
    try:
        envdefs = available_envdefs(images_dir)
    except ConfigError as exc:
        _fail(str(exc))
    if given and not any(images_dir.glob("*.toml")):  # the user named a folder of nothing: said, the shipped ones shown
        typer.echo(f"warning: --images-dir {images_dir}: no environment definitions (*.toml) in it; "
                   f"those that ship with trtmatrix: {len(envdefs)}", err=True)
    unknown = set(names or ()) - {e.name for e in envdefs}
    if unknown:
        _fail(f"no definition in {images_dir} for {', '.join(sorted(unknown))}")
    return [e for e in envdefs if not names or e.name in names]


def _docker():
    from .environments.backend import EnvironmentUnavailable
    from .environments.images import docker_client

    try:
        return docker_client()
    except EnvironmentUnavailable as exc:
        _fail(str(exc), 1)


@images_app.command("list")
def images_list(images_dir: ImagesDirOpt = None) -> None:
    """Every definition: engine, version, backend, what it is built from, and the source of that."""
    from .report.console import print_definitions

    print_definitions(_envdefs(images_dir, None))


@images_app.command("build")
def images_build(names: NamesArg = None, images_dir: ImagesDirOpt = None,
                 no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Only environments that need no GPU.")] = False,
                 force: Annotated[bool, typer.Option(help="Rebuild even when the image is up to date.")] = False) -> None:
    """Build the Dockerfile-based images; an image whose tag exists is up to date and skipped."""
    from .environments.backend import EnvironmentUnavailable
    from .environments.images import build, find_image, local_tag

    client, failed = _docker(), False
    for envdef in _envdefs(images_dir, names):
        if not envdef.dockerfile or (no_gpu and envdef.needs_gpu):
            continue
        tag = local_tag(envdef)
        if not force and find_image(client, tag):
            typer.echo(f"{envdef.name}: {tag} up to date")
            continue
        typer.echo(f"{envdef.name}: building {tag} from {_images_dir(images_dir) / envdef.dockerfile} ...")
        try:
            build(client, envdef)
            typer.echo(f"{envdef.name}: built {tag}")
        except EnvironmentUnavailable as exc:
            failed = True
            typer.echo(f"{envdef.name}: {exc}", err=True)
    raise typer.Exit(1 if failed else 0)


@images_app.command("check")
def images_check(names: NamesArg = None, images_dir: ImagesDirOpt = None) -> None:
    """Which docker images are here, pullable, and runnable on this host — and why not."""
    from .report.console import checks_table, out
    from .environments.images import check

    client = _docker()
    out.print(checks_table([check(client, e) for e in _envdefs(images_dir, names) if e.backend == "docker"]))


def main() -> None:
    """The entry point: a failure of trtmatrix itself (not of a cell, not bad input) is one line
    naming the file that holds the traceback, and exit status 3; --debug prints the traceback.
    A stop signal at any moment is one line and exit 128 + its number."""
    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # as early as can be: stops end cleanly
        signal.signal(signum, _raise_stopped)
    adopt_orphans()
    try:
        _leave(_command(debug))
    except Stopped as exc:
        _stop(exc)


def _command(debug: bool) -> int:
    """The command's exit status."""
    try:
        app()
    except SystemExit as exc:  # typer ends every command with one (usage errors: 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # typer has handled usage errors (2) and Exit already
        if (signum := stop_signal()) is not None:  # Ray's Cython turns the Stopped raised in its wait into a SystemError
            raise Stopped(signum) from exc
        bad = _bad_input(exc)
        if bad and not debug:
            _say_error(bad)
            return EXIT_USAGE
        if debug:
            traceback.print_exc()
            return EXIT_INTERNAL
        _say_error(f"trtmatrix failed: {type(exc).__name__}: {exc} ({_save_traceback()}; --debug prints it)")
        return EXIT_INTERNAL
    return EXIT_OK


def _leave(code: int) -> None:
    """End the process now that the command is done: its exit handlers run, and then neither a
    thread a case file left running (an interpreter's exit would wait for it forever) nor a
    process it started (it would outlive the run) keeps anything alive."""
    atexit._run_exitfuncs()
    remove_temporaries()
    end_descendants()
    _flush()
    os._exit(code)


def _flush() -> None:
    """What is buffered, written before os._exit (a reader that went away takes nothing)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


# A path that is not what it must be (a file for a folder, a dangling link, a loop, no permission):
# bad input, named. A full disk or an I/O error stays trtmatrix's own failure (exit 3).
BAD_PATH_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EACCES, errno.EPERM, errno.EEXIST,
                   errno.EROFS, errno.ENAMETOOLONG}


def _bad_input(exc: Exception) -> str | None:
    """The one line for bad input met after the plan was built (a damaged stored run, a path that
    is not what it must be), or None for a failure of trtmatrix itself."""
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in BAD_PATH_ERRNOS and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return None


def _save_traceback() -> str:
    path = Path(tempfile.gettempdir()) / f"trtmatrix-{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}.traceback"
    try:
        path.write_text(traceback.format_exc())
    except OSError as exc:
        return f"the traceback could not be written to {path}: {exc.strerror}"
    return f"traceback in {path}"


if __name__ == "__main__":
    main()
