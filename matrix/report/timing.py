"""Speed across versions: per row, each environment's build time and median latency, and the
change against the previous version of the same engine run the same way: a lower version, in the
same kind of environment (a container against a container, a venv or host interpreter against
one of those) on the same GPU model (or both on the CPU). A container against a venv of the same
version, or a CPU against a GPU, is not a change of version and is never compared.

A latency change is flagged when it is larger than the run-to-run spread of the timed
inferences: B's fastest inference slower than A's slowest (slower), or B's slowest faster than
A's fastest (faster) — the two ranges of repeats do not overlap. Build times are shown with their
change and never flagged: each cell builds once, so there is no spread to judge them by. A slower
engine is a finding, never a failure: nothing here changes a cell's status or the exit status.
"""

from __future__ import annotations

import json

import pandas as pd

from .upgrade import env_versions, env_order

FIELDS = ["row_id", "case", "env", "build_s", "infer_ms", "infer_ms_runs"]


def _spread(runs) -> tuple[float, float] | None:
    times = json.loads(runs) if isinstance(runs, str) else None
    return (min(times), max(times)) if times else None


def flag(before: dict, after: dict) -> str | None:
    """'slower' / 'faster' where the repeats' ranges do not overlap, else None."""
    a, b = _spread(before.get("infer_ms_runs")), _spread(after.get("infer_ms_runs"))
    if a is None or b is None:
        return None
    if b[0] > a[1]:
        return "slower"
    if b[1] < a[0]:
        return "faster"
    return None


def _change(before, after) -> float | None:
    """after / before - 1, where both were measured."""
    if pd.isna(before) or pd.isna(after) or not before:
        return None
    return float(after) / float(before) - 1


def _places(frame: pd.DataFrame) -> dict[str, tuple]:
    """{env: (engine, in a container, GPU model)}: environments whose timings compare."""
    places = {}
    for env, group in frame.groupby("env", sort=False):
        image, gpu = (group[c].dropna() if c in group else pd.Series() for c in ("image", "gpu"))
        places[env] = (group["engine"].iloc[0], not image.empty, str(gpu.iloc[0]) if len(gpu) else "")
    return places


def timing_view(frame: pd.DataFrame) -> tuple[list[str], list[dict]]:
    """(environments in order, one dict per row: {"row_id", "case", "cells": [per environment:
    {"build_s", "infer_ms", "build_change", "infer_change", "flag"} or None]}). A change is against
    the nearest lower version that timed this row in the same place (_places)."""
    envs = env_order(frame)
    versions = {env: version for env, (_, version) in env_versions(frame).items()}
    places = _places(frame)
    cells = {(r["row_id"], r["env"]): r for r in frame[[c for c in FIELDS if c in frame]].to_dict("records")}
    rows = []
    for row_id in dict.fromkeys(frame["row_id"]):
        shown, timed = [], {}  # timed: {place: [(version, cell), ...] in version order}
        for env in envs:
            cell = cells.get((row_id, env))
            if cell is None or (pd.isna(cell.get("build_s")) and pd.isna(cell.get("infer_ms"))):
                shown.append(None)
                continue
            earlier = timed.setdefault(places[env], [])
            before = next((c for version, c in reversed(earlier) if version < versions[env]), None)
            shown.append({"build_s": cell.get("build_s"), "infer_ms": cell.get("infer_ms"),
                          "build_change": _change(before["build_s"], cell["build_s"]) if before else None,
                          "infer_change": _change(before["infer_ms"], cell["infer_ms"]) if before else None,
                          "flag": flag(before, cell) if before else None})
            earlier.append((versions[env], cell))
        if any(shown):
            rows.append({"row_id": row_id, "case": cells[next((row_id, e) for e in envs if (row_id, e) in cells)]["case"],
                         "cells": shown})
    return envs, rows


def timing_text(cell: dict | None) -> str:
    """'0.35 ms (+12% ▲ slower) · build 1.2 s (-30%)' for a table cell."""
    if cell is None:
        return "—"
    parts = []
    if pd.notna(cell["infer_ms"]):
        text = f"{cell['infer_ms']:.3g} ms"
        if cell["infer_change"] is not None:
            text += f" ({cell['infer_change']:+.0%}" + {"slower": " ▲ slower", "faster": " ▼ faster"}.get(cell["flag"], "") + ")"
        parts.append(text)
    if pd.notna(cell["build_s"]):
        text = f"build {cell['build_s']:.2g} s"
        if cell["build_change"] is not None:
            text += f" ({cell['build_change']:+.0%})"
        parts.append(text)
    return " · ".join(parts)
