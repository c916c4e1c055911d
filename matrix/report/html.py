"""A run's report: report.html (inline CSS/JS/SVG, no network), rendered by jinja2 with
autoescaping on, because engine logs and errors contain `<` and `&`, and its cells' details in
report-details/<n>.js beside it.

The matrix itself is static HTML, its columns in engine groups with TensorRT's first; each cell
only its colour and text (readable without JavaScript), its permalink id and details index given
by the script. The filters and the upgrade view read a compact line per cell from an embedded JSON
block (jinja's `tojson`, which escapes `<`, `>` and `&`). A cell's details (messages, logs,
metrics per output, findings) are fetched when it is opened: a script file per DETAILS_CHUNK
cells, loaded by a <script> element because that works from file:// pages too, where fetch()
does not; the speed table's texts likewise (TIMING). At 50,000 cells the page stays under 5 MB
(bench/report_bench.py). Everything is written to the page with textContent.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shlex
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from ..statuses import BAD, CHANGES, GOOD, JUDGED, NOT_COMPARABLE, ORDER, REGRESSED
from .findings_view import findings_by_cell, forecasts, model_checks
from .operator_counts import operator_counts, tested_operators
from .log_axis import error_axis
from .a_vs_b import a_vs_b_text
from .causes import left_out_kind, no_tensorrt_compared, not_run_reason
from .reference_lines import reference_lines
from .timing import FACTOR, P_THRESHOLD, place_names, timing_text, timing_view
from .error_text import cosine_text, drift_text, needed_text, rule_text, with_marks, worst_error
from .upgrade import declared_only, default_pair, env_order, records_by_row, version_mismatches, version_texts

STATUSES = ORDER
DETAILS = "report-details"  # the folder beside report.html
DETAILS_CHUNK = 250  # cells per details file: one click loads one small file
TIMING = "timing.js"  # in DETAILS: every timed cell's text for the speed table, loaded when it is opened
MATRIX_CHUNK = 64  # rows a <tbody> of the matrix: the page lays out those in view, not all of them
DIGIT = re.compile(r"\d")
PLOTTED_CASES = 24  # per-case plots drawn at most (the cases with the most failing cells beyond it)
DETAIL_FIELDS = [
    "cell_id", "row_id", "case", "profile", "env", "engine", "env_version", "engine_version", "status", "verdict",
    "max_abs", "max_rel", "mean_abs", "rmse", "cosine", "mismatch_frac", "nan_count", "inf_count", "ref_nonfinite", "nonfinite_found", "wrong_shape", "extra_outputs", "drift_max_abs",
    "drift_run", "runs", "atol", "rtol", "atol_needed", "rtol_needed", "rule", "top1", "worst_slice", "reference",
    "reference_check", "conversion_max_abs", "copy_max_abs", "precision_ran", "left_out",
    "build_s", "infer_ms", "device", "gpu", "gpu_index", "compute_capability", "driver_version", "cuda_version", "cudnn_version",
    "python_version", "image", "image_digest", "node",
    "error", "log_tail", "known_issue", "reported", "pattern_unchecked", "graph_warnings", "precision_check", "reused",
    "engine_bytes", "build_log",
]

# The command that made the report, as a path that works from any folder (after the README's set-up,
# .venv/bin/trtmatrix: `trtmatrix` alone is found only with the venv activated).
_BESIDE = Path(sys.executable).with_name("trtmatrix")
TRTMATRIX = shlex.quote(str(_BESIDE)) if _BESIDE.is_file() else "trtmatrix"

# The templates of every page (report, index, history), shared by html and publish.
TEMPLATES = Environment(loader=PackageLoader("matrix.report", "templates"), autoescape=select_autoescape(default=True))
# JSON in pages without the spaces after its commas: at 50,000 cells half a megabyte of the page.
TEMPLATES.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
COMPACT = {"separators": (",", ":")}


# The columns key_number reads: the history page hands it only these (a dict of every column of
# thirty runs of thousands of cells costs seconds).
KEY_NUMBER_FIELDS = ("status", "nan_count", "inf_count", "max_abs", "nonfinite_found", "wrong_shape", "drift_max_abs", "drift_run",
                     "rule", "precision_check", "build_s", "shape_profile", "precision_ran")


def key_number(row: pd.Series) -> str:
    """What a cell shows besides its colour: the worst error when there are numbers (NaN/Inf
    counts first), ↯ when repeated inferences differed, ⚖ when an acceptance rule judged it, ⚠
    when requested FP32 layers did not (verifiably) run in FP32. A `built` cell: its build time."""
    judged = worst_error(row) if row["status"] in JUDGED else None  # a skipped FP16 copy measured no FP16
    text = judged or {"skipped": "skip"}.get(row["status"], row["status"])
    if text == row.get("nonfinite_found"):  # '-inf expected, -3.4e+38 (float32 lowest) found ×84': the details say it all
        text = text.split(" expected")[0] + " missed"
    if row["status"] == "built" and pd.notna(row.get("build_s")):
        text = f"built {row['build_s']:.2g}s"
    text = with_marks(text, row)
    check = row.get("precision_check")
    return f"{text} ⚠" if isinstance(check, str) and not check.startswith("ok") else text


def _plain(value):
    """A value for the page's JSON: missing → null; ±inf → "inf"/"-inf" (JSON has no infinity)."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def plain_details(frame: pd.DataFrame) -> dict[str, dict]:
    """{cell id: its DETAIL_FIELDS as _plain makes them}, a column at a time: one call per value
    costs seconds at 50,000 cells."""
    columns = []
    for name in DETAIL_FIELDS:
        column = frame[name] if name in frame else pd.Series([None] * len(frame), index=frame.index)
        if pd.api.types.is_float_dtype(column.dtype):
            numbers = column.to_numpy(dtype=float)
            values = numbers.astype(object)
            values[np.isnan(numbers)] = None
            values[numbers == math.inf], values[numbers == -math.inf] = "inf", "-inf"
        else:
            values = column.astype(object).where(column.notna(), None).to_numpy(dtype=object)
            if not pd.api.types.is_string_dtype(column.dtype):  # text or None already: nothing to make plain
                values = [_plain(v) if isinstance(v, (float, np.generic)) else v for v in values]
        columns.append(values)
    return {cell: dict(zip(DETAIL_FIELDS, values)) for cell, values in zip(frame["cell_id"], zip(*columns))}


@functools.lru_cache(maxsize=None)
def params_of(text: str) -> dict:
    """A row's parameters from their JSON, read once per distinct text (a run of 50,000 cells has a
    handful); the dict is shared, never changed."""
    return json.loads(text)


def cell_data(row: dict, config: str, plain: dict) -> dict:
    """A cell's details; `plain`: its DETAIL_FIELDS from plain_details."""
    data = dict(plain)
    data["params"] = params_of(row["params"])
    data["outputs"] = [{k: _plain(v) if isinstance(v, float) else v for k, v in o.items()}
                       for o in json.loads(row["outputs"] or "[]")]
    data["worst"] = worst_error(row, 3)
    data["drift"] = drift_text(row)
    data["needed"] = needed_text(row)
    data["rule"] = rule_text(row)
    # Nothing measured (skipped, error, crash, timeout): no cosine to call undefined.
    data["cosine_text"] = cosine_text(row).removeprefix("cosine ") if row.get("outputs") not in (None, "", "[]") else None
    data["layers"] = layer_summary(row.get("network_layers"))
    data["shape_profile"] = json.loads(row["shape_profile"]) if isinstance(row.get("shape_profile"), str) else None
    data["reproduce"] = f"{TRTMATRIX} run -c {shlex.quote(config)} --cell {shlex.quote(row['cell_id'])} --no-reuse"
    return data


@functools.lru_cache(maxsize=256)
def layer_summary(network_layers) -> str | None:
    """A TensorRT network in one line (its layers by type, its tensors by type): the full list,
    one entry per layer with its ONNX node, stays in the results files, out of the page. Each text
    read once (the default matrix's 115 networks are 17 texts, 7.9 MB)."""
    if not isinstance(network_layers, str):
        return None
    layers = json.loads(network_layers)  # counted most first, ties in order of appearance (as value_counts)
    types = Counter(layer["type"] for layer in layers).most_common()
    dtypes = Counter(d for layer in layers for d in layer["dtypes"]).most_common()
    return (f"{len(layers)} layers: " + ", ".join(f"{t} ×{n}" for t, n in types)
            + "; outputs: " + ", ".join(f"{t} ×{n}" for t, n in dtypes))


def case_plot(frame: pd.DataFrame, case: str, envs: list[str], column: str = "max_abs", per_env: str = "max",
              line: str | None = "atol", places: dict[str, str] | None = None) -> dict:
    """A case's `column` per environment (its rows' `per_env`: the worst max_abs, the median
    latency) for each profile, on a log scale (exact zeros on a "0" row, NaN/Inf on a top row),
    with each profile's `line` (atol) dashed: geometry for a small inline SVG. `places` ({env:
    where it runs}): a line per profile and place, never one joining a venv's point to a container's.
    `frame` may be the case's cells alone (a run of a thousand cases is split once, not filtered
    a thousand times)."""
    width, height, left, top, bottom = 560, 180, 46, 10, 40
    sub = frame[(frame["case"] == case) & frame[column].notna()]
    plotted = [e for e in envs if e in set(sub["env"])]
    if not plotted:
        return {}
    y, ticks = error_axis(list(sub[column]) + (list(sub[line]) if line else []), top, height - top - bottom)
    step = (width - left - 70) / max(len(plotted) - 1, 1)  # room for the last rotated label
    series = []
    sub = sub.assign(_line=sub["profile"] + (" · " + sub["env"].map(places) if places else ""))
    lines = sub["_line"].nunique()
    for index, (profile, group) in enumerate(sub.groupby("_line", sort=False)):
        worst = group.groupby("env")[column].agg(per_env)
        # A NaN/Inf output (max_abs inf) sits on the top row, drawn and labelled apart.
        points = sorted((round(left + plotted.index(e) * step, 1), y(v), "" if np.isfinite(v) else "NaN/Inf")
                        for e, v in worst.items())
        # Earlier lines wider: where profiles coincide (equal errors), each stays visible under the next.
        series.append({"profile": profile, "color": f"hsl({index * 67 % 360}, 65%, 40%)", "points": points,
                       "width": min(1.5 + 1.5 * (lines - 1 - index), 7.5),
                       "tol": y(group[line].iloc[0]) if line else None, "atol": group[line].iloc[0] if line else None})
    labels = [{"x": round(left + i * step, 1), "env": e} for i, e in enumerate(plotted)]
    return {"width": width, "height": height, "left": left, "series": series, "ticks": ticks, "labels": labels,
            "bottom": height - bottom}


@dataclass(frozen=True)
class Report:
    page: str  # report.html
    details: list[str]  # report-details/<n>.js: the details of cells n*DETAILS_CHUNK, ...
    timing: str = "trtmatrixTiming([]);\n"  # report-details/timing.js: the speed table's cells


def details_script(index: int, cells: list[dict]) -> str:
    """A details file: a call the page defines, so that it loads from file:// as a script."""
    return f"trtmatrixDetails({index}, {json.dumps(cells, **COMPACT)});\n"  # NaN, Infinity: JavaScript has both


# The engines' column groups, left to right: what the matrix is for (TensorRT) first, so that it is
# in view in a window of ordinary width; other engines after it, in the order of upgrade.ENGINE_ORDER.
GROUP_ORDER = {"tensorrt": 0, "tensorrt-rtx": 1, "torch": 2, "onnxruntime": 3}
GROUP_NAMES = {"tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX", "torch": "PyTorch", "onnxruntime": "onnxruntime"}


def column_groups(frame: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """[(engine, [env, ...])]: the matrix's columns grouped by engine, TensorRT's first; within a
    group in upgrade.env_order (by version; environments of which nothing ran after the rest)."""
    engines = frame.groupby("env", sort=False)["engine"].first().to_dict()
    groups: dict[str, list[str]] = {}
    for env in env_order(frame):
        groups.setdefault(engines[env], []).append(env)
    return sorted(groups.items(), key=lambda group: GROUP_ORDER.get(group[0], len(GROUP_ORDER)))


def _number(value):
    """max_abs for the page's compact line: four significant digits are all the upgrade view
    shows (its Δ and worst text), and a full float's repr is 22 characters at 50,000 cells."""
    value = _plain(value)
    return float(f"{value:.4g}") if isinstance(value, float) else value


def cell_line(row_index: int, env_index: int, r: dict, data: dict) -> list:
    """What the upgrade view needs of a cell, inline: [row, env, status (index in ORDER), max_abs,
    worst text where it is not max_abs's own (NaN×n, a missed reference NaN), drift text]; empty
    trailing fields are left out. `data`: the cell's details (cell_data), whose texts it reuses."""
    max_abs, worst = _number(r.get("max_abs")), data["worst"]
    line = [row_index, env_index, STATUSES.index(r["status"]), max_abs,
            None if isinstance(max_abs, float) and worst == f"{max_abs:.3e}" else worst, data["drift"]]
    while line[-1] is None:
        line.pop()
    return line


def matrix_body(rows: list[dict]) -> Markup:
    """The matrix's <tbody> elements, escaped: made here rather than in the template, where 50,000
    cells cost seconds of attribute look-ups. Cells carry only their class and text (the page's
    script gives them ids, focus and their details index). MATRIX_CHUNK rows a <tbody>: the page
    lays out only the ones in view (content-visibility); the rows marked `s` hold every text shape
    of each column (digits read alike: the cells' figures are tabular), from which the page
    measures the column widths that the whole table would have."""
    out, shapes = ["<tbody>"], set()
    for number, row in enumerate(rows):
        row_id = escape(row["row_id"])
        ops = f' data-ops=" {escape(row["operators"])} "' if row["operators"] else ""
        params = "".join(f' <span class="muted">{escape(k)}={escape(v)}</span>' for k, v in row["params"].items())
        cells = "".join(f'<td class="c {escape(cell["status"])}">{escape(cell["text"])}</td>' if cell else "<td></td>"
                        for cell in row["cells"])
        heading = f'{row["case"]} {" ".join(f"{k}={v}" for k, v in row["params"].items())} · {row["profile"]}'
        new = {(-1, DIGIT.sub("0", heading))} | {(i, DIGIT.sub("0", cell["text"]))
                                                 for i, cell in enumerate(row["cells"]) if cell}
        sizer = ' class="s"' if not new <= shapes else ""
        shapes |= new
        if number and number % MATRIX_CHUNK == 0:
            out.append("</tbody>\n<tbody>")
        out.append(f'<tr id="row-{row_id}"{sizer} data-case="{escape(row["case"])}" '
                   f'data-statuses="{escape(row["statuses"])}" data-row="{row_id}"{ops}>'
                   f'<th class="row">{escape(row["case"])}{params} · {escape(row["profile"])}'
                   f'<a class="anchor" href="#row-{row_id}">#</a></th>{cells}</tr>')
    out.append("</tbody>")
    return Markup("\n".join(out))


def plotted_cases(frame: pd.DataFrame, limit: int) -> tuple[list[str], int]:
    """The cases the per-case plots draw: every case up to `limit`, beyond it the `limit` cases with
    the most cells that fail, err, crash or time out (a suite's thousand cases would be a thousand
    plots), in their order in the run; with the number left out."""
    cases = list(dict.fromkeys(frame["case"]))
    if len(cases) <= limit:
        return cases, 0
    bad = frame["status"].isin(REGRESSED).groupby(frame["case"]).sum()
    chosen = set(sorted(cases, key=lambda case: -bad.get(case, 0))[:limit])
    return [case for case in cases if case in chosen], len(cases) - limit


def not_run_columns(frame: pd.DataFrame, envs: list[str]) -> list[tuple[str, str, list[str]]]:
    """[(status, why, [env, ...])]: the environments none of whose cells ran, for one reason each,
    grouped by it (a built cell's version-specific prefix left out): said above the matrix, not
    only in each cell's details."""
    groups: dict[tuple[str, str], list[str]] = {}
    for env in envs:
        cells = frame[frame["env"] == env]
        if reason := not_run_reason(cells):
            status = cells["status"].iloc[0]
            groups.setdefault((status, reason.split("not run: ", 1)[-1] if status == "built" else reason), []).append(env)
    return [(status, why, names) for (status, why), names in groups.items()]


def render_report(frame: pd.DataFrame, run: dict, findings: dict[str, list[dict]] | None = None,
                  against: dict[str, dict] | None = None, speed_tests: Path | None = None) -> Report:
    """`findings`: what investigations wrote into the run folder (store/findings.py), shown in
    the details of the cells they concern. `against`: a_vs_b of the default pair, shown in the
    upgrade view when the reader looks at that pair. `speed_tests`: where the speed view's U tests
    are remembered (timing.significance)."""
    groups = column_groups(frame)
    envs = [env for _, members in groups for env in members]
    shown = findings_by_cell(findings or {}, frame.groupby("row_id")["cell_id"].apply(list).to_dict())
    declared = declared_only(frame)
    versions = {env: text + (" (declared)" if env in declared and text else "") for env, (_, text) in version_texts(frame).items()}
    gpus = {env: group["gpu"].dropna().iloc[0] for env, group in frame.groupby("env") if group["gpu"].notna().any()}
    # The GPU filter picks environment columns by what they ran on (skipped environments: "no GPU").
    devices = {env: gpus.get(env, "no GPU") for env in envs}
    # Where each environment ran, shown when that is not only the host that ran the matrix (Ray).
    ran_on = {env: sorted(group["node"].dropna().unique()) for env, group in frame.groupby("env")} if "node" in frame else {}
    away = any(set(n) - {run.get("host")} for n in ran_on.values())
    nodes = {env: ran_on.get(env, []) if away else [] for env in envs}
    config = run.get("config", "matrix.toml")
    cells, lines, rows, timing = [], [], [], []
    tested = tested_operators(frame)
    timing_envs, timed = timing_view(frame, remembered=speed_tests)
    timings = {(row["row_id"], env): cell for row in timed for env, cell in zip(timing_envs, row["cells"]) if cell}
    column = {env: i for i, env in enumerate(envs)}
    plain = plain_details(frame)
    for row_id, group in records_by_row(frame).items():
        by_env = {}
        for r in group:
            by_env[r["env"]] = {"status": r["status"], "text": key_number(r)}
            if timed_cell := timings.get((row_id, r["env"])):  # the speed table's, loaded when it is opened
                timing.append([len(cells), timing_text(timed_cell), timed_cell["flag"]])
            data = cell_data(r, config, plain[r["cell_id"]])
            cells.append({**data, "findings": shown.get(r["cell_id"], {})})
            lines.append(cell_line(len(rows), column[r["env"]], r, data))
        first = group[0]
        rows.append({"row_id": row_id, "case": first["case"], "params": params_of(first["params"]),
                     "operators": " ".join(tested.get(row_id, [])),
                     "profile": first["profile"], "statuses": " ".join(sorted({r["status"] for r in group})),
                     "cells": [by_env.get(e) for e in envs]})
    counts = frame["status"].value_counts().reindex(STATUSES, fill_value=0)
    cases = list(dict.fromkeys(frame["case"]))
    drawn, undrawn = plotted_cases(frame, PLOTTED_CASES)
    plotted = frame.loc[frame["case"].isin(drawn), ["case", "env", "profile", "max_abs", "atol", "infer_ms"]]
    by_case = dict(list(plotted.groupby("case", sort=False)))  # what case_plot reads, split once
    places = place_names(frame)
    flags = Counter(flag for _, _, flag in timing if flag)
    left_out = [(case, test, why) for case, tests in (run.get("left_out") or {}).items() for test, why in tests.items()]
    page = TEMPLATES.get_template("report.html.j2").render(
        left_out=left_out, left_out_reasons=Counter(left_out_kind(why) for _, _, why in left_out).most_common(),
        run=run, envs=envs, groups=[(GROUP_NAMES.get(engine, engine), members) for engine, members in groups],
        not_run=not_run_columns(frame, envs), versions=versions, gpus=gpus, devices=devices, nodes=nodes, rows=rows, body=matrix_body(rows), cases=cases,
        counts={s: int(n) for s, n in counts.items()}, statuses=STATUSES,
        plots=[(case, case_plot(by_case[case], case, envs)) for case in drawn], undrawn=undrawn,
        forecasts=forecasts(frame, run.get("models")),
        model_checks=model_checks(frame), tensorrt_truth=no_tensorrt_compared(frame),
        reference_lines=reference_lines(frame),
        speed_plots=[(case, case_plot(by_case[case], case, envs, "infer_ms", "median", None, places)) for case in drawn],
        timing_p=P_THRESHOLD, timing_factor=f"{FACTOR:g}",
        operators=operator_counts(frame, tested), mismatches=version_mismatches(frame),
        data={"cells": lines, "rows": [row["row_id"] for row in rows], "envs": envs, "pair": default_pair(frame),
              "against": {row: a_vs_b_text(m) for row, m in (against or {}).items()},
              "details": {"folder": DETAILS, "chunk": DETAILS_CHUNK, "timing": TIMING},
              "speed_flags": {"slower": flags["slower"], "faster": flags["faster"]}, "order": STATUSES,
              # statuses.change, in the browser: the upgrade view for any pair the reader picks
              "statuses": {"good": sorted(GOOD), "bad": sorted(BAD), "regressed": sorted(REGRESSED),
                           "not_comparable": sorted(NOT_COMPARABLE),
                           "changes": CHANGES}})
    return Report(page, [details_script(i // DETAILS_CHUNK, cells[i:i + DETAILS_CHUNK])
                         for i in range(0, len(cells), DETAILS_CHUNK)], f"trtmatrixTiming({json.dumps(timing, **COMPACT)});\n")
