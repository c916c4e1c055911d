"""Commands over stored runs: report, merge, diff, summary, support, history, export."""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import ExitStack
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..config import ConfigError
from .common import (BaselineOpt, ConfigOpt, EXIT_REGRESSION, RunArg, RunsConfigOpt, StrictOpt, _check_output, _fail,
                     _matrix_file, _plan, _registry, _reports_dir, _run_dir, _write_output, app, path_line)
from .gate import _baseline, _baseline_holds, _gate, _say_references
from .running import _warn_several_issues

# How long a `report` waits for a re-judging of the same run that is stopped (SIGSTOP, Ctrl-Z).
STOPPED_S = 5


@app.command()
def report(run_ref: RunArg = None, config: RunsConfigOpt = None,
           tolerances: Annotated[Optional[Path], typer.Option(
               help="A tolerance file (`tolerances suggest` writes one): its entries replace the matrix file's.")] = None,
           ) -> None:
    """Re-judge a stored run: tolerances from the matrix file (or --tolerances) and known issues
    re-applied to the stored outputs, nothing run again. Rewrites its tables and report.html in
    place; run.json and the report's header say when and with which files."""
    from ..config import load_config, with_tolerances
    from ..sources.known_issues import matrix_registry
    from ..report.publish import render_index, write_report
    from ..report.rejudge import not_in_matrix, rejudge
    from ..run import utc_now
    from ..store import REPORT, matrix_digest, note_rejudged, read_run, read_run_meta, write_tables
    from ..store.locks import STOPPED_WORDS, LockWaitEnded, held, rejudge_lock
    from ..store.swap import staged_swap

    config = _matrix_file(config)
    if config is None:
        _fail("no matrix.toml here: give the matrix file whose tolerances and known issues re-judge the run (-c FILE)")
    run_dir = _run_dir(config, run_ref)
    try:
        matrix, digest = load_config(config), matrix_digest(config)
        if tolerances is not None:
            own, matrix = matrix, with_tolerances(matrix, tolerances)
            if matrix == own:  # `tolerances suggest` with nothing to suggest wrote such a file
                typer.echo(f"warning: {tolerances} changes no tolerance of {config}: the run is re-judged with the "
                           "matrix file's own", err=True)
        issues = matrix_registry(config, matrix)
    except ConfigError as exc:
        _fail(str(exc))
    # Re-judged in place: a second `report` of this run waits, so the run's files are all from one (N10);
    # not for a re-judging that is stopped (Ctrl-Z) and might never go on.
    with ExitStack() as rejudging:
        try:
            rejudging.enter_context(held(rejudge_lock(run_dir), f"re-judging run {run_dir.name}",
                                         lambda who: typer.echo(f"waiting for {who}", err=True), stopped_s=STOPPED_S,
                                         command="report"))
        except LockWaitEnded as exc:  # 'report pid 812 which is re-judging run …', said once (sweep 8 A9)
            _fail(f"{exc.who.removesuffix(STOPPED_WORDS)} has been stopped (SIGSTOP or a suspended job) for {STOPPED_S} "
                  "s: let it go on (kill -CONT) or end it, then report again")
        stored = read_run(run_dir)
        made_from = read_run_meta(run_dir).get("config")
        if made_from and Path(made_from).resolve() != config.resolve():
            typer.echo(f"warning: run {run_dir.name} was made from {made_from}, not {config}: re-judged with the "
                       "tolerances and known issues of the second", err=True)
        if unknown := not_in_matrix(stored, matrix):
            typer.echo(f"warning: {len(unknown)} rows of run {run_dir.name} are of cases or profiles {config} does not "
                       f"have ({', '.join(unknown[:5])}{', …' if len(unknown) > 5 else ''}): their verdicts are kept as the run "
                       "judged them", err=True)
        if tolerances is not None and matrix != own:
            _say_unmatched(tolerances, run_dir, stored, {n for n in matrix.cases if matrix.cases[n] != own.cases[n]})
        frame, problems = rejudge(run_dir, stored, matrix, issues)
        _warn_several_issues(frame, issues)
        with staged_swap(run_dir) as staging:  # a kill leaves the run all of one judgement (sweep 6 #14)
            write_tables(staging, frame)
            # The verdicts are no longer the run's own: run.json and the report's header say with what.
            note_rejudged(run_dir, {"at": utc_now(), "config": str(config.resolve()), "config_digest": digest,
                                    "tolerances": str(tolerances.resolve()) if tolerances else None}, staging)
            write_report(run_dir, frame, into=staging)
        render_index(run_dir.parent.parent)
        typer.echo(changed_statuses(stored, frame, sum(problems.values())), err=True)
        typer.echo(path_line(run_dir / REPORT))
        if problems:  # the report is written, those cells marked; the verdicts it kept are said here
            _fail(f"{sum(problems.values())} cells not re-judged (their verdicts are the run's, marked in the report): "
                  + "; ".join(problems))


def _say_unmatched(tolerances: Path, run_dir: Path, stored, changed: set) -> None:
    """A tolerance file whose cases the run does not hold would re-judge to "none changed" as if it had
    been tried (issue 41, sweep 7, sweep 6 #15): said so instead."""
    if not changed & set(stored["case"]):
        typer.echo(f"warning: {tolerances} matched no cell of run {run_dir.name}: its cases "
                   f"({', '.join(sorted(changed))}) are not in the run", err=True)


def changed_statuses(before, after, kept: int = 0) -> str:
    """'re-judged 24 cells: 3 changed (fail → pass 2, pass → fail 1)', or '…: none changed';
    're-judged 22 of 24 cells: …' where `kept` of them could not be (their stored files are damaged)."""
    from collections import Counter

    was = dict(zip(before["cell_id"], before["status"]))
    moves = Counter(f"{was[cell]} → {status}" for cell, status in zip(after["cell_id"], after["status"])
                    if cell in was and was[cell] != status)
    said = ", ".join(f"{move} {count}" for move, count in moves.most_common())
    judged = f"{len(after) - kept} of {len(after)}" if kept else f"{len(after)}"
    return f"re-judged {judged} cells: " + (f"{sum(moves.values())} changed ({said})" if moves else "none changed")


@app.command()
def merge(runs: Annotated[list[str], typer.Argument(metavar="RUN", help="The shards' runs: ids, id prefixes or run folders.")],
          config: RunsConfigOpt = None,
          junit_xml: Annotated[Optional[Path], typer.Option(help="Also write the merged cells as JUnit XML here.")] = None,
          baseline: BaselineOpt = None, strict: StrictOpt = False,
          ) -> None:
    """Put the N shards of a sharded run (`run --shard I/N`) together as one new run in the matrix
    file's reports folder — the newest, with results, report, index and history. Refuses runs
    that are not all N shards of one plan, or shards re-judged (`report`) with different files;
    shards re-judged alike keep those verdicts, and the merged run says so as they did. Exit 1
    when a cell newly fails compared with the previous whole run (or --baseline), when a cell is
    disputed or has no reference, or with --strict on any failure outside a known issue, as `run`
    does."""
    from ..report.publish import publish_staged
    from ..run import new_run_id
    from ..store import REPORT
    from ..store.merge import MergeError, stage_merged

    reports_dir = _reports_dir(config)
    _check_output("--junit-xml", junit_xml, config)
    baseline_run = _baseline(baseline)
    run_dirs = [_run_dir(config, ref) for ref in runs]
    config = _matrix_file(config)
    order = [c.cell_id for c in _plan(config).cells] if config else []
    try:
        staged, frame = stage_merged(reports_dir, new_run_id(), run_dirs, order)
    except MergeError as exc:
        _fail(str(exc))
    try:
        _baseline_holds(baseline_run, frame["cell_id"])
    except BaseException:  # refused: the merge is not published
        shutil.rmtree(staged, ignore_errors=True)
        raise
    run_dir = publish_staged(staged, frame)
    if junit_xml:
        from ..report.junit import write_junit

        try:
            write_junit(frame, junit_xml, run_dir.name)
        except OSError as exc:
            _fail(f"--junit-xml {junit_xml}: {exc.strerror or exc}")
    typer.echo(f"{len(frame)} cells from {len(run_dirs)} shards", err=True)
    _say_references(frame)  # as `run` says them: a disputed cell exits 1 here too
    typer.echo(f"report: {run_dir / REPORT}", err=True)
    typer.echo(path_line(run_dir))  # the last line, as `run` prints it
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
    from ..report.a_vs_b import a_vs_b, a_vs_b_text
    from ..report.console import print_timing, print_upgrade
    from ..report.timing import FACTOR, place_names, timing_view
    from ..store import read_run
    from ..report.upgrade import compare

    run_dir = _run_dir(config, run_ref)
    frame = read_run(run_dir)
    _say_rejudged(run_dir)
    if timing:
        pair = _pair(frame, from_env, to_env, run_dir) if from_env or to_env else None
        if pair and (places := place_names(frame))[pair[0]] != places[pair[1]]:
            _fail(f"{pair[0]} runs on {places[pair[0]]}, {pair[1]} on {places[pair[1]]}: timings of different places "
                  "are not compared")
        print_timing(*timing_view(frame, pair, factor or FACTOR), factor or FACTOR)
        return
    env_a, env_b = _pair(frame, from_env, to_env, run_dir)
    compared = compare(frame, env_a, env_b)
    measured = a_vs_b(run_dir, frame, env_a, env_b)
    compared["a_vs_b"] = [a_vs_b_text(measured.get(row)) for row in compared["row_id"]]
    print_upgrade(compared, env_a, env_b)


SAID = 5  # environments named in one line


def _elsewhere(run_dir: Path | None, envs: list[str], wanted: list[str] | None = None) -> str:
    """Where the environments a run lacks are (a run made with --env has some of the matrix's): the
    newest other run of its reports folder with each of `wanted` (None: any this run lacks), and how
    to have them in one run; "" where no other run has them."""
    from ..store import DamagedRun, list_runs, read_run_meta

    found: dict[str, str] = {}
    for other in reversed(list_runs(run_dir.parent.parent) if run_dir else []):
        try:
            have = read_run_meta(other).get("environments") or [] if other != run_dir else []
        except DamagedRun:
            continue
        for env in have:
            if env not in envs and (wanted is None or env in wanted):
                found.setdefault(env, other.name)
    if not found:
        return ""
    said = sorted(found.items())[:SAID]
    both = " ".join(f"--env {env}" for env in sorted({*envs, *dict(said)}))
    return (f"; other runs have what this one lacks ({', '.join(f'{env}: run {run}' for env, run in said)}"
            f"{', …' if len(found) > SAID else ''}): an upgrade is read between the environments of one run: "
            f"run them together (trtmatrix run {both})")


def _pair(frame, from_env: str | None, to_env: str | None, run_dir: Path | None = None) -> tuple[str, str]:
    """The upgrade to show: the environments given (one alone: the other end is the nearest other
    version of its engine), else the run's default pair."""
    from ..report.upgrade import default_pair, nearest_version

    envs = sorted(set(frame["env"]))
    for flag, name in (("--from", from_env), ("--to", to_env)):
        if name is not None and name not in envs:
            _fail(f"{flag} {name!r} is not an environment of this run ({', '.join(envs)})"
                  + _elsewhere(run_dir, envs, [n for n in (from_env, to_env) if n and n not in envs]))
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
                  f"({', '.join(envs)})" + _elsewhere(run_dir, envs))
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
    from ..report.a_vs_b import a_vs_b
    from ..report.markdown_summary import summary_markdown
    from ..report.upgrade import compare, default_pair
    from ..store import REPORT, read_run, read_run_meta
    from ..store.findings import read_findings

    _check_output("--output", output, config)
    run_dir = _run_dir(config, run_ref)
    frame = read_run(run_dir)
    # Without --from/--to and no two versions of one engine: the environments alone.
    pair = _pair(frame, from_env, to_env, run_dir) if from_env or to_env else default_pair(frame)
    repros = {finding["cell"]: finding for finding in read_findings(run_dir)["repro"]}
    # Links work from where the file is read: beside the run's report, or from where -o writes it.
    here = os.path.relpath(run_dir / REPORT, Path(os.path.abspath(output)).parent) if output else REPORT
    text = summary_markdown(frame, read_run_meta(run_dir), pair, compare(frame, *pair) if pair else None,
                            a_vs_b(run_dir, frame, *pair) if pair else {}, _registry(config), link_base or here,
                            everything, repros)
    if note := _say_rejudged(run_dir):  # the Markdown travels alone: it says so too
        text = f"> **Note:** {note}.\n\n{text}"
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
    from ..report.support_page import COLUMNS, support_markdown
    from ..store import read_run, read_run_meta

    run_dir = _run_dir(config, run_ref)
    frame = read_run(run_dir, COLUMNS)
    if frame["suite"].isna().all():
        _fail(f"run {run_dir.name} has no suite rows (suite = or suite_dir = cases): nothing to tell per operator")
    command = f"trtmatrix support -c {config} > docs/{config.stem}-support.md"
    typer.echo(support_markdown(frame, read_run_meta(run_dir), command), nl=False)


def _say_rejudged(run_dir: Path) -> str | None:
    """One line on stderr where the run's verdicts are a re-judging's, not its own (store.rejudged_note)."""
    from ..store import DamagedRun, read_run_meta, rejudged_note

    try:
        note = rejudged_note(read_run_meta(run_dir))
    except DamagedRun:
        return None
    if note:
        typer.echo(f"note: {note}", err=True)
    return note


@app.command()
def history(config: RunsConfigOpt = None,
            last: Annotated[int, typer.Option(min=1, help="How many of the newest runs.")] = 10,
            cell: Annotated[Optional[str], typer.Option(
                metavar="GLOB", help="Only cell ids matching this glob (case/k=v/profile/env; * and ? as in a "
                                     "shell).")] = None) -> None:
    """Each cell's status over the newest runs (newest first): the nightly trend."""
    from ..report.console import print_history
    from ..store import DamagedRun, left_out, list_runs, read_run

    if cell is not None and not cell.strip():
        _fail(f"--cell {cell!r}: an empty pattern matches no cell; give a glob of cell ids (case/profile/env, * and ?) "
              "or leave --cell out")
    runs = list_runs(_reports_dir(config), warn=True)[-last:][::-1]
    if not runs:
        _fail(f"no runs under {_reports_dir(config)}")
    readable = []
    for run_dir in runs:
        try:
            readable.append((run_dir.name + (" (re-judged)" if _say_rejudged(run_dir) else ""), read_run(run_dir)))
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
    from ..store import EXPORTS, export, read_run

    if fmt not in EXPORTS:
        _fail(f"unknown format {fmt!r}; one of {', '.join(EXPORTS)}")
    _check_output("-o", output, config)
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
