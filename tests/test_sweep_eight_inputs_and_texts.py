"""Issue 41, sweep 8 (A3, A11, A9): a case's inputs stored as it returned them, an FP16 tolerance
suggestion that a right FP16 engine passes, and the texts of a run (float8 bits, a bfloat16 case
output, the terminal, explain, an input beyond FP16's range, a raised FP16 constant), through one
`trtmatrix run` of one matrix, then `tolerances suggest` and `explain` on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from matrix.store import list_runs, read_run
from test_bad_values import TRTMATRIX
from test_reference_check import PROFILES, case, model

ENV = "ort-1.32"  # returns float8 outputs (as their bits)
CASES = '''\
import torch
from matrix.case import case


class Odd(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)  # in place: every call changes the tensor it is given
        y = x + 1
        # a bfloat16 output; an FP16 one that is inf on both sides (inf - inf in the reference check)
        return y, y.to(torch.bfloat16), (y * 3).half()


@case()
def odd_module():
    return Odd(), {"x": torch.tensor([1.0, 2.0, 30000.0])}
'''


def _float8(path):
    """Cast to float8 e4m3fn (saturating): 500 and 1000 become 448 (bits 126)."""
    graph = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E4M3FN)], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [5])], [h.make_tensor_value_info("y", T.FLOAT8E4M3FN, [5])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 21)], ir_version=10), path)


def _matrix(tmp_path, write_matrix):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "odd.py").write_text(CASES)
    # opset 18: onnxruntime's FP16 Relu kernel (at opset 13 it runs in float32, and drops the input's cast)
    model(tmp_path / "big_in.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])],
          opset=18)
    # y = x · 1e-8 · 1e8; z = x + [inf, 2e-8, 0, 0] (raised too, and inf - inf where it is compared)
    model(tmp_path / "tiny_scale.onnx", [h.make_node("Mul", ["x", "a"], ["t"]), h.make_node("Mul", ["t", "b"], ["y"]),
                                         h.make_node("Add", ["x", "c"], ["z"])],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4]), ("z", T.FLOAT, [4])],
          [nh.from_array(np.float32(1e-8), "a"), nh.from_array(np.float32(1e8), "b"),
           nh.from_array(np.float32([np.inf, 2e-8, 0, 0]), "c")])
    model(tmp_path / "sm.onnx", [h.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", T.FLOAT, [1, 4])],
          [("y", T.FLOAT, [1, 4])])
    # a mode onnxruntime refuses when its session starts: its ERROR log line, once on the terminal
    model(tmp_path / "bad_mode.onnx", [h.make_node("Resize", ["x", "", "s"], ["y"], mode="bogus")],
          [("x", T.FLOAT, [1, 1, 2, 2])], [("y", T.FLOAT, [1, 1, 4, 4])], [nh.from_array(np.float32([1, 1, 2, 2]), "s")])
    _float8(tmp_path / "f8out.onnx")
    x8 = np.float32([0.3, 500, 1000, 1.1, -2.7])
    body = (PROFILES + '[cases.odd_module]\nprofiles = ["fp32"]\n'
            + case(tmp_path, "big_in", None, {"x": np.float32([70000, 1, -5, 65519])}, ("fp32", "fp16"))
            + case(tmp_path, "tiny_scale", None, {"x": np.float32([1, 2, 3, 4])}, ("fp16",))
            + case(tmp_path, "sm", None, {"x": np.float32([[0, -14, -16, 2]])}, ("fp32", "fp16"))
            + case(tmp_path, "bad_mode", None, {"x": np.ones((1, 1, 2, 2), np.float32)})
            # the expected file's bits 127 (NaN) where the saturating Cast gives 126 (448)
            + case(tmp_path, "f8out", None, {"x": x8}, expected={"y": np.uint8([42, 127, 127, 57, 195])}))
    return write_matrix(body, environments=(ENV,), cases_dir=cases)


def _cli(*args, columns=250):
    return subprocess.run([TRTMATRIX, *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": str(columns)})


def test_inputs_as_returned_suggestions_fp16_can_pass_and_texts_that_say_what_happened(tmp_path, write_matrix,
                                                                                       cache_dir):
    config = _matrix(tmp_path, write_matrix)
    done = _cli("run", "-c", str(config))
    assert done.returncode == 1, done.stderr  # big_in, tiny_scale and f8out fail
    run_dir = list_runs(tmp_path / "reports")[-1]
    cells = read_run(run_dir).set_index("cell_id").to_dict("index")
    cell = {cell_id.rsplit("/", 1)[0]: row for cell_id, row in cells.items()}

    # issue 41, sweep 8 A3: forward() doubled x in place during the export, so inputs.npz held
    # [2, 4, 60000] and the reference began [5, 9, 120001]: every cell ran on inputs never returned.
    odd = cell["odd_module/fp32"]
    assert isinstance(odd["artifact"], str), odd["error"]  # prepared (A9 b: its bfloat16 output failed the prepare)
    with np.load(cache_dir / "artifacts" / odd["artifact"] / "inputs.npz") as stored:
        np.testing.assert_array_equal(stored["x"], [1, 2, 30000])
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
