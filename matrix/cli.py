"""The `trtmatrix` command. A thin layer: each command calls the library and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .config import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Run numeric test cases across inference-runtime versions and report a pass/fail matrix.")

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="The matrix file.")]
CasesOpt = Annotated[Optional[list[str]], typer.Option("--case", help="Only this case (repeatable).")]
EnvsOpt = Annotated[Optional[list[str]], typer.Option("--env", help="Only this environment (repeatable).")]
CellsOpt = Annotated[Optional[list[str]], typer.Option("--cell", help="Only this cell id (repeatable).")]
RunArg = Annotated[Optional[str], typer.Argument(help="Run id, id prefix or run folder (default: the newest run).")]

# Exit statuses (README, "Exit status").
EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2


def _fail(message: str, code: int = EXIT_USAGE):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _plan(config: Path, cases=None, envs=None, cells=None):
    from .plan import build_plan

    try:
        return build_plan(config, cases, envs, cells)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def plan(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None,
         cell: CellsOpt = None) -> None:
    """Print the cells a run would execute, without running anything."""
    from .backends import EnvironmentUnavailable, open_backend
    from .execute import result_dir, result_key, stored_result
    from .staging import stage_worker

    the_plan = _plan(config, case, env, cell)
    cache = the_plan.path("cache_dir")
    fingerprints = {}
    for envdef in the_plan.envs.values():
        try:
            fingerprints[envdef.name] = open_backend(envdef, cache, stage_worker(cache)).fingerprint()
        except EnvironmentUnavailable:
            fingerprints[envdef.name] = None  # no Docker engine: cannot tell which image would run
    for cell in the_plan.cells:
        fingerprint = fingerprints[cell.env]
        key = result_key(cell, fingerprint or "")
        stored = "unknown" if fingerprint is None else "stored" if stored_result(result_dir(cache, key)) else "new"
        typer.echo(f"{cell.cell_id}\t{key[:12]}\t{stored}")
    typer.echo(f"{len(the_plan.cells)} cells: {len(the_plan.rows)} rows × {len(the_plan.envs)} environments",
               err=True)


@app.command()
def run(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None, cell: CellsOpt = None,
        reuse: Annotated[bool, typer.Option(help="Reuse stored results of cells whose result key is unchanged.")] = True,
        junit_xml: Annotated[Optional[Path], typer.Option(help="Also write the cells as JUnit XML here.")] = None,
        ) -> None:
    """Run the matrix and write reports/runs/<run-id>/. Exit 1 when a cell newly fails compared
    with the previous run (a regression), 0 otherwise."""
    from .console import RunProgress, console, results_table, summary_line
    from .junit import write_junit
    from .run import MatrixRun
    from .store import REPORT, previous_run, read_run
    from .upgrade import regressions

    the_plan = _plan(config, case, env, cell)
    with RunProgress(len(the_plan.cells)) as progress:
        run_dir = MatrixRun(the_plan, reuse=reuse, on_event=progress).execute()
    frame = read_run(run_dir)
    console.print(results_table(frame))
    console.print(f"{len(frame)} cells: {summary_line(frame)}")
    console.print(f"report: {run_dir / REPORT}")
    if junit_xml:
        write_junit(frame, junit_xml, run_dir.name)
    before = previous_run(the_plan.path("reports_dir"), run_dir)
    newly_failing = regressions(read_run(before), frame) if before else []
    typer.echo(str(run_dir))
    if len(newly_failing):
        console.print(f"[bold red]{len(newly_failing)} cells newly fail compared with run {before.name}:[/]")
        for _, r in newly_failing.iterrows():
            console.print(f"  {r['cell_id']}: {r['status_before']} → {r['status_now']}")
        raise typer.Exit(EXIT_REGRESSION)


def _reports_dir(config: Path) -> Path:
    from .config import load_config

    if not config.is_file():
        return Path("reports")
    try:
        return config.resolve().parent / load_config(config).run.reports_dir
    except ConfigError as exc:
        _fail(str(exc))


def _run_dir(config: Path, run_ref: str | None) -> Path:
    from .store import find_run

    try:
        return find_run(_reports_dir(config), run_ref)
    except FileNotFoundError as exc:
        _fail(str(exc))


@app.command()
def report(run_ref: RunArg = None, config: ConfigOpt = Path("matrix.toml")) -> None:
    """Re-render a stored run: tolerances from the matrix file and known issues re-applied to the
    stored outputs, nothing run again. Rewrites its tables and report.html."""
    from .config import load_config
    from .known_issues import REGISTRY, load_registry
    from .publish import render_run
    from .rejudge import rejudge
    from .store import REPORT, read_run, write_tables

    run_dir = _run_dir(config, run_ref)
    try:
        matrix = load_config(config)
        issues = load_registry(config.resolve().parent / matrix.run.cases_dir / REGISTRY)
    except ConfigError as exc:
        _fail(str(exc))
    frame = rejudge(run_dir, read_run(run_dir), matrix, issues)
    write_tables(run_dir, frame)
    render_run(run_dir, frame)
    typer.echo(str(run_dir / REPORT))


@app.command()
def diff(run_ref: RunArg = None, config: ConfigOpt = Path("matrix.toml"),
         from_env: Annotated[Optional[str], typer.Option("--from", help="Environment A (default: second newest).")] = None,
         to_env: Annotated[Optional[str], typer.Option("--to", help="Environment B (default: newest).")] = None) -> None:
    """The upgrade view in the terminal: what newly fails, newly passes or stays the same from A to B."""
    from .console import out, upgrade_table
    from .store import read_run
    from .upgrade import compare, default_pair

    frame = read_run(_run_dir(config, run_ref))
    pair = default_pair(frame) or (None, None)
    env_a, env_b = from_env or pair[0], to_env or pair[1]
    for name in (env_a, env_b):
        if name not in set(frame["env"]):
            _fail(f"environment {name!r} is not in this run ({', '.join(sorted(set(frame['env'])))})")
    out.print(upgrade_table(compare(frame, env_a, env_b), env_a, env_b))


@app.command()
def history(config: ConfigOpt = Path("matrix.toml"),
            last: Annotated[int, typer.Option(help="How many of the newest runs.")] = 10,
            cell: Annotated[Optional[str], typer.Option(help="Only cell ids matching this glob.")] = None) -> None:
    """Each cell's status over the newest runs (newest first): the nightly trend."""
    from .console import history_table, out
    from .store import list_runs, read_run

    runs = list_runs(_reports_dir(config))[-last:][::-1]
    if not runs:
        _fail(f"no runs under {_reports_dir(config)}")
    out.print(history_table([(r.name, read_run(r)) for r in runs], cell))


@app.command("export")
def export_cmd(run_ref: RunArg = None, config: ConfigOpt = Path("matrix.toml"),
               fmt: Annotated[str, typer.Option("--format", help="csv, json, jsonl or parquet.")] = "csv",
               output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File (default: stdout for text formats).")] = None) -> None:
    """Write a run's results as CSV, JSON, JSON lines or parquet."""
    import sys

    from .store import EXPORTS, export, read_run

    if fmt not in EXPORTS:
        _fail(f"unknown format {fmt!r}; one of {', '.join(EXPORTS)}")
    frame = read_run(_run_dir(config, run_ref))
    if output is None:
        if fmt == "parquet":
            _fail("parquet needs --output FILE")
        export(frame, sys.stdout, fmt)
    else:
        export(frame, output, fmt)


images_app = typer.Typer(no_args_is_help=True, help="Environment definitions under images/: list, build, check.")
app.add_typer(images_app, name="images")
ImagesDirOpt = Annotated[Path, typer.Option("--images-dir", help="Folder of environment definitions.")]
NamesArg = Annotated[Optional[list[str]], typer.Argument(help="Environment names (default: all).")]


def _envdefs(images_dir: Path, names: list[str] | None):
    from .envdefs import available_envdefs

    try:
        envdefs = available_envdefs(images_dir)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    unknown = set(names or ()) - {e.name for e in envdefs}
    if unknown:
        typer.echo(f"error: no definition in {images_dir} for {', '.join(sorted(unknown))}", err=True)
        raise typer.Exit(2)
    return [e for e in envdefs if not names or e.name in names]


def _docker():
    from .backends import EnvironmentUnavailable
    from .images import docker_client

    try:
        return docker_client()
    except EnvironmentUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@images_app.command("list")
def images_list(images_dir: ImagesDirOpt = Path("images")) -> None:
    """Every definition: engine, version, backend, what it is built from, and the source of that."""
    from .console import definitions_table, out

    out.print(definitions_table(_envdefs(images_dir, None)))


@images_app.command("build")
def images_build(names: NamesArg = None, images_dir: ImagesDirOpt = Path("images"),
                 no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Only environments that need no GPU.")] = False,
                 force: Annotated[bool, typer.Option(help="Rebuild even when the image is up to date.")] = False) -> None:
    """Build the Dockerfile-based images; an image whose tag exists is up to date and skipped."""
    from .backends import EnvironmentUnavailable
    from .images import build, find_image, local_tag

    client, failed = _docker(), False
    for envdef in _envdefs(images_dir, names):
        if not envdef.dockerfile or (no_gpu and envdef.gpu):
            continue
        tag = local_tag(envdef)
        if not force and find_image(client, tag):
            typer.echo(f"{envdef.name}: {tag} up to date")
            continue
        typer.echo(f"{envdef.name}: building {tag} from {images_dir / envdef.dockerfile} ...")
        try:
            build(client, envdef)
            typer.echo(f"{envdef.name}: built {tag}")
        except EnvironmentUnavailable as exc:
            failed = True
            typer.echo(f"{envdef.name}: {exc}", err=True)
    raise typer.Exit(1 if failed else 0)


@images_app.command("check")
def images_check(names: NamesArg = None, images_dir: ImagesDirOpt = Path("images")) -> None:
    """Which docker images are here, pullable, and runnable on this host — and why not."""
    from .console import checks_table, out
    from .images import check

    client = _docker()
    out.print(checks_table([check(client, e) for e in _envdefs(images_dir, names) if e.backend == "docker"]))


if __name__ == "__main__":
    app()
