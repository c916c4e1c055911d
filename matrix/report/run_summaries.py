"""What the index and history pages need of each stored run, kept in the run folder beside what it
sums up: summary.json (environments, counts: a line of the index) and history.json (each cell's
status and key number: a column of the history page). Written with the run's report; made from
results.parquet once for a run that has none, or whose results or run.json changed since (a
re-judged run, a damaged file). The index then reads a few hundred bytes per run, not a year of
parquet files (bench/index_bench.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from ..statuses import ORDER
from ..store import PARQUET, RUN_META, read_run, read_run_meta, write_text_atomically
from .html import KEY_NUMBER_FIELDS, key_number

SUMMARY, HISTORY_CELLS = "summary.json", "history.json"
FORMAT = 1  # bumped when what either file holds changes: older ones are made again


def _stamp(run_dir: Path) -> list[int]:
    """What the summaries were made from: a changed results file or run.json makes them again."""
    return [value for name in (PARQUET, RUN_META) for value in ((run_dir / name).stat().st_size,
                                                                (run_dir / name).stat().st_mtime_ns)]


def _summary(run_dir: Path, frame: pd.DataFrame) -> dict:
    counts = frame["status"].value_counts()
    return {**read_run_meta(run_dir), "envs": sorted(set(frame["env"])), "cells": len(frame),
            "counts": {s: int(counts.get(s, 0)) for s in ORDER}}


def _history_cells(frame: pd.DataFrame) -> list[list[str]]:
    return [[row["cell_id"], row["status"], key_number(row)]
            for row in frame[["cell_id", *KEY_NUMBER_FIELDS]].to_dict("records")]


def _write(run_dir: Path, name: str, content) -> None:
    write_text_atomically(run_dir / name, json.dumps({"format": FORMAT, "stamp": _stamp(run_dir), "content": content}))


def write_summaries(run_dir: Path, frame: pd.DataFrame) -> None:
    _write(run_dir, SUMMARY, _summary(run_dir, frame))
    _write(run_dir, HISTORY_CELLS, _history_cells(frame))


def _is_text(value) -> bool:
    return isinstance(value, str)


def _summary_shape(content) -> bool:
    return (isinstance(content, dict) and isinstance(content.get("envs"), list) and all(map(_is_text, content["envs"]))
            and type(content.get("cells")) is int and isinstance(content.get("counts"), dict)
            and all(type(content["counts"].get(s)) is int for s in ORDER) and _is_text(content.get("run_id")))


def _history_shape(content) -> bool:
    return isinstance(content, list) and all(
        isinstance(cell, list) and len(cell) == 3 and all(map(_is_text, cell)) and cell[1] in ORDER for cell in content)


SHAPES = {SUMMARY: _summary_shape, HISTORY_CELLS: _history_shape}


def _stored(run_dir: Path, name: str):
    """The stored content, or None where it must be made again: missing, of an older format, made
    from other results (its stamp), or — stamp kept — not what trtmatrix writes (said, once: it is
    made again from the results right away)."""
    try:
        stored = json.loads((run_dir / name).read_text())
        if stored["format"] != FORMAT or stored["stamp"] != _stamp(run_dir):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not SHAPES[name](stored["content"]):
        print(f"warning: {run_dir / name}: not what trtmatrix writes there; made again from {PARQUET}",
              file=sys.stderr, flush=True)
        return None
    return stored["content"]


def _made(run_dir: Path, name: str, columns: list[str], make):
    """The stored summary, or one made from the results now (kept where the folder can be written).
    DamagedRun where the results cannot be read."""
    content = _stored(run_dir, name)
    if content is None:
        content = make(read_run(run_dir, columns))
        try:
            _write(run_dir, name, content)
        except OSError:  # a read-only copy of the reports: shown all the same
            pass
    return content


def run_summary(run_dir: Path) -> dict:
    return _made(run_dir, SUMMARY, ["env", "status"], lambda frame: _summary(run_dir, frame))


def history_cells(run_dir: Path) -> list[list[str]]:
    return _made(run_dir, HISTORY_CELLS, ["cell_id", *KEY_NUMBER_FIELDS], _history_cells)
