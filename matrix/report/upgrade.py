"""Ordering environments by version and comparing two of them: "can we move from A to B?".

The report's upgrade view does the same classification in the browser (any pair the reader
picks); `trtmatrix diff` and the run's exit status use this module.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from packaging.version import InvalidVersion, Version

from ..statuses import GOOD, JUDGED, NOT_COMPARABLE, REGRESSED, change

ENGINE_ORDER = {"onnxruntime": 0, "tensorrt": 1, "tensorrt-rtx": 2, "torch": 3}


def _version(text) -> Version:
    try:
        return Version(str(text))
    except InvalidVersion:
        return Version("0")


def version_texts(frame: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """{env: (engine, version as written)}: the version the worker reported where a cell ran, else
    the configured one ("" where there is none)."""
    firsts = frame.drop_duplicates("env")  # a frame at a time: a report asks ten times, per environment it cost seconds
    ran = frame.loc[frame["engine_version"].notna(), ["env", "engine_version"]].drop_duplicates("env")
    reported = dict(zip(ran["env"], ran["engine_version"]))
    return {env: (engine, str(reported[env]) if env in reported else declared if isinstance(declared, str) else "")
            for env, engine, declared in zip(firsts["env"], firsts["engine"], firsts["env_version"])}


def declared_only(frame: pd.DataFrame) -> set[str]:
    """Environments none of whose cells reported its engine's version: the version shown for them is
    what their definition declares, not one that ran (a skipped TensorRT 8.6 column ran no 8.6)."""
    return {env for env, group in frame.groupby("env", sort=False) if group["engine_version"].isna().all()}


def env_versions(frame: pd.DataFrame) -> dict[str, tuple[str, Version]]:
    """{env: (engine, version)}, as version_texts, parsed for ordering."""
    return {env: (engine, _version(text)) for env, (engine, text) in version_texts(frame).items()}


def version_mismatches(frame: pd.DataFrame) -> list[str]:
    """Environments whose cells report another engine version than their definition declares:
    the matrix's columns would be labelled with a version they do not run (said, once each)."""
    said = []
    for env, group in frame.groupby("env", sort=False):
        declared, reported = group["env_version"].dropna(), group["engine_version"].dropna()
        if len(declared) and len(reported) and _version(declared.iloc[0]) != _version(reported.iloc[0]):
            said.append(f"{env} declares version {declared.iloc[0]}, its cells report {group['engine'].iloc[0]} "
                        f"{reported.iloc[0]}")
    return said


def natural_key(text: str) -> tuple:
    """Cell ids and names in version order: the numbers in them compare as numbers, so
    ort-1.9 comes before ort-1.17 and trt-8.6 before trt-10.0.0."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def env_order(frame: pd.DataFrame) -> list[str]:
    """Environments by engine, then by version, then name; those whose every cell was skipped (no
    GPU here, say) after the rest, so that the columns with results come first in a wide matrix."""
    versions = env_versions(frame)
    skipped = set(frame.groupby("env")["status"].agg(lambda s: (s == "skipped").all()).loc[lambda s: s].index)
    return sorted(versions, key=lambda env: (env in skipped, ENGINE_ORDER.get(versions[env][0], 9), versions[env][1], env))


def default_pair(frame: pd.DataFrame) -> tuple[str, str] | None:
    """An upgrade worth looking at: the two newest distinct versions of one engine, the newest
    engine that has two among the environments whose cells were judged against the reference
    (else: that produced results, e.g. builds; never one version against itself, e.g. a venv and
    a container of it)."""
    versions = env_versions(frame)
    for wanted in (JUDGED, None):
        shown = frame["status"].isin(wanted) if wanted else ~frame["status"].isin(NOT_COMPARABLE)
        envs = set(frame.loc[shown, "env"])
        by_engine: dict[str, dict[Version, str]] = {}
        for env in (e for e in env_order(frame) if e in envs):  # the first environment of each version, in name order
            engine, version = versions[env]
            by_engine.setdefault(engine, {}).setdefault(version, env)
        for engine in sorted(by_engine, key=lambda e: ENGINE_ORDER.get(e, 9), reverse=True):
            newest = by_engine[engine]
            if len(newest) >= 2:
                return tuple(newest[v] for v in sorted(newest)[-2:])
    return None


def nearest_version(frame: pd.DataFrame, env: str, later: bool) -> str | None:
    """The environment of `env`'s engine with the nearest other version before it (or after it,
    `later`): the other end of an upgrade of which only one end is given."""
    versions = env_versions(frame)
    engine, version = versions[env]
    others = [e for e in env_order(frame) if versions[e][0] == engine and
              (versions[e][1] > version if later else versions[e][1] < version)]
    if not others:
        return None
    nearest = min(versions[e][1] for e in others) if later else max(versions[e][1] for e in others)
    return next(e for e in others if versions[e][1] == nearest)


def compare(frame: pd.DataFrame, env_a: str, env_b: str) -> pd.DataFrame:
    """One line per row present in either environment, with the metric delta."""
    cols = ["row_id", "status", "max_abs", "nan_count", "inf_count", "nonfinite_found", "wrong_shape", "drift_max_abs", "drift_run", "atol",
            "atol_needed", "rtol_needed", "precision_ran", "rule", "shape_profile"]  # the last three: a status's marks
    a = frame.loc[frame["env"] == env_a, cols].set_index("row_id")
    b = frame.loc[frame["env"] == env_b, cols].set_index("row_id")
    both = a.join(b, how="outer", lsuffix="_a", rsuffix="_b")
    both["change"] = [change(x, y) for x, y in zip(both["status_a"], both["status_b"])]
    # No difference of infinities (a NaN/Inf output) is shown as a number.
    finite = np.isfinite(both["max_abs_a"].astype(float)) & np.isfinite(both["max_abs_b"].astype(float))
    both["delta_max_abs"] = (both["max_abs_b"] - both["max_abs_a"]).where(finite)
    return both.reset_index()


def regressions(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Cells that were good in the previous run and are bad now (same cell id)."""
    joined = previous[["cell_id", "status"]].merge(current[["cell_id", "status", "max_abs", "nan_count", "inf_count"]], on="cell_id",
                                                   suffixes=("_before", "_now"))
    return joined[joined["status_before"].isin(GOOD) & joined["status_now"].isin(REGRESSED)]


def no_longer_run(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Cells that were good in the previous run and were skipped now (same cell id), with why."""
    joined = previous[["cell_id", "status"]].merge(current[["cell_id", "status", "error"]], on="cell_id",
                                                   suffixes=("_before", "_now"))
    return joined[joined["status_before"].isin(GOOD) & (joined["status_now"] == "skipped")]


def records_by_row(frame: pd.DataFrame) -> dict[str, list[dict]]:
    """The cells as dicts, grouped by row in order: pandas groupby and iterrows cost seconds at
    thousands of cells, and so does to_dict (element by element); a column at a time is 4× faster.
    Values as to_dict gives them (a missing integer is None)."""
    rows: dict[str, list[dict]] = {}
    for record in records(frame):
        rows.setdefault(record["row_id"], []).append(record)
    return rows


def records(frame: pd.DataFrame) -> list[dict]:
    """frame.to_dict("records"), a column at a time (see records_by_row)."""
    names = list(frame.columns)
    return [dict(zip(names, values)) for values in zip(*(_objects(frame[name]) for name in names))]


def _objects(column: pd.Series) -> np.ndarray:
    if isinstance(column.dtype, pd.api.extensions.ExtensionDtype) and not pd.api.types.is_string_dtype(column.dtype):
        return column.to_numpy(dtype=object, na_value=None)  # Int64, boolean: None, not pd.NA
    return column.to_numpy(dtype=object)
