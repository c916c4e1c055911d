"""Issue 41, sweep 8 A14, A15, A16: where PyTorch's float64 and its export part (under a mask, at a
NaN), and whether a step float32 rounding decides is the cause of a fail against an expected file,
read from the session's shared onnxruntime 1.20 run (tests/sweep_cases.py: its models and case files).
"""

from __future__ import annotations

import subprocess

from matrix.statuses import STEP_CAUSE
from test_bad_values import TRTMATRIX

ENV = "ort-1.20"


def test_case_file_partings_and_a_steps_blame_are_where_the_elements_are(sweep_run_120):
    """Issue 41, sweep 8 A14: a case file's parting of PyTorch and its export only in elements the mask
    leaves out was `disputed`. Sweep 8 A15: `torch.sqrt(0.3 - x)` at 0.3f, NaN in PyTorch's float64 and
    0 in the export, was `fail` "NaN expected, 0 found" for exact engines. Sweep 8 A16: a fail against an
    expected file at an element no rounding decides ([3, 0, 5.5] for [3, 0, 5]) was blamed on the step
    at element 0 ("in the model's own evaluation … is decided by rounding"), which excuses the engine."""
    done, config = sweep_run_120.done, sweep_run_120.config
    assert done.returncode == 1, done.stderr  # the expected file's fail
    cells = sweep_run_120.cells()

    # A14: on the kept elements [0, 0.5] PyTorch, its export and onnxruntime agree exactly
    assert cells["masked_where"]["status"] == "pass" and cells["masked_where"]["max_abs"] == 0.0, cells["masked_where"]
    # A15: a NaN on one side is a parting, said as one
    edge = cells["sqrt_edge"]
    assert edge["status"] == "disputed", edge
    assert "PyTorch in float64 and its ONNX export in float64 part at 'output': NaN in PyTorch's float64 where " \
           "the export's gives 0 (1 of 3 elements judged)" in edge["error"], edge["error"]
    assert "(the export reaches its edge at node " in edge["error"] and "Sqrt (Sqrt))" in edge["error"], edge["error"]
    # A16: the step decides element 0 only; element 2 (5.5 against 5 in float32 and float64) is a plain
    # fail (a file of the float64 side, failing at element 0 alone, still names the step: test_reference_check N6)
    wrong = cells["wrong_elsewhere"]
    assert wrong["status"] == "fail" and wrong["max_abs"] == 0.5, wrong
    assert not str(wrong["error"]).startswith(STEP_CAUSE), wrong["error"]
    # and repro no longer stops at the step, nor holds the engine to the step's float64 side ("the
    # tolerance is at fault … 3 off"): the file is, onnxruntime matching the model at every other element
    said = subprocess.run([TRTMATRIX, "repro", f"wrong_elsewhere/fp32/{ENV}", "-c", str(config)], capture_output=True,
                          text=True)
    assert said.returncode == 2 and "your expected file wrong_elsewhere-expected.npz is at fault, not onnxruntime" \
        in said.stderr and "(max_abs 0 from its float64 evaluation, the elements a step float32 rounding decides " \
        "left out)" in said.stderr, said.stderr
