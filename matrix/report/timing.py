"""Speed across versions: per row, each environment's build time and median latency, and the
change against the previous version of the same engine run the same way: a lower version, in the
same kind of environment (a container against a container, a venv or host interpreter against
one of those) on the same GPU model (or both on the CPU). A container against a venv of the same
version, or a CPU against a GPU, is not a change of version and is never compared.

A latency change is flagged only where both hold (asv's rule for `asv compare`):
- a statistical test over the timed inferences says the two differ: Mann-Whitney U (scipy's),
  two-sided, p < 0.002 — which needs at least 7 inferences a side (with 6, the smallest p it can
  give is 0.0022); the worker times 10 (engines.REPEATS), older results with fewer are not tested;
- the medians, and the fastest inferences too, differ by more than a stated factor (FACTOR,
  `diff --timing --factor`), the same way: on a shared machine load alone moves a cell's times
  between environments that run minutes apart (two definitions of one onnxruntime: medians up to
  2.5× apart here, tests/test_timing.py), and a test over the repeats of each cannot tell that
  from a slower engine; load slows some inferences, a slower engine all of them, its fastest too;
- the medians differ by at least MIN_DIFF_MS: below that a cell's time is the call's own overhead and
  the scheduler's jitter (two definitions of one onnxruntime timed 0.006 and 0.016 ms for one Clip,
  every repeat apart, on this shared machine: CI's run of tests/test_timing.py).
A test's p-value is a function of the two samples alone, remembered in the cache by them (a run
passes the folder): an unchanged re-run tests the same pairs again, and importing scipy.stats for
that costs more than the rest of its report (0.75 s).
Build times are shown with their change and never flagged: each cell builds once, so there is no
sample to test. A slower engine is a finding, never a failure: nothing here changes a cell's
status or the exit status.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd

from ..store import write_text_atomically
from ..store.hashing import hash_json
from .upgrade import env_versions, env_order, records

FIELDS = ["row_id", "case", "env", "build_s", "infer_ms", "infer_ms_runs"]
P_THRESHOLD = 0.002  # asv's statistics.is_different
MIN_RUNS = 7  # the fewest timed inferences a side with which a two-sided U test can reach P_THRESHOLD
FACTOR = 1.5  # the smallest ratio of medians flagged (docs/judging.md, "Speed across versions")
MIN_DIFF_MS = 0.1  # the smallest difference of medians flagged, whatever the ratio


def _times(runs) -> list[float]:
    return json.loads(runs) if isinstance(runs, str) else []


def significance(before: dict, after: dict, remembered: Path | None = None) -> float | None:
    """The two-sided Mann-Whitney U p-value of the two cells' timed inferences; None with too few.
    `remembered`: the folder where p-values are kept by their samples (store.cache.speed_tests)."""
    a, b = _times(before.get("infer_ms_runs")), _times(after.get("infer_ms_runs"))
    if min(len(a), len(b)) < MIN_RUNS:
        return None
    if remembered is None:
        return _u_test(a, b)
    memo = remembered / f"{hash_json([a, b])[:32]}.json"
    try:
        return float(json.loads(memo.read_text()))
    except (OSError, ValueError, TypeError):  # not tested yet, or a damaged entry
        pass
    p = _u_test(a, b)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(memo, json.dumps(p))
    except OSError:  # a read-only cache: tested again next time
        pass
    return p


def _u_test(a: list[float], b: list[float]) -> float:
    from scipy.stats import mannwhitneyu  # only where a pair is tested: its import costs 0.75 s

    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def flag(before: dict, after: dict, factor: float = FACTOR, remembered: Path | None = None) -> str | None:
    """'slower' / 'faster' where the U test says the repeats differ and both the medians and the
    fastest inferences differ by more than `factor` the same way, by MIN_DIFF_MS at least, else None."""
    a, b = _times(before.get("infer_ms_runs")), _times(after.get("infer_ms_runs"))
    if not a or not b or min(a) <= 0:
        return None
    medians = statistics.median(a), statistics.median(b)
    if abs(medians[1] - medians[0]) < MIN_DIFF_MS:
        return None
    ratios = (medians[1] / medians[0], min(b) / min(a))
    if not (all(r > factor for r in ratios) or all(r < 1 / factor for r in ratios)):
        return None
    p = significance(before, after, remembered)
    if p is None or p >= P_THRESHOLD:
        return None
    return "slower" if ratios[0] > 1 else "faster"


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


def place_names(frame: pd.DataFrame) -> dict[str, str]:
    """{env: where it runs, in words ('onnxruntime, venv or host, CPU')}: one line of a speed plot each."""
    return {env: f"{engine}, {'container' if container else 'venv or host'}, {gpu or 'CPU'}"
            for env, (engine, container, gpu) in _places(frame).items()}


def timing_view(frame: pd.DataFrame, pair: tuple[str, str] | None = None, factor: float = FACTOR,
                remembered: Path | None = None) -> tuple[list[str], list[dict]]:
    """(environments in order, one dict per row: {"row_id", "case", "cells": [per environment:
    {"build_s", "infer_ms", "build_change", "infer_change", "flag"} or None]}). A change is against
    the nearest lower version that timed this row in the same place (_places); with `pair` (A, B),
    B against A only, whatever their versions (two definitions of one version: a null check);
    `remembered`: as for significance."""
    envs = list(pair) if pair else env_order(frame)
    versions = {env: version for env, (_, version) in env_versions(frame).items()}
    if pair:
        versions = {pair[0]: 0, pair[1]: 1}
    places = _places(frame)
    cells = {(r["row_id"], r["env"]): r for r in records(frame[[c for c in FIELDS if c in frame]])}
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
                          "flag": flag(before, cell, factor, remembered) if before else None})
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
