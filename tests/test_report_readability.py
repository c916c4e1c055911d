"""Small things a reader of the report met: history listed trt-10.0.0 before trt-8.6 (text order),
and where two profiles of a case had the same error their lines coincided and one vanished."""

from __future__ import annotations

import pandas as pd

from matrix.report.html import case_plot
from matrix.report.publish import history_table


def test_history_lists_versions_in_version_order():
    cells = [["tiny/fp32/trt-10.0.0", "pass", "1e-06"], ["tiny/fp32/trt-8.6", "fail", "2e-01"],
             ["tiny/fp32/ort-1.17", "pass", "1e-06"], ["tiny/fp32/ort-1.9", "pass", "1e-06"]]
    order = [cell for cell, _ in history_table([("run1", cells)])["cells"]]
    assert order == ["tiny/fp32/ort-1.9", "tiny/fp32/ort-1.17", "tiny/fp32/trt-8.6", "tiny/fp32/trt-10.0.0"]


def test_coinciding_lines_in_a_plot_stay_visible():
    frame = pd.DataFrame([{"case": "tiny", "profile": profile, "env": env, "max_abs": 1e-3, "atol": 1e-2}
                          for profile in ("fp32", "fp16", "fp16-fix") for env in ("ort-1.17", "ort-1.32")])
    series = case_plot(frame, "tiny", ["ort-1.17", "ort-1.32"])["series"]
    assert [s["points"] for s in series] == [series[0]["points"]] * 3  # the very same line three times
    widths = [s["width"] for s in series]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3  # each drawn under a thinner one


def test_a_network_in_one_line_counts_most_first_ties_in_order_of_appearance():
    """issue 44, remaining point 1 (the summary is made without a pandas Series per cell): the
    TensorRT network line of a cell's details reads as it did."""
    import json

    from matrix.report.html import layer_summary

    layers = [{"type": "SHUFFLE", "dtypes": ["FLOAT"]}, {"type": "CONSTANT", "dtypes": ["INT64"]},
              {"type": "CONSTANT", "dtypes": ["FLOAT"]}, {"type": "CAST", "dtypes": ["FLOAT", "INT64"]},
              {"type": "SHUFFLE", "dtypes": ["BOOL"]}, {"type": "MATRIX_MULTIPLY", "dtypes": ["FLOAT"]}]
    assert layer_summary(json.dumps(layers)) == ("6 layers: SHUFFLE ×2, CONSTANT ×2, CAST ×1, MATRIX_MULTIPLY ×1; "
                                                 "outputs: FLOAT ×4, INT64 ×2, BOOL ×1")
    assert layer_summary(None) is None
