"""Investigations' findings (store/findings.py) as the report's cell details show them: a summary
line each, the bisect steps, the precision profile, and explain's error-by-depth plot."""

from __future__ import annotations

from collections import defaultdict

from .investigation_text import first_divergent_line, precision_profile
from .log_axis import log_axis

PLOT_WIDTH, PLOT_HEIGHT, LEFT, TOP, BOTTOM, EDGE_ROW = 520, 170, 46, 10, 24, 14


def explain_plot(finding: dict) -> dict | None:
    """max_abs of each observed node against its position in topological order (log scale; NaN/Inf
    on a top row, exact zeros on a bottom row); the first divergent node marked; atol dashed."""
    errors = [(order, value) for order, value in finding["errors"] if value is not None]
    if not errors:
        return None
    positive = [v for _, v in errors if v not in ("inf", 0)]
    # NaN/Inf and exact zeros get rows of their own, above and below the decades: never read as a number.
    inf_row = EDGE_ROW if any(v == "inf" for _, v in errors) else 0
    zero_row = EDGE_ROW if any(v == 0 for _, v in errors) else 0
    span = PLOT_HEIGHT - TOP - BOTTOM - inf_row - zero_row
    log_y, ticks = log_axis(positive + [finding["atol"]], TOP + inf_row, span)
    y = lambda v: TOP if v == "inf" else TOP + inf_row + span + zero_row if v == 0 else log_y(v)  # noqa: E731
    ticks += [{"y": TOP, "label": "NaN/Inf"}] * bool(inf_row) + [{"y": y(0), "label": "0"}] * bool(zero_row)
    last = max(finding["nodes"] - 1, 1)
    x = lambda order: round(LEFT + order / last * (PLOT_WIDTH - LEFT - 10), 1)  # noqa: E731
    points = [[x(order), y(value)] for order, value in errors]
    first = finding["first_divergent"]
    marked = None if first is None else [x(first["order"]), y(first["max_abs"] or "inf"), first["node"]]
    return {"width": PLOT_WIDTH, "height": PLOT_HEIGHT, "left": LEFT, "bottom": PLOT_HEIGHT - BOTTOM,
            "points": points, "ticks": ticks, "tol": log_y(finding["atol"]), "first": marked}


def _bisect_view(finding: dict) -> dict:
    return {"summary": f"{finding['engine']} releases {finding['good']} → {finding['bad']}: first with the --bad verdict "
                       f"{finding['first_bad']}, last with the --good verdict {finding['last_good']} "
                       f"({len(finding['tested'])} of {len(finding['versions'])} releases run)",
            "tested": sorted(finding["tested"], key=lambda step: finding["versions"].index(step["version"]))}


def _precision_view(finding: dict) -> dict:
    return {"summary": finding["summary"],
            "profile": precision_profile(finding["profile_name"], finding["profile"]) if finding.get("profile") else None}


def findings_by_cell(findings: dict[str, list[dict]], cells_of_row: dict[str, list[str]]) -> dict[str, dict]:
    """{cell id: {"explain": …, "bisect": …, "precision": …}} for the cells that have any."""
    shown: dict[str, dict] = defaultdict(dict)
    for finding in findings.get("explain", []):
        shown[finding["cell"]]["explain"] = {"summary": first_divergent_line(finding), "notes": finding["notes"],
                                             "plot": explain_plot(finding)}
    for finding in findings.get("precision", []):
        shown[finding["cell"]]["precision"] = _precision_view(finding)
    for finding in findings.get("bisect", []):
        for cell in cells_of_row.get(finding["row"], []):
            shown[cell]["bisect"] = _bisect_view(finding)
    return dict(shown)
