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


def _plan(config: Path, cases, envs):
    from .plan import build_plan

    try:
        return build_plan(config, cases, envs)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def plan(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None) -> None:
    """Print the cells a run would execute, without running anything."""
    from .backends import EnvironmentUnavailable, open_backend
    from .execute import result_dir, result_key, stored_result
    from .staging import stage_worker

    the_plan = _plan(config, case, env)
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
def run(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None,
        reuse: Annotated[bool, typer.Option(help="Reuse stored results of cells whose content key is unchanged.")] = True,
        ) -> None:
    """Run the matrix and write reports/runs/<run-id>/ (results.parquet, results.jsonl, report.html)."""
    from .console import RunProgress, console, results_table, summary_line
    from .run import MatrixRun
    from .store import REPORT, read_run

    the_plan = _plan(config, case, env)
    with RunProgress(len(the_plan.cells)) as progress:
        run_dir = MatrixRun(the_plan, reuse=reuse, on_event=progress).execute()
    frame = read_run(run_dir)
    console.print(results_table(frame))
    console.print(f"{len(frame)} cells: {summary_line(frame)}")
    console.print(f"report: {run_dir / REPORT}")
    typer.echo(str(run_dir))


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
