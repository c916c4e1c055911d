"""Issue 41, sweep 8 (A3, A11, A9): a case's inputs stored as it returned them, an FP16 tolerance
suggestion that a right FP16 engine passes, and the texts of a run (float8 bits, a bfloat16 case
output, the terminal, explain, an input beyond FP16's range, a raised FP16 constant), through one
`trtmatrix run` (the session's shared onnxruntime 1.32 run, tests/sweep_cases.py: its models and case
file), then `tolerances suggest` and `explain` on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib

import numpy as np

from matrix.report.precision_ran import every_node_wider
from matrix.store import read_run
from test_bad_values import TRTMATRIX

ENV = "ort-1.32"  # returns float8 outputs (as their bits)


def _cli(*args, columns=250):
    return subprocess.run([TRTMATRIX, *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": str(columns)})


def test_inputs_as_returned_suggestions_fp16_can_pass_and_texts_that_say_what_happened(sweep_run_132, cache_dir):
    config, done, run_dir = sweep_run_132.config, sweep_run_132.done, sweep_run_132.run_dir
    assert done.returncode == 1, done.stderr  # big_in, tiny_scale and f8out fail
    cells = read_run(run_dir).set_index("cell_id").to_dict("index")
    cell = {cell_id.rsplit("/", 1)[0]: row for cell_id, row in cells.items()}

    # issue 41, sweep 9 B8: the arithmetic of an FP16 copy sits in an If branch, which onnxruntime's CPU
    # runs in float32: the If itself (its outputs FP16) was counted as a node that computed in FP16,
    # so the cell passed with no ⇡ as if FP16 arithmetic had been tested
    # (and so was a Reshape around float32 Muls: it moves values, computing nothing)
    for row in ("in_branch/fp16", "reshaped/fp16"):
        ran = cell[row]["precision_ran"]
        assert every_node_wider(ran) and "If" not in ran and "Reshape" not in ran, (row, cell[row]["status"], ran)

    # issue 41, sweep 8 A3: forward() doubled x in place during the export, so inputs.npz held
    # [2, 4, 60000] and the reference began [5, 9, 120001]: every cell ran on inputs never returned.
    odd = cell["odd_module/fp32"]
    assert isinstance(odd["artifact"], str), odd["error"]  # prepared (A9 b: its bfloat16 output failed the prepare)
    with np.load(cache_dir / "artifacts" / odd["artifact"] / "inputs.npz") as stored:
        np.testing.assert_array_equal(stored["x"], [1, 2, 30000])
    # sweep 9 B7: a float16 input is stored and exported as float32, and case.json says so
    with np.load(cache_dir / "artifacts" / odd["artifact"] / "inputs.npz") as stored:
        assert stored["h"].dtype == np.float32
    said = json.loads((cache_dir / "artifacts" / odd["artifact"] / "case.json").read_text())["export_warnings"]
    assert "input h is float16: the case's ONNX model takes it as float32" in said, said
    # sweep 10 C3: returned in training mode, judged in eval mode: said too
    assert said[0].startswith("the module was in training mode: exported and judged in eval mode"), said
    with np.load(cache_dir / "artifacts" / odd["artifact"] / "reference.npz") as reference:
        np.testing.assert_array_equal(reference[reference.files[0]], [3, 5, 60001])

    # sweep 8 A9 (b): "ERR prepare failed: TypeError: Got unsupported ScalarType BFloat16"
    assert odd["status"] == "unsupported", odd
    assert odd["error"].startswith("a bfloat16 output: numpy has no such type"), odd["error"]

    # sweep 8 A9 (c): numpy's RuntimeWarnings (inf - inf in the reference check and the FP16
    # conversion record) and onnxruntime's raw "[E:onnxruntime:…]" line were on the terminal
    assert "RuntimeWarning" not in done.stderr and "[E:onnxruntime" not in done.stderr, done.stderr
    assert "mode attribute is bogus" in str(cell["bad_mode/fp32"]["error"]), cell["bad_mode/fp32"]  # its words kept

    # sweep 8 A9 (e): an input FP16 cannot hold failed its cell with no cause
    big = cell["big_in/fp16"]
    assert big["status"] == "fail" and big["error"] == "input 'x' holds 7e+04, beyond FP16's 65504", big
    assert cell["big_in/fp32"]["status"] == "pass"

    # sweep 8 A9 (f): 1e-8, raised to FP16's smallest subnormal, was missing from the record
    tiny = cell["tiny_scale/fp16"]
    assert "FP16 copy clamps constant 'b' (1e+08 → 65504) at node Mul#1, and raises constant 'a' (1e-08 → " \
           "5.9605e-08) at node Mul#0 (and 1 more constant): the copy alone is off by 3.98" in tiny["error"], tiny["error"]
    record = next((cache_dir / "artifacts" / tiny["artifact"]).glob("*.conversion.json"))
    changes = {change["constant"]: change for change in json.loads(record.read_text())["changes"]}
    assert changes["a"]["what"] == changes["c"]["what"] == "raises" and changes["a"]["after"] == 2.0 ** -24, changes

    # sweep 8 A9 (a): float8 bits compared as integers said "max_abs 1" (two codes, no distance)
    f8 = cell["f8out/fp32"]
    assert f8["status"] == "fail" and "(max_abs 0 against it, 2 of 5 elements differ (bit patterns) against the " \
                                      "file)" in f8["error"], f8["error"]
    assert "FAIL f8out/fp32/ort-1.32  2 of 5 elements differ (bit patterns), the expected file" in done.stderr

    # sweep 8 A11: the trusted FP16 cell ran in float32 (⇡) and was exact: atol = 0.0 was suggested,
    # which a softmax computed in FP16 fails on its smallest probabilities
    shown = _cli("tolerances", "suggest", "-c", str(config), "--trusted", ENV, "--case", "sm")
    assert shown.returncode == 0, shown.stderr
    entry = tomllib.loads(shown.stdout)["cases"]["sm"]["tolerances"]["fp16"]
    assert f"# sm/fp16/{ENV} did not compute in FP16 (⇡: every node ran in float32)" in shown.stdout, shown.stdout
    logits = np.float16([0, -14, -16, 2])
    exp = np.exp(logits - logits.max())
    in_fp16 = (exp / exp.sum(dtype=np.float16)).astype(np.float64)
    with np.load(run_dir / "refs" / f"{cell['sm/fp16']['artifact']}.npz") as reference:
        expected = reference["y"][0]
    assert np.all(np.abs(in_fp16 - expected) <= entry["atol"] + entry["rtol"] * np.abs(expected)), (entry, in_fp16)

    # sweep 8 A9 (d): explain of an FP32 cell printed the FP16 forecast's risk, and "1 nodes"
    explained = _cli("explain", f"big_in/fp32/{ENV}", "-c", str(config), columns=80)  # its lines, as in a CI log
    assert explained.returncode == 0, explained.stderr
    said = explained.stdout + explained.stderr
    assert "1 node)" in said and "FP16 risk" not in said and "65504" not in said, said


def test_multihead_attention_with_a_padding_mask_is_exported_and_judged(sweep_run_132):
    """Issue 41, sweep 10 C2: nn.MultiheadAttention with a key_padding_mask was `ERR prepare failed:
    … 'aten::_native_multi_head_attention' … not supported`: the export ran under no_grad, where the
    module takes its fused fast path; a plain torch.onnx.export of it works."""
    cell = sweep_run_132.cells()["padded_attention"]
    assert cell["status"] == "pass", cell["error"]
    assert cell["reference"].startswith("PyTorch, the case's module in float64"), cell["reference"]


def test_a_tensor_the_module_makes_is_float64_in_the_reference(sweep_run_132):
    """Issue 41, sweep 10 C5: `torch.zeros(4)` made in forward stayed float32 in the float64 re-run,
    and writing the float64 input into it failed the preparation ("Index put requires the source and
    destination dtypes match")."""
    cell = sweep_run_132.cells()["made_tensor"]
    assert cell["status"] == "pass", cell["error"]
    assert cell["reference"].startswith("PyTorch, the case's module in float64"), cell["reference"]
