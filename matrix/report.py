"""The run's report.html: one self-contained page (inline CSS, no network), rendered by jinja2
with autoescaping on, because engine logs and errors contain `<` and `&`."""

from __future__ import annotations

import json

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

STATUSES = ["pass", "fail", "error", "crash", "timeout", "skipped", "xfail", "xpass"]

_jinja = Environment(loader=PackageLoader("matrix", "templates"), autoescape=select_autoescape(default=True))


def key_number(row: pd.Series) -> str:
    """What a cell shows besides its colour: the worst absolute error when there are numbers."""
    if pd.notna(row.get("max_abs")):
        return f"{row['max_abs']:.2e}"
    return row["status"]


def cell_title(row: pd.Series) -> str:
    lines = [f"{row['cell_id']}: {row['status']}"]
    if pd.notna(row.get("engine_version")):
        lines.append(f"{row['engine']} {row['engine_version']} (reported)")
    if pd.notna(row.get("max_abs")):
        lines.append(f"max_abs {row['max_abs']:.3e}  max_rel {row['max_rel']:.3e}  "
                     f"mismatch {row['mismatch_frac']:.2%}  (atol {row['atol']:g}, rtol {row['rtol']:g})")
    if row.get("error"):
        lines.append(str(row["error"]))
    return "\n".join(lines)


def render_report(frame: pd.DataFrame, run_id: str) -> str:
    envs = list(pd.unique(frame["env"]))
    engines = dict(zip(frame["env"], frame["engine"]))
    rows = []
    for row_id, group in frame.groupby("row_id", sort=False):
        by_env = {r["env"]: {"status": r["status"], "text": key_number(r), "title": cell_title(r),
                             "cell_id": r["cell_id"]} for _, r in group.iterrows()}
        first = group.iloc[0]
        rows.append({"row_id": row_id, "case": first["case"], "params": json.loads(first["params"]),
                     "profile": first["profile"], "cells": [by_env.get(e) for e in envs]})
    problems = frame[~frame["status"].isin(["pass", "xfail"])].to_dict("records")
    counts = frame["status"].value_counts().reindex(STATUSES, fill_value=0)
    return _jinja.get_template("report.html.j2").render(
        run_id=run_id, envs=envs, engines=engines, rows=rows, problems=problems,
        counts={s: int(n) for s, n in counts.items() if n}, statuses=STATUSES)
