"""Issue 41, fifth sweep #4, #12, #13: ops that had no float64 evaluation (DequantizeLinear below
opset 19, a grouped ConvTranspose) were judged against onnxruntime's own float32 output (`pass 0`
by construction); FP16 copies that failed the checker (an opset-13 QDQ model's scales made FP16, a
graph input passed through as an output); an FP16 cell whose copy trtmatrix cannot evaluate in
float64 said the engine returned nothing. One `trtmatrix run` (one onnxruntime venv) holds every
case; the references are checked against numpy / PyTorch in float64 here, by hand. Each assertion
failed on main (fe191fd)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto as T, helper as h, numpy_helper

from conftest import PROFILES, matrix_file
from matrix.store import list_runs, read_run
from test_nothing_silent_four import trtmatrix

ENV = "ort-1.32"  # onnxruntime 1.32 is also the host's: its float32 output, by hand, is the cell's
RNG = np.random.default_rng(41)


def _save(folder: Path, name: str, nodes, inputs, outputs, initializers: dict, feeds: dict, opset: int = 17,
          profiles=("fp32", "fp16"), extra_opsets=(), typed=()) -> str:
    graph = h.make_graph(nodes, name, [h.make_tensor_value_info(*i) for i in inputs],
                         [h.make_tensor_value_info(*o) for o in outputs],
                         [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()],
                         value_info=[h.make_tensor_value_info(*v) for v in typed])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset), *extra_opsets], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, folder / f"{name}.onnx")
    np.savez(folder / f"{name}_in.npz", **feeds)
    return (f'[cases.{name}]\nonnx = "{folder / f"{name}.onnx"}"\ninputs = "{folder / f"{name}_in.npz"}"\n'
            f'profiles = {list(profiles)!r}\n'.replace("'", '"'))


def _qconv(folder: Path) -> tuple[str, np.ndarray]:
    """A QDQ Conv as quantisation tools write it (opset 13): per-tensor Q/DQ on the activation,
    int8 per-channel weights through DequantizeLinear(axis 0); and y in float64 by hand."""
    weights = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    scales = (RNG.random(4) * 0.01 + 0.001).astype(np.float32)
    bias, x = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             h.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    case = _save(folder, "qconv", nodes, [("x", T.FLOAT, [1, 3, 6, 6])], [("y", T.FLOAT, [1, 4, 6, 6])],
                 {"xs": np.float32(0.02), "xz": np.int8(0), "wq": weights, "ws": scales, "wz": np.zeros(4, np.int8),
                  "b": bias}, {"x": x}, opset=13)
    xd = np.clip(np.rint(x.astype(np.float64) / np.float64(np.float32(0.02))), -128, 127) * np.float64(np.float32(0.02))
    wd = weights.astype(np.float64) * scales.astype(np.float64)[:, None, None, None]
    y = torch.nn.functional.conv2d(torch.tensor(xd), torch.tensor(wd), torch.tensor(bias, dtype=torch.float64), padding=1)
    return case, torch.relu(y).numpy()


def _convT(folder: Path) -> tuple[str, np.ndarray]:
    """A grouped ConvTranspose (group 2, strides 2): onnx.reference's raises; y in float64 by PyTorch."""
    x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((1, 4, 5, 5), (4, 3, 3, 3), (6,)))
    case = _save(folder, "convT", [h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], group=2,
                                               pads=[1, 1, 1, 1])],
                 [("x", T.FLOAT, [1, 4, 5, 5])], [("y", T.FLOAT, [1, 6, 9, 9])], {"w": w, "b": b}, {"x": x})
    y = torch.nn.functional.conv_transpose2d(*(torch.tensor(a, dtype=torch.float64) for a in (x, w, b)), stride=2,
                                             padding=1, groups=2)
    return case, y.numpy()


def _passed_through(folder: Path) -> str:
    """Outputs: the graph input itself (a mask handed back), Relu of it, and a Constant FP16 cannot
    hold (the stranger's case, sweep 5 cases/26)."""
    constant = numpy_helper.from_array(np.float32([1.1, 70000.0]))
    return _save(folder, "through", [h.make_node("Relu", ["x"], ["r"]), h.make_node("Constant", [], ["c"], value=constant)],
                 [("x", T.FLOAT, [2])], [("x", T.FLOAT, [2]), ("r", T.FLOAT, [2]), ("c", T.FLOAT, [2])], {},
                 {"x": np.float32([1e-3, 70000.0])}, profiles=("fp16",))


def _unevaluated_copy(folder: Path) -> str:
    """com.microsoft Gelu (no float64 evaluation) kept FP32 in the copy, then × 1e5, a constant the
    copy clamps to 65504: the FP16 cell fails, and the copy has no float64 evaluation to split the blame. (Gelu's
    output declared: the converter cannot type a com.microsoft op's.)"""
    return _save(folder, "gelu", [h.make_node("Gelu", ["x"], ["g"], domain="com.microsoft", name="gelu"),
                                  h.make_node("Mul", ["g", "k"], ["y"])],
                 [("x", T.FLOAT, [8])], [("y", T.FLOAT, [8])], {"k": np.float32(1e5)},
                 {"x": np.linspace(-3, 3, 8, dtype=np.float32)}, profiles=("fp16-gelu-fp32",),
                 extra_opsets=[h.make_opsetid("com.microsoft", 1)], typed=[("g", T.FLOAT, [8])])


@pytest.fixture(scope="module")
def swept(tmp_path_factory, cache_dir):
    """Every case in one run: {(case, profile): its record}, and the float64 values by hand."""
    folder = tmp_path_factory.mktemp("sweep5")
    qconv, qconv64 = _qconv(folder)
    convT, convT64 = _convT(folder)
    body = PROFILES + '[profiles.fp16-gelu-fp32]\nprecision = "fp16"\nkeep_fp32 = ["gelu"]\n' + \
        qconv + convT + _passed_through(folder) + _unevaluated_copy(folder)
    config = matrix_file(folder, cache_dir, body, environments=(ENV,))
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    frame = read_run(list_runs(folder / "reports")[-1])
    cells = {(row["case"], row["profile"]): row for row in frame.to_dict("records")}
    return folder, cells, {"qconv": qconv64, "convT": convT64}


def _own_float32(folder: Path, case: str) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(folder / f"{case}.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, dict(np.load(folder / f"{case}_in.npz")))[0]


@pytest.mark.parametrize("case", ["qconv", "convT"])
def test_qdq_and_grouped_conv_transpose_are_judged_against_float64(swept, case):
    """Issue 41, sweep 5 #4: DequantizeLinear at opset 13 and a grouped ConvTranspose have a float64
    evaluation, checked by the referee; the cell's error is onnxruntime 1.32's distance from the
    model in float64 by hand (numpy / PyTorch), not 0 by construction."""
    folder, cells, by_hand = swept
    cell = cells[(case, "fp32")]
    assert cell["status"] == "pass" and "no float64 evaluation" not in cell["reference"], cell["reference"]
    assert cell["reference_check"].startswith("agrees with"), cell["reference_check"]
    distance = float(np.abs(_own_float32(folder, case).astype(np.float64) - by_hand[case]).max())
    assert distance > 0 and cell["max_abs"] == pytest.approx(distance, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("case", ["qconv", "convT"])
def test_the_fp16_copies_of_qdq_and_grouped_conv_transpose_are_judged(swept, case):
    """Issue 41, sweep 5 #4 (an opset-13 QDQ model's FP16 copy failed the checker: its scales made
    FP16) and #13 (the grouped ConvTranspose's FP16 cell: `error` "engine returned no value"): both
    judged, the conversion's share split off."""
    cell = swept[1][(case, "fp16")]
    assert cell["status"] in ("pass", "fail") and cell["conversion_max_abs"] >= 0, cell["error"]


def test_a_graph_input_passed_through_as_an_output_has_a_valid_fp16_copy(swept):
    """Issue 41, sweep 5 #12: the copy failed the checker ("input 'graph_output_cast_0' of node Relu
    is not output of any previous nodes"); the pass-through output is now listed again after the
    conversion, FP32 as the copy's inputs are. The cell fails for the copy's own doing, said: its
    constant output 70000 is 65504 in FP16 (the cause named no constant: the copy renames a constant
    output), and the engine adds nothing."""
    cell = swept[1][("through", "fp16")]
    assert cell["status"] == "fail", cell["error"]
    assert cell["error"].startswith("FP16 copy clamps constant 'c' (7e+04 → 65504) at node Constant#1"), cell["error"]
    assert cell["conversion_max_abs"] == 70000 - 65504 and cell["copy_max_abs"] == 0.0


def test_a_copy_without_float64_evaluation_is_judged_and_says_so(swept):
    """Issue 41, sweep 5 #13, in general: where trtmatrix cannot evaluate the FP16 copy in float64,
    the cell is judged against the reference as any cell is (here it fails: its constant clamped), its
    cause says that trtmatrix lacks the copy's evaluation, never that the engine returned nothing."""
    cell = swept[1][("gelu", "fp16-gelu-fp32")]
    assert cell["status"] == "fail", cell["error"]
    assert "trtmatrix has no float64 evaluation of the FP16 copy for 'y' (node gelu" in cell["error"], cell["error"]
