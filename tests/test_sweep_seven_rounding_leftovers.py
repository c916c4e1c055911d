"""Issue 41, sweep 7 leftovers (N12, N5): a while-Loop whose stop condition float32 rounding decides,
a subnormal intermediate, and numpy-drawn case inputs, through one `trtmatrix run`.
"""

from __future__ import annotations

import os
import random
import subprocess

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import BF16
from matrix.reference.agreement import first_parting
from matrix.reference.referee import referee_values
from matrix.store import list_runs, read_run
from test_bad_values import TRTMATRIX
from test_reference_check import PROFILES, case, model

ENV = "ort-1.20"
NP_CASE = '''\
import random

import numpy as np
import torch
from matrix.case import case


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 2))

    def forward(self, x):
        return x @ self.weight


@case(seed=7)
def np_inputs():
    """Inputs drawn with numpy's global generator and Python's random, as many users draw them."""
    return Linear(), {"x": torch.from_numpy((np.random.rand(3, 4) + random.random()).astype(np.float32))}
'''


def _while_loop(path):
    """acc += 0.1 while acc < 0.3 (at most 10 times): 0.1f + 0.1f + 0.1f rounds to 0.3f, so float32
    stops after 3 steps; in float64 0.30000000447 < 0.30000001192, a 4th step."""
    body = h.make_graph(
        [h.make_node("Add", ["acc_in", "step"], ["acc_out"]), h.make_node("Less", ["acc_out", "limit"], ["cond_out"]),
         h.make_node("Identity", ["acc_out"], ["each"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("acc_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, [1]),
         h.make_tensor_value_info("each", T.FLOAT, [1])],
        [nh.from_array(np.float32([0.1]), "step"), nh.from_array(np.float32([0.3]), "limit")])
    model(path, [h.make_node("Loop", ["most", "go", "x"], ["acc", "trace"], body=body)], [("x", T.FLOAT, [1])],
          [("acc", T.FLOAT, [1]), ("trace", T.FLOAT, [None, 1])],
          [nh.from_array(np.int64(10), "most"), nh.from_array(np.array(True), "go")], opset=17)


def _subnormal(path):
    """x * 1e-40 is a float32 subnormal, held to 1.4e-45 (1e-5 of itself); * 1e38 makes it normal again."""
    return model(path, [h.make_node("Mul", ["x", "tiny"], ["a"]), h.make_node("Mul", ["a", "big"], ["y"])],
                 [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
                 [nh.from_array(np.float32(1e-40), "tiny"), nh.from_array(np.float32(1e38), "big")])


def test_a_loop_step_is_named_a_subnormal_is_judged_and_numpy_inputs_stay(tmp_path, write_matrix, cache_dir):
    """Issue 41, sweep 7 N12: the while-Loop was `disputed` as "node Loop#0 (Loop) … part (|Δ| 0.1 where
    rounding explains 1.1e-06)": the Less in its body, which float32 rounding decides, was not named.
    Sweep 7 N5 (sweep 6 #15): x·1e-40·1e38 was `disputed` "node Mul#0 … |Δ| 7.01e-46 where rounding
    explains 3.6e-46": float32 holds a subnormal to its fixed spacing, 1.4e-45, not to eps × its value.
    Sweep 7 N5: a case drawing its inputs with np.random.rand got other inputs on `--reprepare`, silently:
    numpy's and Python's generators were not seeded."""
    _while_loop(tmp_path / "while_loop.onnx")
    subnormal = _subnormal(tmp_path / "subnormal.onnx")
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "np_inputs.py").write_text(NP_CASE)
    x = np.float32([1.2345, 2.5, 3.75])
    body = (PROFILES + BF16 + case(tmp_path, "while_loop", None, {"x": np.float32([0])}, profiles=("fp32", "bf16"))
            + case(tmp_path, "subnormal", None, {"x": x}) + '[cases.np_inputs]\nprofiles = ["fp32"]\n')
    config = write_matrix(body, environments=(ENV,), cases_dir=cases)
    environ = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, env=environ)
    assert done.returncode == 1, done.stderr  # the Loop's cell is disputed
    frame = read_run(list_runs(tmp_path / "reports")[-1])
    # Sweep 9 B6: a cell its engine cannot run at all (onnxruntime has no bf16) is skipped, not disputed
    bf16 = frame.set_index("cell_id").loc[f"while_loop/bf16/{ENV}"]
    assert (bf16["status"], bf16["error"]) == ("skipped", 'the onnxruntime engine has no precision = "bf16"'), bf16
    cells = frame[frame["profile"] == "fp32"].set_index("case").to_dict("index")

    loop = cells["while_loop"]
    assert loop["status"] == "disputed", loop
    named = "output 'acc' is decided by rounding at node Less#1 (Less) in the body of Loop#0 (Loop)"
    assert named in loop["error"] and "the Loop runs 3 times in float32, 4 in float64" in loop["error"], loop["error"]
    assert named in done.stderr, done.stderr  # the terminal's line, as the run record's
    page = (list_runs(tmp_path / "reports")[-1] / "report.html").read_text()
    assert "is decided by rounding at node Less#1 (Less) in the body of Loop#0 (Loop)" in page

    assert cells["subnormal"]["status"] == "pass", cells["subnormal"]["error"]
    # and a real parting at subnormal magnitudes still is one: a referee that flushed them to zero
    theirs = referee_values(subnormal, {"x": x}).values
    parting, _ = first_parting(subnormal, {"x": x}, {**theirs, "a": np.zeros(3, np.float32)})
    assert parting is not None and parting.node == "Mul#0" and parting.delta > 1e-40, parting

    # seeded with the case's seed before its build, on every preparation (--reprepare too)
    assert cells["np_inputs"]["status"] == "pass", cells["np_inputs"]["error"]
    seeded = (np.random.RandomState(7).rand(3, 4) + random.Random(7).random()).astype(np.float32)
    with np.load(cache_dir / "artifacts" / cells["np_inputs"]["artifact"] / "inputs.npz") as stored:
        np.testing.assert_array_equal(stored["x"], seeded)
