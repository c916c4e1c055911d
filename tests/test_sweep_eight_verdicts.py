"""Issue 41, sweep 8 A2, A7, A12: a case file's boolean or integer output that PyTorch in float64 and
its ONNX export part on, a cosine rule over equal infinities, and a Loop's expected file whose extra
check outlasts timeout_s, read from the session's shared onnxruntime 1.20 run (tests/sweep_cases.py:
its models and case files), and one `repro` of a cosine fail.
"""

from __future__ import annotations

import os
import subprocess

from sweep_cases import LOOP_TIMEOUT_S
from test_bad_values import TRTMATRIX

ENV = "ort-1.20"


def test_exact_outputs_infinities_and_a_stopped_check(tmp_path, sweep_run_120):
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
    done, config = sweep_run_120.done, sweep_run_120.config
    assert done.returncode == 1, done.stderr  # cos_one fails
    cells = sweep_run_120.cells()
    said = done.stdout + done.stderr

    for name, output, differ in (("gt_const", "output", "1 of 3"), ("topk_tie", "indices", "2 of 2")):
        assert cells[name]["status"] == "disputed", cells[name]
        text = f"PyTorch in float64 and its ONNX export in float64 part at {output!r}: {differ} elements differ"
        assert text in cells[name]["error"], cells[name]["error"]
        assert "rounding explains" not in cells[name]["error"]
    assert "part at 'output': 1 of 3 elements differ" in said

    for name in ("cos_inf", "cos_nan"):
        assert cells[name]["status"] == "pass", cells[name]
        assert cells[name]["cosine"] == 1.0 and "(1 equal infinity or NaN left out)" in cells[name]["worst_slice"]
    assert cells["cos_one"]["status"] == "fail" and cells["cos_one"]["cosine"] < 1.0, cells["cos_one"]

    loop = cells["big_loop"]
    assert loop["status"] == "timeout", loop
    assert "not checked against onnxruntime" in loop["reference_check"], loop["reference_check"]
    assert f"within timeout_s = {LOOP_TIMEOUT_S} s" in loop["reference_check"] \
        and "your file alone" in loop["reference_check"]
    assert "no_reference" not in said and "before any engine ran" not in said

    repro = subprocess.run([TRTMATRIX, "repro", "-c", str(config), f"cos_one/fp32/{ENV}", "-o", str(tmp_path / "r")],
                           capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    assert "the rule is at fault" in repro.stdout + repro.stderr, repro.stdout + repro.stderr
    assert "failing its rule cosine ≥ 1" in repro.stdout + repro.stderr, repro.stdout + repro.stderr
    assert "loosen the rule" in repro.stdout + repro.stderr
    assert "loosen the tolerance" not in repro.stdout + repro.stderr
