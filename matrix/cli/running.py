"""`plan` and `run`: the matrix planned, and run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (BaselineOpt, CasesOpt, CellsOpt, ConfigOpt, EXIT_REGRESSION, EXIT_USAGE, EnvsOpt, MAX_SHARDS,
                     ShardOpt, StrictOpt, _check_output, _fail, _plan, app, path_line)
from .gate import _baseline, _baseline_holds, _gate, _say_references


@app.command()
def plan(config: ConfigOpt = Path("matrix.toml"), case: CasesOpt = None, env: EnvsOpt = None,
         cell: CellsOpt = None, shard: ShardOpt = None) -> None:
    """Print the cells a run would execute, without running or writing anything: each cell id, its
    result key ('-' until its case is prepared: the key holds the artifacts' digests) and whether a
    run would reuse a stored result (stored), run it (new), skip it here (skipped: its environment
    cannot run on this host) or cannot tell yet (unknown)."""
    from ..environments import planned_fingerprints
    from ..run import env_skip_reason
    from ..prepare import artifact_digests, prepared
    from ..store.cache import result_dir, result_key, stored_result

    the_plan = _plan(config, case, env, cell)
    if shard:
        the_plan = _shard(the_plan, shard)
    cache = the_plan.path("cache_dir")
    fingerprints = planned_fingerprints(list(the_plan.envs.values()), cache)
    skipped = {name for name, envdef in the_plan.envs.items() if env_skip_reason(envdef)}
    for cell in the_plan.cells:
        fingerprint, artifacts = fingerprints[cell.env], prepared(cache, cell.case, cell.artifact_key)
        key = result_key(cell.content_key, fingerprint or "", artifact_digests(artifacts) if artifacts else {})
        state = ("skipped" if cell.env in skipped else "unknown" if fingerprint is None
                 else "stored" if artifacts and stored_result(result_dir(cache, cell.env, key)) else "new")
        typer.echo(f"{cell.cell_id}\t{key[:12] if artifacts else '-'}\t{state}")
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
        reprepare: Annotated[bool, typer.Option(
            "--reprepare", help="Prepare case files' cases again, though prepared: for what their build reads that "
                                "no key sees (a variable, whether a file exists); cells whose artifacts changed run "
                                "again.")] = False,
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
    fails compared with the previous run (a regression; --baseline: compared with that run), when
    a cell is disputed or has no reference (its case needs inputs away from a rounding step, or
    `expected` outputs: one line per case says which) or, with --strict, when any cell fails,
    errs, crashes or times out outside a known issue; 2 on bad
    input (one line naming the file and key), 3 when trtmatrix itself fails, 128 + n when stopped
    by signal n, 0 otherwise."""
    from ..report.causes import no_tensorrt_compared
    from ..report.console import RunProgress, console, escape, left_out_line, print_results, totals_line
    from ..report.junit import write_junit
    from ..report.look_at import LOOK_AT
    from ..run import MatrixRun
    from ..store import REPORT, RUN_META, read_run, read_run_meta

    the_plan = _plan(config, case, env, cell)
    if shard:
        the_plan = _shard(the_plan, shard)
        if not the_plan.cells:  # an empty run would become "the previous run" of the next one
            typer.echo(f"shard {shard} of this plan has no cells ({len(the_plan.whole)} cells in all): "
                       "nothing run, nothing written", err=True)
            return
    _check_outputs(the_plan, junit_xml)
    baseline_run = _baseline(baseline)
    _baseline_holds(baseline_run, [c.cell_id for c in the_plan.cells], {c.cell_id: c.case_key for c in the_plan.cells})
    executor = _executor(the_plan, ray)
    with RunProgress(len(the_plan.cells)) as progress:  # a stop: main() ends it
        run_dir = MatrixRun(the_plan, reuse=reuse, on_event=progress, executor=executor, reprepare=reprepare).execute()
    frame = read_run(run_dir)
    print_results(frame, full_list=run_dir / LOOK_AT)
    if dropped := left_out_line(read_run_meta(run_dir).get("left_out", {}), run_dir / RUN_META):
        console.print(dropped, soft_wrap=True)
    console.print(escape(totals_line(frame)), soft_wrap=True)  # one line in a log too
    if said := no_tensorrt_compared(frame):  # a run that built engines must not read as one that checked them
        console.print(f"[bold]{escape(said)}[/]", soft_wrap=True)
    _say_references(frame)  # a reference not to be trusted is said, and the run is not all well
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
    typer.echo(path_line(run_dir))
    if newly_failing:
        raise typer.Exit(EXIT_REGRESSION)
    if junit_failed:  # an output path that cannot be written is bad input, as for every command's -o
        raise typer.Exit(EXIT_USAGE)


def _warn_several_issues(frame, issues) -> None:
    """Cells more than one known issue matches: each took the one whose expected verdict it met; cells
    whose failure a known issue's pattern reaches but cannot be told to be its."""
    from ..sources.known_issues import several_matches, unchecked_patterns

    if said := several_matches(frame, issues):
        typer.echo(f"warning: {len(said)} cells match more than one known issue (each takes the one whose "
                   f"`expected` it met, else the first): {'; '.join(said[:3])}{'; …' if len(said) > 3 else ''}",
                   err=True)
    for cell, why in unchecked_patterns(frame, issues):  # sweep 5 #3: a known issue's pattern is no evidence alone
        typer.echo(f"{cell}: {why}", err=True)


def _check_outputs(the_plan, junit_xml: Path | None = None) -> None:
    """Every place a run writes, checked before anything runs: a bad one must never cost a run,
    nor turn a regression's exit 1 into an exit 3 after it."""
    from ..report.publish import HISTORY, INDEX, foreign_page
    from ..store import RUNS, folder_problem
    from ..store.cache import artifacts_folder, results_folder, user_cache_origin
    from ..store.outputs import output_problem

    reports = the_plan.path("reports_dir")
    _check_output("--junit-xml", junit_xml, the_plan.config_path)  # first: it creates no folder
    # The cache is the file's run.cache_dir, else the user's (named by where it came from).
    cache_said = (f"{the_plan.config_path}: run.cache_dir" if the_plan.config.run.cache_dir is not None else
                  f"the user's cache folder ({user_cache_origin()}; no run.cache_dir in {the_plan.config_path})")
    if problem := folder_problem(reports):
        _fail(f"{the_plan.config_path}: run.reports_dir: {problem}")
    cache = the_plan.path("cache_dir")  # its own folders too: a file there would break every cell of one
    for folder in (cache, artifacts_folder(cache), *(results_folder(cache, env) for env in the_plan.envs)):
        if problem := folder_problem(folder):
            _fail(f"{cache_said}: {problem}")
    problem = (folder_problem(reports / RUNS) or output_problem(reports / INDEX) or output_problem(reports / HISTORY)
               or foreign_page(reports))
    if problem:
        _fail(f"{the_plan.config_path}: run.reports_dir: {problem}")


def _shard(the_plan, text: str):
    from ..plan import shard_plan

    found = re.fullmatch(r"([0-9]+)/([0-9]+)", text)  # ASCII digits: '¹/²' is no shard
    index, count = found.groups() if found else ("0", "0")
    if not (found and 1 <= int(index) <= int(count) <= MAX_SHARDS):
        _fail(f"--shard {text}: expected I/N with 1 <= I <= N <= {MAX_SHARDS}, e.g. 2/4")
    return shard_plan(the_plan, int(index), int(count))


def _executor(the_plan, ray_address: str | None):
    """Where the environments run; a missing Ray or an unreachable cluster is one line, exit 2."""
    from ..executors import open_executor

    if ray_address is not None and not ray_address.strip():
        _fail("--ray: empty; give the cluster's address ('auto', host:port or ray://host:10001)")
    try:
        return open_executor(the_plan.config.run, ray_address)
    except ImportError as exc:
        _fail(str(exc))
    except ConnectionError as exc:
        address = ray_address or the_plan.config.run.ray_address
        _fail(f"no Ray cluster answers at {address}: {str(exc).splitlines()[0] if str(exc) else exc}")
