"""What a stored results table must hold for every view to read it: the columns that name a cell
as text, statuses trtmatrix knows, numbers where numbers belong and JSON where JSON belongs.
Checked as a table is read, so a table of another shape (another tool's parquet, a hand edit) is
one line naming the file, never a traceback deep in a view."""

from __future__ import annotations

import json

import pandas as pd

from ..statuses import ORDER

TEXT = ["cell_id", "row_id", "case", "profile", "env", "engine", "status", "verdict"]
# What each JSON column must decode to, and the type of an array's items (None: anything JSON).
JSON = {"params": (dict, None), "outputs": (list, dict), "infer_ms_runs": (list, (int, float)),
        "network_layers": (None, None), "layer_precisions": (None, None), "fp16_forecast": ((dict, type(None)), None)}
NUMBERS = ["max_abs", "max_rel", "mean_abs", "rmse", "cosine", "mismatch_frac", "atol", "rtol", "atol_needed",
           "rtol_needed", "build_s", "infer_ms", "drift_max_abs"]
REQUIRED = [*TEXT, "params"]  # in every table trtmatrix ever wrote


def _json_problem(text, kind, items) -> str | None:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return "not JSON"
    if kind is not None and not isinstance(value, kind):
        return f"not a JSON {'array' if kind is list else 'object'}"
    if items is not None and not all(isinstance(item, items) and not isinstance(item, bool) for item in value):
        return f"not an array of {'objects' if items is dict else 'numbers'}"
    return None


def table_problem(frame: pd.DataFrame, stored: list[str], wanted: list[str] | None) -> str | None:
    """Why `frame` (the columns `wanted` of a table with the columns `stored`; None: all) is no
    trtmatrix results table, or None. Only the columns read are checked."""
    for column in REQUIRED:
        if (wanted is None or column in wanted) and column not in stored:
            return f"not a trtmatrix results table (no column {column!r})"
    cells = frame["cell_id"] if "cell_id" in frame else pd.Series(range(len(frame)), index=frame.index)
    for column in TEXT:
        if column in frame and (wrong := frame[column].map(lambda v: not isinstance(v, str)).astype(bool)).any():
            return f"column {column!r}: {frame.loc[wrong, column].iloc[0]!r} is not text (cell {cells[wrong].iloc[0]!r})"
    for column in ("status", "verdict"):
        if column in frame and (unknown := ~frame[column].isin(ORDER)).any():
            return (f"column {column!r}: unknown status {frame.loc[unknown, column].iloc[0]!r} "
                    f"(cell {cells[unknown].iloc[0]!r}); statuses are {', '.join(ORDER)}")
    for column in NUMBERS:
        if column in frame and not pd.api.types.is_numeric_dtype(frame[column]) and frame[column].notna().any():
            return f"column {column!r} does not hold numbers"
    for column, (kind, items) in JSON.items():
        if column not in frame:
            continue
        checked: dict[str, str | None] = {}  # each text read once: a TensorRT network's is repeated, megabytes a run
        for cell, text in zip(cells, frame[column]):
            missing = text is None or (not isinstance(text, str) and pd.api.types.is_scalar(text) and pd.isna(text))
            if missing:
                continue
            if isinstance(text, str):
                if text not in checked:
                    checked[text] = _json_problem(text, kind, items)
                problem = checked[text]
            else:
                problem = _json_problem(text, kind, items)
            if problem:
                return f"column {column!r} of cell {cell!r}: {problem}"
    return None


def foreign_rows(frame: pd.DataFrame, run_id) -> str | None:
    """Why `frame` is another run's table (a results.parquet copied over this run's: issue 41, sweep
    8 A9), or None: its run_id column must name the run its run.json records, where both say one."""
    if not isinstance(run_id, str) or "run_id" not in frame:
        return None
    if others := sorted({str(other) for other in frame["run_id"].dropna()} - {run_id}):
        return f"holds the rows of run {others[0]}, not of run {run_id} (its run.json): not this run's table"
    return None
