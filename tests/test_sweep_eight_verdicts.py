"""Issue 41, sweep 8 A2, A7, A12: a case file's boolean or integer output that PyTorch in float64 and
its ONNX export part on, a cosine rule over equal infinities, and a Loop's expected file whose extra
check outlasts timeout_s, through one `trtmatrix run` (and one `repro` of a cosine fail).
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from matrix.store import list_runs, read_run
from test_bad_values import TRTMATRIX
from test_reference_check import PROFILES, case, model

ENV = "ort-1.20"
CASES = '''\
import torch
from matrix.case import Export, case


class Greater(torch.nn.Module):
    def forward(self, x):
        return x > 0.3


class TopTwo(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 2)


@case()
def gt_const():
    """0.3f > 0.3 in float64 (0.300000011920929), not in the export's float32 constant."""
    return Greater(), {"x": torch.tensor([0.3, 0.2, 0.5])}


@case(export=Export(output_names=("values", "indices")))
def topk_tie():
    """Three tied 5s: torch orders them its own way, ONNX's TopK lower index first."""
    return TopTwo(), {"x": torch.tensor([1.0, 5.0, 5.0, 2.0, 5.0, 0.0])}
'''


def _big_loop(path):
    """v += 1, 10**12 times: no referee check (nor engine) ends within a few seconds."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, [2])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [2])],
        [nh.from_array(np.ones(2, np.float32), "one")])
    model(path, [h.make_node("Loop", ["M", "", "v0"], ["v"], body=body)], [("M", T.INT64, []), ("v0", T.FLOAT, [2])],
          [("v", T.FLOAT, [2])], opset=16)


def test_exact_outputs_infinities_and_a_stopped_check(tmp_path, write_matrix, cache_dir):
    """Issue 41, sweep 8 A2: `x > 0.3` at x = 0.3f and `torch.topk` over ties were `fail` for a right
    onnxruntime (PyTorch in float64 and its export part, but only floating outputs were held against
    each other): now `disputed`, saying how many elements differ.
    Sweep 8 A7: a cosine rule on y = x + mask, the mask's -inf where the reference holds the same
    -inf, was `fail` "cosine undefined (NaN/Inf)"; sweep 9 B1: so was a NaN where the reference holds
    NaN. A rule a right engine fails (`cosine = 1.0` on float32 division's rounding) is the rule's
    fault in `repro`, not "loosen the tolerance".
    Sweep 8 A12: a Loop with an `expected` file whose referee check outlasted timeout_s was
    `no_reference` "… before any engine ran": now the check alone is dropped and the cell runs (and
    times out: the engine is as slow)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "ties.py").write_text(CASES)
    model(tmp_path / "cos_inf.onnx", [h.make_node("Add", ["x", "mask"], ["y"])], [("x", T.FLOAT, [1, 4])],
          [("y", T.FLOAT, [1, 4])], [nh.from_array(np.float32([[0, 0, -np.inf, 0]]), "mask")])
    model(tmp_path / "cos_nan.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])])
    model(tmp_path / "cos_one.onnx", [h.make_node("Div", ["x", "d"], ["y"])], [("x", T.FLOAT, [6])],
          [("y", T.FLOAT, [6])], [nh.from_array(np.float32(7), "d")])
    _big_loop(tmp_path / "big_loop.onnx")
    rule = "[cases.{}.accept.fp32]\ncosine = 0.99\n"
    body = (PROFILES + '[cases.gt_const]\nprofiles = ["fp32"]\n[cases.topk_tie]\nprofiles = ["fp32"]\n'
            + case(tmp_path, "cos_inf", None, {"x": np.float32([[1, 2, 3, 4]])}) + rule.format("cos_inf")
            + case(tmp_path, "cos_nan", None, {"x": np.float32([1, np.nan, 3, 4])}) + rule.format("cos_nan")
            # x / 7 rounded to float32 turns the direction by 3e-16: cosine 1 - 3.3e-16 (division is
            # correctly rounded in any engine)
            + case(tmp_path, "cos_one", None, {"x": np.float32([1, 1.1, 1.3, 1.7, 0.1, 0.01])})
            + "[cases.cos_one.accept.fp32]\ncosine = 1.0\n"
            + case(tmp_path, "big_loop", None, {"M": np.int64(10 ** 12), "v0": np.zeros(2, np.float32)},
                   expected={"v": np.float32([2 ** 24, 2 ** 24])}) + "timeout_s = 3\n")
    config = write_matrix(body, environments=(ENV,), cases_dir=cases)
    environ = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, env=environ)
    assert done.returncode == 1, done.stderr  # cos_one fails
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index("case").to_dict("index")
    said = done.stdout + done.stderr

    for name, output, differ in (("gt_const", "output", "1 of 3"), ("topk_tie", "indices", "2 of 2")):
        assert cells[name]["status"] == "disputed", cells[name]
        text = f"PyTorch in float64 and its ONNX export in float64 part at {output!r}: {differ} elements differ"
        assert text in cells[name]["error"], cells[name]["error"]
        assert "rounding explains" not in cells[name]["error"]
    assert "part at 'output': 1 of 3 elements differ" in said

    assert cells["cos_inf"]["status"] == "pass", cells["cos_inf"]
    for name in ("cos_inf", "cos_nan"):
        assert cells[name]["status"] == "pass", cells[name]
        assert cells[name]["cosine"] == 1.0 and "(1 equal infinity or NaN left out)" in cells[name]["worst_slice"]
    assert cells["cos_one"]["status"] == "fail" and cells["cos_one"]["cosine"] < 1.0, cells["cos_one"]

    loop = cells["big_loop"]
    assert loop["status"] == "timeout", loop
    assert "not checked against onnxruntime" in loop["reference_check"], loop["reference_check"]
    assert "within timeout_s = 3 s" in loop["reference_check"] and "your file alone" in loop["reference_check"]
    assert "no_reference" not in said and "before any engine ran" not in said

    repro = subprocess.run([TRTMATRIX, "repro", "-c", str(config), f"cos_one/fp32/{ENV}", "-o", str(tmp_path / "r")],
                           capture_output=True, text=True, env=environ)
    assert "the rule is at fault" in repro.stdout + repro.stderr, repro.stdout + repro.stderr
    assert "failing its rule cosine ≥ 1" in repro.stdout + repro.stderr, repro.stdout + repro.stderr
    assert "loosen the rule" in repro.stdout + repro.stderr
    assert "loosen the tolerance" not in repro.stdout + repro.stderr
