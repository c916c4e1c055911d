"""Ordering environments by version and comparing two of them: "can we move from A to B?".

The report's upgrade view does the same classification in the browser (any pair the reader
picks); `trtmatrix diff` and the run's exit status use this module.
"""

from __future__ import annotations

import pandas as pd
from packaging.version import InvalidVersion, Version

GOOD = {"pass", "xpass"}
BAD = {"fail", "error", "crash", "timeout", "xfail"}
ENGINE_ORDER = {"onnxruntime": 0, "tensorrt": 1}


def _version(text) -> Version:
    try:
        return Version(str(text))
    except InvalidVersion:
        return Version("0")


def env_order(frame: pd.DataFrame) -> list[str]:
    """Environments by engine, then by version (the reported one where a cell ran), then name."""
    keys = {}
    for env, group in frame.groupby("env", sort=False):
        reported = group["engine_version"].dropna()
        version = reported.iloc[0] if len(reported) else group["env_version"].iloc[0]
        keys[env] = (ENGINE_ORDER.get(group["engine"].iloc[0], 9), _version(version), env)
    return sorted(keys, key=keys.get)


def default_pair(frame: pd.DataFrame) -> tuple[str, str] | None:
    """The two newest environments of the newest engine that produced results."""
    ran = frame[frame["status"] != "skipped"]
    order = [e for e in env_order(frame) if e in set(ran["env"])] or env_order(frame)
    if len(order) < 2:
        return None
    engine = frame.loc[frame["env"] == order[-1], "engine"].iloc[0]
    same = [e for e in order if frame.loc[frame["env"] == e, "engine"].iloc[0] == engine]
    return tuple(same[-2:]) if len(same) >= 2 else tuple(order[-2:])


def change(status_a: str, status_b: str) -> str:
    if status_a == "skipped" or status_b == "skipped" or pd.isna(status_a) or pd.isna(status_b):
        return "not comparable"
    if status_a in GOOD and status_b in BAD:
        return "newly failing"
    if status_a in BAD and status_b in GOOD:
        return "newly passing"
    return "unchanged"


def compare(frame: pd.DataFrame, env_a: str, env_b: str) -> pd.DataFrame:
    """One line per row present in either environment, with the metric delta."""
    cols = ["row_id", "status", "max_abs"]
    a = frame.loc[frame["env"] == env_a, cols].set_index("row_id")
    b = frame.loc[frame["env"] == env_b, cols].set_index("row_id")
    both = a.join(b, how="outer", lsuffix="_a", rsuffix="_b")
    both["change"] = [change(x, y) for x, y in zip(both["status_a"], both["status_b"])]
    both["delta_max_abs"] = both["max_abs_b"] - both["max_abs_a"]
    return both.reset_index()


def regressions(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Cells that were good in the previous run and are bad now (same cell id)."""
    joined = previous[["cell_id", "status"]].merge(current[["cell_id", "status", "max_abs"]], on="cell_id",
                                                   suffixes=("_before", "_now"))
    return joined[joined["status_before"].isin(GOOD) & joined["status_now"].isin(BAD - {"xfail"})]
