"""Issue 41, sweep 7 leftovers (N12, N5): a while-Loop whose stop condition float32 rounding decides,
a subnormal intermediate, and numpy-drawn case inputs, read from the session's shared onnxruntime 1.20
run (tests/sweep_cases.py: its models and case files).
"""

from __future__ import annotations

import random

import numpy as np
import onnx

from matrix.reference.agreement import first_parting
from matrix.reference.referee import referee_values
from matrix.store import read_run
from sweep_cases import SUBNORMAL_X


def test_a_loop_step_is_named_a_subnormal_is_judged_and_numpy_inputs_stay(sweep_run_120, cache_dir):
    """Issue 41, sweep 7 N12: the while-Loop was `disputed` as "node Loop#0 (Loop) … part (|Δ| 0.1 where
    rounding explains 1.1e-06)": the Less in its body, which float32 rounding decides, was not named.
    Sweep 7 N5 (sweep 6 #15): x·1e-40·1e38 was `disputed` "node Mul#0 … |Δ| 7.01e-46 where rounding
    explains 3.6e-46": float32 holds a subnormal to its fixed spacing, 1.4e-45, not to eps × its value.
    Sweep 7 N5: a case drawing its inputs with np.random.rand got other inputs on `--reprepare`, silently:
    numpy's and Python's generators were not seeded."""
    done = sweep_run_120.done
    assert done.returncode == 1, done.stderr  # the Loop's cell is disputed
    cells = sweep_run_120.cells()
    # Sweep 9 B6: a cell its engine cannot run at all (onnxruntime has no bf16) is skipped, not disputed
    bf16 = read_run(sweep_run_120.run_dir).set_index("cell_id").loc["while_loop/bf16/ort-1.20"]
    assert (bf16["status"], bf16["error"]) == ("skipped", 'the onnxruntime engine has no precision = "bf16"'), bf16

    loop = cells["while_loop"]
    assert loop["status"] == "disputed", loop
    named = "output 'acc' is decided by rounding at node Less#1 (Less) in the body of Loop#0 (its iteration 3)"
    assert named in loop["error"], loop["error"]
    assert named in done.stderr, done.stderr  # the terminal's line, as the run record's
    page = (sweep_run_120.run_dir / "report.html").read_text()
    assert "is decided by rounding at node Less#1 (Less) in the body of Loop#0 (its iteration 3)" in page

    assert cells["subnormal"]["status"] == "pass", cells["subnormal"]["error"]
    # and a real parting at subnormal magnitudes still is one: a referee that flushed them to zero
    subnormal, x = onnx.load(sweep_run_120.folder / "subnormal.onnx"), SUBNORMAL_X
    theirs = referee_values(subnormal, {"x": x}).values
    parting, _ = first_parting(subnormal, {"x": x}, {**theirs, "a": np.zeros(3, np.float32)})
    assert parting is not None and parting.node == "Mul#0" and parting.delta > 1e-40, parting

    # seeded with the case's seed before its build, on every preparation (--reprepare too)
    assert cells["np_inputs"]["status"] == "pass", cells["np_inputs"]["error"]
    seeded = (np.random.RandomState(7).rand(3, 4) + random.Random(7).random()).astype(np.float32)
    with np.load(cache_dir / "artifacts" / cells["np_inputs"]["artifact"] / "inputs.npz") as stored:
        np.testing.assert_array_equal(stored["x"], seeded)
