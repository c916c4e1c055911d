"""Investigations' findings (store/findings.py) as the report's cell details show them: a summary
line each, the bisect steps, the precision profile, explain's error-by-depth plot, and the
link to repro's folder."""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import PurePosixPath
from urllib.parse import quote

import pandas as pd

from .investigation_text import first_divergent_line, fixes_to_paste
from .log_axis import error_axis

PLOT_WIDTH, PLOT_HEIGHT, LEFT, TOP, BOTTOM = 520, 170, 46, 10, 24


def explain_plot(finding: dict) -> dict | None:
    """max_abs of each observed node against its position in topological order (log scale; NaN/Inf
    on a top row, exact zeros on a bottom row); the first divergent node marked; atol dashed."""
    errors = [(order, value) for order, value in finding["errors"] if value is not None]
    if not errors:
        return None
    as_number = lambda v: math.inf if v == "inf" else v  # noqa: E731 - JSON writes infinity as "inf"
    y, ticks = error_axis([as_number(v) for _, v in errors] + [finding["atol"]], TOP, PLOT_HEIGHT - TOP - BOTTOM)
    last = max(finding["nodes"] - 1, 1)
    x = lambda order: round(LEFT + order / last * (PLOT_WIDTH - LEFT - 10), 1)  # noqa: E731
    points = [[x(order), y(as_number(value))] for order, value in errors]
    first = finding["first_divergent"]
    marked = None if first is None else [x(first["order"]), y(as_number(first["max_abs"] or "inf")), first["node"]]
    return {"width": PLOT_WIDTH, "height": PLOT_HEIGHT, "left": LEFT, "bottom": PLOT_HEIGHT - BOTTOM,
            "points": points, "ticks": ticks, "tol": y(finding["atol"]), "first": marked}


def _bisect_view(finding: dict) -> dict:
    return {"summary": f"{finding['engine']} releases {finding['good']} (--good) → {finding['bad']} (--bad): "
                       + finding["summary"],
            "tested": sorted(finding["tested"], key=lambda step: finding["versions"].index(step["version"]))}


def _precision_view(finding: dict) -> dict:
    return {"summary": finding["summary"],
            "profile": fixes_to_paste(finding["profile_name"], finding["profile"]) if finding.get("profile") else None}


def repro_href(folder: str) -> str:
    """A repro folder as a link from the run folder's pages: relative inside it, else a file URL."""
    path = PurePosixPath(folder)
    return path.as_uri() if path.is_absolute() else quote(folder)


def _repro_view(finding: dict) -> dict:
    return {"summary": finding["summary"], "folder": finding["folder"], "href": repro_href(finding["folder"]),
            "notes": finding["notes"]}


def findings_by_cell(findings: dict[str, list[dict]], cells_of_row: dict[str, list[str]]) -> dict[str, dict]:
    """{cell id: {"explain": …, "bisect": [… each bisect of its row], "precision": …, "repro": …}} for the
    cells that have any."""
    shown: dict[str, dict] = defaultdict(dict)
    views = {"explain": lambda f: {"summary": first_divergent_line(f), "notes": f["notes"], "plot": explain_plot(f)},
             "precision": _precision_view, "repro": _repro_view, "bisect": _bisect_view}
    for kind, view in views.items():
        for finding in findings.get(kind, []):
            try:
                cells = [finding["cell"]] if kind != "bisect" else cells_of_row.get(finding["row"], [])
                made = view(finding)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:  # a damaged or hand-made file
                print(f"warning: {finding.get('_file', kind)}: not a finding trtmatrix wrote ({type(exc).__name__}: "
                      f"{exc}); left out of the report", file=sys.stderr, flush=True)
                continue
            for cell in cells:  # a row keeps every bisect of it (either direction), one finding each
                if kind == "bisect":
                    shown[cell].setdefault(kind, []).append(made)
                else:
                    shown[cell][kind] = made
    return dict(shown)


def forecasts(frame: pd.DataFrame, models: dict[str, str] | None = None) -> list[dict]:
    """The FP16 risk forecast of each prepared model (one per case and parameters), for the report.
    `models` ({artifact: its ONNX file}, run.json's): the file the pasted commands name (runs
    that did not keep it: model.onnx, the name inside the prepared artifact)."""
    shown, models = [], models or {}
    stored = frame[frame["fp16_forecast"].notna() & (frame["fp16_forecast"] != "null")]
    columns = ["case", "params", "fp16_forecast", "artifact"]
    for case, params, text, artifact in stored.drop_duplicates(["case", "params"])[columns].itertuples(index=False):
        forecast = json.loads(text)
        names = [r["name"] for r in forecast["risky"] if r["name"]]
        label = " ".join([case, *(f"{k}={v}" for k, v in json.loads(params).items())])
        shown.append({"label": label, "nodes": forecast["nodes"], "risky": forecast["risky"], "unknown": forecast["unknown"],
                      "paste": fixes_to_paste(f"{case}-fp16-forecast", {"precision": "fp16", "keep_fp32": names},
                                              models.get(artifact, "model.onnx")) if names else None})
    return shown


def model_checks(frame: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """[(case, its graph checks' sentences)]: said once per case above the matrix (the cells of the
    engine versions a finding concerns carry it in their details too)."""
    if "model_checks" not in frame:
        return []
    stored = frame[frame["model_checks"].notna()].drop_duplicates("case")
    return [(case, json.loads(text)) for case, text in zip(stored["case"], stored["model_checks"])]
