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
    from .execute import result_dir, stored_result

    the_plan = _plan(config, case, env)
    cache = the_plan.path("cache_dir")
    for cell in the_plan.cells:
        stored = "stored" if stored_result(result_dir(cache, cell)) else "new"
        typer.echo(f"{cell.cell_id}\t{cell.content_key[:12]}\t{stored}")
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


if __name__ == "__main__":
    app()
