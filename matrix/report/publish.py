"""Render a run folder's report.html, and the pages across runs: reports/index.html (every run,
with its environments and counts) and reports/history.html (each cell's status over the last runs).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pandas as pd

from ..store import (REPORT, DamagedRun, finish_run, left_out, list_runs, read_run, read_run_meta, rejudged_note,
                     write_text_atomically)
from ..store.findings import read_findings
from ..store.outputs import write_text_output
from ..store.swap import refuse_other_kind
from .a_vs_b import a_vs_b
from .look_at import LOOK_AT, look_at_text
from .html import DETAILS, STATUSES, TEMPLATES, TIMING, Report, render_report
from .run_summaries import history_cells, run_summary, write_summaries
from .upgrade import default_pair, natural_key

INDEX, HISTORY = "index.html", "history.html"
HISTORY_RUNS = 30
# How a page across runs says trtmatrix wrote it; pages of an earlier trtmatrix say it by their titles.
GENERATOR = '<meta name="generator" content="trtmatrix">'
TITLES = {INDEX: "<title>trtmatrix runs</title>", HISTORY: "<title>trtmatrix history</title>"}


def foreign_page(reports_dir: Path) -> str | None:
    """Why index.html or history.html of `reports_dir` must not be written over, or None: a page
    trtmatrix did not write (`reports_dir = "."`: the project's own index.html) is the user's."""
    for name, title in TITLES.items():
        if not (reports_dir / name).is_file():  # none yet; a FIFO is written into, a folder refused (output_problem)
            continue
        try:
            with open(reports_dir / name, encoding="utf-8", errors="replace") as page:
                head = page.read(2000)
        except OSError:  # unreadable: output_problem's to say
            continue
        if GENERATOR not in head and title not in head:
            return (f"{reports_dir / name} is not a page trtmatrix wrote: not written over; give run.reports_dir a "
                    "folder of its own (or move the file)")
    return None


def write_report(run_dir: Path, frame: pd.DataFrame, speed_tests: Path | None = None, into: Path | None = None) -> None:
    """`speed_tests`: as for html.render_report. `into`: where the report's files go, beside the
    run.json it shows (a re-judging's staging folder, store/swap.py); the run folder by default."""
    into = into or run_dir
    pair = default_pair(frame)
    try:
        against = a_vs_b(run_dir, frame, *pair) if pair else None
    except DamagedRun as exc:  # the report is written all the same, without B against A
        print(f"warning: {exc}; B against A is left out of the report", file=sys.stderr, flush=True)
        against = None
    write_rendered(into, render_report(frame, read_run_meta(into), read_findings(run_dir), against, speed_tests))
    write_text_atomically(into / LOOK_AT, look_at_text(frame))
    write_summaries(into, frame)


def write_rendered(folder: Path, report: Report) -> None:
    """report.html and its details folder: the new details complete before they replace the old.
    Something else under the details folder's name (a file, a link) is named and left as it is;
    the temporary folder never stays behind."""
    tmp, target = folder / f".{DETAILS}.{os.getpid()}.tmp", folder / DETAILS
    refuse_other_kind(target, folder=True)
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for index, text in enumerate(report.details):
            (tmp / f"{index}.js").write_text(text)
        (tmp / TIMING).write_text(report.timing)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_text_atomically(folder / REPORT, report.page)


def publish_staged(staged: Path, frame: pd.DataFrame, speed_tests: Path | None = None) -> Path:
    """A staged `<run-id>.partial` folder given its report and its final name, then the index
    and history of its reports folder; a failure (a full disk) leaves nothing half-written.
    `speed_tests`: as for html.render_report."""
    try:
        write_report(staged, frame, speed_tests)
        run_dir = finish_run(staged)  # complete, report included, before it gets its final name
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    render_index(run_dir.parent.parent)
    return run_dir


def render_run(run_dir: Path, frame: pd.DataFrame | None = None) -> None:
    """report.html of this run, then the index and history of the reports folder it sits in."""
    write_report(run_dir, read_run(run_dir) if frame is None else frame)
    render_index(run_dir.parent.parent)


def render_index(reports_dir: Path) -> None:
    """index.html (a line per run) and history.html (the last HISTORY_RUNS runs), from each run's
    summaries (run_summaries.py): a new run costs its own summaries, not a re-read of every run."""
    if problem := foreign_page(reports_dir):  # `run` refuses it before it starts; `report` and `merge` say it here
        print(f"warning: {problem}", file=sys.stderr, flush=True)
        return
    summaries, history = [], []
    for run_dir in reversed(list_runs(reports_dir, warn=True)):
        try:
            summary = run_summary(run_dir)  # a what-if's verdicts are marked (issue 41, sweep 18 L13)
            summaries.append({**summary, "rejudged": rejudged_note(summary)})
            if len(history) < HISTORY_RUNS:
                history.append((run_dir.name, history_cells(run_dir)))
        except DamagedRun as exc:
            left_out(exc)
    # Checked as outputs before a run (a link to a web server's folder stays a link).
    write_text_output(reports_dir / INDEX, TEMPLATES.get_template("index.html.j2").render(runs=summaries, statuses=STATUSES))
    write_text_output(reports_dir / HISTORY, TEMPLATES.get_template("history.html.j2").render(**history_table(history)))


def history_table(history: list[tuple[str, list[list[str]]]]) -> dict:
    """Rows: every cell id seen in the last runs, each with [status, text] or None per run;
    columns: those runs, newest first."""
    run_ids = [run_id for run_id, _ in history]
    cells: dict[str, list] = {}
    for index, (_, run_cells) in enumerate(history):
        for cell_id, status, text in run_cells:
            cells.setdefault(cell_id, [None] * len(history))[index] = [status, text]
    return {"run_ids": run_ids, "cells": sorted(cells.items(), key=lambda item: natural_key(item[0]))}
