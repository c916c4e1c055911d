"""Investigations of one row or cell: bisect, explain, precision, repro."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from ..config import ConfigError
from .common import ConfigOpt, EXIT_REGRESSION, RunArg, _fail, _plan, _relative, app


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the finding as JSON.")]


_SAID_WAITING: set[str] = set()  # each holder's line once (the lock's waiter says it each time the holder changes)


def _investigation_progress(event: dict) -> None:
    """What an investigation's cell runs do, one dim line each; while another run holds a lock it
    needs, the line `run` prints (`ort-1.32: waiting for run pid 812 which is running …`)."""
    from ..investigations.repro import MUST
    from ..report.console import console, escape, waiting_line

    if event["event"] == "waiting" and (line := waiting_line(event)) not in _SAID_WAITING:
        _SAID_WAITING.add(line)
        console.print(escape(line), soft_wrap=True, highlight=False)
    elif event["event"] in ("setup", "recorded", "bisect", "repro"):
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
                                                     "with), or tensorrt or torch (the versions of that engine's "
                                                     "definitions in images/).")] = "onnxruntime",
           pre: Annotated[bool, typer.Option("--pre", help="Include pre-releases and nightly builds (as pip --pre).")] = False,
           config: ConfigOpt = Path("matrix.toml"), as_json: JsonOpt = False) -> None:
    """Since which release does a row fail (or pass)? A binary search over the engine's releases
    from --good to --bad, each step an ordinary, cached cell run; the finding is also written
    into the newest run folder (bisect/<row>__<engine>-<good>..<bad>/bisect.json: every bisect of a
    row is kept) and shown in the report."""
    import json

    from ..environments.definitions import ENGINES
    from ..investigations.bisect import BisectError, bisect_row
    from ..report.console import escape, out

    if engine not in ENGINES:
        _fail(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    run_dir, found = _investigated(config, None, row, BisectError, lambda the_plan: bisect_row(
        the_plan, row, engine, good, bad, pre, on_event=_investigation_progress))
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


def _investigated(config: Path, run_ref: str | None, item: str, refusal: type[Exception], investigate: Callable):
    """(the run folder its finding about `item` goes into, what `investigate(plan)` found); its
    refusal, or bad input met on the way, is one line and exit 2."""
    the_plan = _plan(config)
    run_dir = _finding_run(the_plan, item, run_ref)
    try:
        return run_dir, investigate(_judged_as(the_plan, run_dir))
    except (refusal, ConfigError) as exc:
        _fail(str(exc))


def _judged_as(the_plan, run_dir: Path | None):
    """The plan with the tolerances the run's verdicts were last judged with: a run of this matrix
    file re-judged with `report --tolerances FILE` is investigated against FILE's entries (said on
    stderr), not against the matrix file's, which would explain a verdict the run does not show. A
    run of another matrix file: its what-if is that file's, not this one's (sweep 10 C11)."""
    from dataclasses import replace

    from ..config import with_tolerances
    from ..report.console import console, escape
    from ..store import last_rejudging, read_run_meta

    if run_dir is None:
        return the_plan
    meta = read_run_meta(run_dir)
    last = last_rejudging(meta)
    if not last.get("tolerances") or Path(meta.get("config", "")).resolve() != the_plan.config_path.resolve():
        return the_plan
    given = Path(last["tolerances"])
    if not given.is_file():
        raise ConfigError(given, "", f"run {run_dir.name} was last judged with this tolerance file (report "
                                     "--tolerances), and it is gone: re-judge the run (trtmatrix report) first")
    console.print(escape(f"tolerances: {the_plan.config_path}'s, with {given}'s entries in their place, as run "
                         f"{run_dir.name} was last judged (report --tolerances)"), soft_wrap=True, highlight=False)
    return replace(the_plan, config=with_tolerances(the_plan.config, given))


def _finding_run(the_plan, item: str, run_ref: str | None = None) -> Path | None:
    """The run folder an investigation of `item` (a cell, or a bisect's row) writes into and speaks
    for: the newest that holds it by default (None when none does), found before its trials run; a
    run asked for that does not exist, or does not hold it, costs nothing (one line, exit 2)."""
    from ..store import find_run, holds, newest_holding

    reports_dir = the_plan.path("reports_dir")
    if run_ref is None:
        run_dir = newest_holding(reports_dir, item)
        return run_dir and _same_model(the_plan, run_dir, item)
    try:
        run_dir = find_run(reports_dir, run_ref)
    except FileNotFoundError as exc:
        _fail(str(exc))
    try:
        held = holds(run_dir, item)
    except ConfigError as exc:  # a damaged run: named
        _fail(str(exc))
    if not held:
        newest = newest_holding(reports_dir, item)
        _fail(f"run {run_dir.name} does not hold {item}: its finding would speak for a run that did not run it; "
              + (f"the newest run that holds it is {newest.name}: give that run, or none" if newest
                 else "no run holds it: give none"))
    return _same_model(the_plan, run_dir, item)


def _same_model(the_plan, run_dir: Path, item: str) -> Path:
    """The run, where it ran `item` on the model and inputs the matrix holds now; else one line, exit 2:
    an edited model investigated as the run's wrote one model's numbers beside another's, and a bisect
    of it kept a "first good" the run's model never had (issue 41, sweep 16 J3, J4, J7). A run that
    recorded no case key (an older trtmatrix) is held to its prepared artifacts instead."""
    from ..store import read_run

    frame = read_run(run_dir, ["cell_id", "row_id", "case_key", "artifact"])
    now = {cell.cell_id: cell for cell in the_plan.cells if item in (cell.cell_id, cell.row_id)}
    for cell_id, given, artifact in zip(frame["cell_id"], frame["case_key"], frame["artifact"]):
        cell = now.get(cell_id)
        if cell is None or (given == cell.case_key if isinstance(given, str) else
                            not isinstance(artifact, str) or artifact == f"{cell.case}-{cell.artifact_key[:16]}"):
            continue
        _fail(f"run {run_dir.name} ran {item} on another model or other inputs than {the_plan.config_path.name} "
              f"names now (its case's files changed since{'' if isinstance(given, str) else ', or trtmatrix did'}): "
              "its finding would speak for a model that run did not judge; run `trtmatrix run` first, then "
              "investigate that run")
    return run_dir


def _keep_finding(run_dir: Path | None, kind: str, item: str, finding: dict, tables=None) -> Path | None:
    """Into the run folder, whose report is rendered again to show it."""
    from ..report.publish import render_run
    from ..store.findings import write_finding

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

    from ..investigations.explain import ExplainError, explain_cell
    from ..report.console import escape, fits, out
    from ..report.investigation_text import explain_lines, explain_table, first_divergent_line, hidden_line

    run_dir, found = _investigated(config, run_ref, cell, ExplainError,
                                   lambda the_plan: explain_cell(the_plan, cell, on_event=_investigation_progress))
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

    from ..investigations.precision import PrecisionError, find_fp32_nodes
    from ..report.console import escape, out
    from ..report.investigation_text import fixes_to_paste

    run_dir, finding = _investigated(config, run_ref, cell, PrecisionError,
                                     lambda the_plan: find_fp32_nodes(the_plan, cell, on_event=_investigation_progress))
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
          run_ref: Annotated[Optional[str], typer.Option("--run", metavar="RUN", help="The run it concerns (default: the newest that holds the cell).")] = None,
          config: ConfigOpt = Path("matrix.toml"), as_json: JsonOpt = False) -> None:
    """A folder to file upstream for a failing cell: the smallest model that still fails (from
    explain's first divergent node), its inputs, the float64 expected outputs, a repro.py that
    uses only the engine's API and numpy, and ISSUE.md (the tracker's template filled in). It is
    verified first: repro.py must fail in the cell's environment and pass on the good versions the
    run or a bisect knows; one that does not is kept as repro-unconfirmed (exit 1)."""
    import json

    from ..investigations.repro import ReproError, check_target, make_repro
    from ..report.console import escape, out
    from ..store.findings import finding_dir

    the_plan = _plan(config)
    run_dir = _finding_run(the_plan, cell, run_ref)
    folder = (output or (finding_dir(run_dir, "repro", cell) if run_dir else Path("repro") / cell.replace("/", "__")))
    if problem := check_target(folder.resolve()):
        _fail(problem)
    try:
        found = make_repro(_judged_as(the_plan, run_dir), cell, folder.resolve(), run_dir, on_event=_investigation_progress)
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
