"""Per operator, how an external suite's tests fared in each environment: a 4,000-cell node
suite is read by operator ("which ops does 1.17 still refuse?"), not cell by cell. A test counts
for the operator it tests: its model's only operator; for an `_expanded` node test (the op's
function written out in other ops), the operator of the test it expands; a model of several
operators (a zoo model) counts for each."""

from __future__ import annotations

import json

import pandas as pd

from ..statuses import GOOD, ORDER, WORST_FIRST
from .upgrade import env_order



def _shade(statuses: dict[str, int]) -> str:
    """The colour of an operator's cell: its worst status."""
    worst = [s for s in WORST_FIRST if statuses.get(s)]
    return worst[0] if worst else ("pass" if statuses else "")


def _tested(name: str, operators: list[str], tests: dict[str, list[str]]) -> list[str]:
    expands = tests.get(name.split("_expanded")[0]) if "_expanded" in name else None
    if len(operators) > 1 and expands and len(expands) == 1:
        return expands
    return operators


def tested_operators(frame: pd.DataFrame) -> dict[str, list[str]]:
    """{row_id: the operators its suite test counts for}; rows outside suites are absent."""
    suite = frame[frame["suite"].notna() & frame["operators"].notna()].drop_duplicates("row_id")
    names = [json.loads(params).get("test", "") for params in suite["params"]]
    tests = {name: ops.split() for name, ops in zip(names, suite["operators"])}
    return {row_id: _tested(name, ops.split(), tests) for row_id, name, ops in zip(suite["row_id"], names, suite["operators"])}


def operator_counts(frame: pd.DataFrame, tested: dict[str, list[str]]) -> list[dict]:
    """[{operator, not_passing, envs: [{good, total, counts: {status: n}, shade} per env]}] (`good`:
    pass, xpass or built; `counts`: every status, so a built cell never reads as a pass), the
    operators with the most cells not passing first; empty for a run without suite rows."""
    suite = frame[frame["row_id"].isin(tested)]
    if suite.empty:
        return []
    exploded = suite.assign(operator=suite["row_id"].map(tested)).explode("operator")
    table: dict[str, dict[str, dict[str, int]]] = {}  # operator → env → status → cells
    for (operator, env, status), n in exploded.groupby(["operator", "env", "status"]).size().items():
        table.setdefault(operator, {}).setdefault(env, {})[status] = int(n)
    envs, shown = env_order(frame), []
    for operator, by_env in table.items():
        per_env = []
        for env in envs:
            statuses = by_env.get(env, {})
            per_env.append({"good": sum(statuses.get(s, 0) for s in GOOD), "total": sum(statuses.values()),
                            "counts": {s: statuses[s] for s in ORDER if statuses.get(s)},
                            "shade": _shade(statuses)})
        shown.append({"operator": operator, "envs": per_env,
                      "not_passing": sum(e["total"] - e["good"] for e in per_env)})
    return sorted(shown, key=lambda o: (-o["not_passing"], o["operator"]))
