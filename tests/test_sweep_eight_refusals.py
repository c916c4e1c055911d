"""Nothing silent, the stranger's eighth sweep (issue 41): a model the engine cannot load here, a
Dropout that draws nothing, a STRING graph input: each was a dispute, a missing reference or a
refusal at plan where the model can be judged or its refusal said. One `trtmatrix run` (real
onnxruntime venv, real files) for the verdicts, `trtmatrix plan` for what is refused before it;
each assertion failed on 527a463. The ninth sweep's B2 and B3 (a kernel that refuses the model
whatever its inputs' values; a FLOAT16 step's overflow) ride in the same run and failed on 4c534c5."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from matrix.store import list_runs, read_run
from test_nothing_silent_four import trtmatrix

FP32 = '[profiles.fp32]\nprecision = "fp32"\n'
WORDS = np.array(["emu", "cat", "bird"])  # str: dtype <U4, as np.array of Python strings makes it


def _save(folder, name: str, nodes, inputs, outputs, feeds, initializers=(), expected=None) -> str:
    """An ONNX-file case `name` (opset 17, ai.onnx.ml 2, IR 8) in one fp32 profile."""
    model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, list(initializers)), ir_version=8,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    onnx.checker.check_model(model)
    onnx.save(model, folder / f"{name}.onnx")
    np.savez(folder / f"{name}_in.npz", **feeds)
    case = f'[cases.{name}]\nonnx = "{folder / f"{name}.onnx"}"\ninputs = "{folder / f"{name}_in.npz"}"\n'
    if expected is not None:
        np.savez(folder / f"{name}_exp.npz", **expected)
        case += f'expected = "{folder / f"{name}_exp.npz"}"\n'
    return case + 'profiles = ["fp32"]\n'


def _lowered(folder, name: str, expected=None) -> str:
    """ids → LabelEncoder → StringNormalizer(LOWER) in a locale no host has: onnxruntime cannot make
    the session (what a host without en_US.UTF-8 does to the default locale)."""
    return _save(folder, name, [
        helper.make_node("LabelEncoder", ["x"], ["s"], domain="ai.onnx.ml", keys_int64s=[0, 1, 2],
                         values_strings=["Cat", "Dog", "Emu"], default_string="?"),
        helper.make_node("StringNormalizer", ["s"], ["y"], case_change_action="LOWER", locale="zz_ZZ.UTF-8")],
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [3])], {"x": np.array([2, 0, 1])}, expected=expected)


def _dropout(folder, name: str, training: bool, ratio: float) -> str:
    """y = Dropout(x, ratio, training_mode) with training_mode a BOOL graph input fed `training`."""
    return _save(folder, name, [helper.make_node("Dropout", ["x", "r", "t"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8]),
                  helper.make_tensor_value_info("t", TensorProto.BOOL, [])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
                 {"x": np.arange(1, 9, dtype=np.float32), "t": np.array(training)},
                 [onnx.numpy_helper.from_array(np.array(ratio, np.float32), "r")])


def _encoded(folder, name: str, words: np.ndarray) -> str:
    """A STRING graph input: its ids (LabelEncoder, -1 for an unknown word) and itself (Identity)."""
    return _save(folder, name, [
        helper.make_node("LabelEncoder", ["x"], ["ids"], domain="ai.onnx.ml", keys_strings=["cat", "dog", "emu"],
                         values_int64s=[0, 1, 2], default_int64=-1),
        helper.make_node("Identity", ["x"], ["same"])],
        [helper.make_tensor_value_info("x", TensorProto.STRING, [3])],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("same", TensorProto.STRING, [3])], {"x": words})


def _floor_mod(folder, name: str) -> str:
    """y = Mod(x, m) with fmod = 0 on FLOAT: valid ONNX, which onnxruntime's kernel refuses before
    opset 28 whatever the values (sweep 9 B2's model)."""
    return _save(folder, name, [helper.make_node("Mod", ["x", "m"], ["y"], fmod=0)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                 {"x": np.array([-0.9, 0.9, 0.9, -1.0], np.float32)},
                 [onnx.numpy_helper.from_array(np.array([0.3, 0.3, -0.3, 1e-30], np.float32), "m")])


def _float16_step(folder, name: str) -> str:
    """y = Cast(Cast(x, FLOAT16) · 1000 (an FP16 constant), FLOAT) at x = 70: the FLOAT16 Mul leaves
    float16's range (70000 > 65504) where float32 would not (sweep 9 B3's model)."""
    return _save(folder, name, [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
                                helper.make_node("Mul", ["h", "k"], ["m"]),
                                helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                 {"x": np.array([70, 0.1, 1e-5], np.float32)},
                 [onnx.numpy_helper.from_array(np.array(1000, np.float16), "k")])


def test_what_cannot_load_here_draws_nothing_or_is_text_is_said_or_judged(tmp_path, write_matrix):
    """Issue 41, sweep 8 A5: a StringNormalizer onnxruntime cannot load here (no such locale) was
    `disputed` "give the case `expected` outputs", and `error` with them: now `unsupported` in both,
    the host's cause first. Sweep 8 A8: a Dropout whose training_mode input is fed False (or whose
    ratio is 0) was `no_reference` "draws random numbers": it is the identity, judged. Sweep 8 A4: a
    STRING graph input could be given in no form ("the model's input is object"): str and bytes
    arrays are taken, evaluated, compared and recorded."""
    body = FP32 + _lowered(tmp_path, "locale") + _lowered(tmp_path, "locale_exp", {"y": np.array(["emu", "cat", "dog"])}) \
        + _dropout(tmp_path, "dropout_off", False, 0.5) + _dropout(tmp_path, "dropout_r0", True, 0.0) \
        + _dropout(tmp_path, "dropout_on", True, 0.5) \
        + _encoded(tmp_path, "str_in", WORDS) + _encoded(tmp_path, "bytes_in", WORDS.astype(bytes)) \
        + _floor_mod(tmp_path, "floor_mod") + _float16_step(tmp_path, "f16_step")
    done = trtmatrix("run", "-c", str(write_matrix(body, environments=("ort-1.32",))))
    assert "Traceback" not in done.stderr and list_runs(tmp_path / "reports"), done.stderr
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index("row_id")

    # A5: the same status and cause without and with an expected file; nothing asks for one
    for row in ("locale/fp32", "locale_exp/fp32"):
        cell = cells.loc[row]
        assert cell["status"] == "unsupported", (row, cell["status"], cell["error"], cell["reference_check"])
        assert cell["error"].startswith("StringNormalizer's locale zz_ZZ.UTF-8 is not installed where onnxruntime "
                                        "runs (`locale -a` lists those that are) — onnxruntime 1.32.0: "), cell["error"]
    assert "give the case `expected` outputs" not in done.stderr, done.stderr
    assert "not checked (the referee refuses the model: StringNormalizer's locale zz_ZZ.UTF-8" \
           in cells.loc["locale/fp32", "reference"]

    # A8: judged where nothing is drawn; a Dropout that trains still has no reference
    for row in ("dropout_off/fp32", "dropout_r0/fp32"):
        assert cells.loc[row, "status"] == "pass", (row, cells.loc[row, "status"], cells.loc[row, "error"])
    assert cells.loc["dropout_on/fp32", "status"] == "no_reference"
    assert "node Dropout#0 (Dropout) draws random numbers" in cells.loc["dropout_on/fp32", "error"]

    # A4: str and bytes inputs run, the reference made of them, ids and strings compared exactly
    for row in ("str_in/fp32", "bytes_in/fp32"):
        cell = cells.loc[row]
        assert cell["status"] == "pass", (row, cell["status"], cell["error"], cell["reference_check"])
        assert str(cell["reference_check"]).startswith("agrees with onnxruntime 1.32.0 CPU"), cell["reference_check"]
        assert cell["reference"] == "onnx.reference, every floating type made float64: int64 for ids; string for same"

    # Issue 41, sweep 9 B2: a kernel that fails in the same words on zeros and ones refuses the model,
    # not its inputs: onnxruntime's cell `unsupported` in its words, the float64 evaluation not checked
    # (was `disputed` "the model cannot run on these inputs …: fix the inputs")
    cell = cells.loc["floor_mod/fp32"]
    assert cell["status"] == "unsupported", (cell["status"], cell["error"])
    assert cell["error"].startswith("Mod: fmod attribute must be true for floating point types before opset 28, "
                                    "whatever the inputs' values (zeros and ones fail alike) — onnxruntime 1.32.0: "), \
        cell["error"]
    assert "not checked (the referee refuses the model: Mod: fmod attribute must be true" in cell["reference"]
    assert "fix the inputs" not in done.stderr, done.stderr

    # Issue 41, sweep 9 B3: a FLOAT16 step's overflow names float16 and its range, not float32's (70000
    # fits float32), and no "every engine shares" (onnxruntime's CPU Mul computes it wider: 70000)
    cell = cells.loc["f16_step/fp32"]
    assert cell["status"] == "disputed", (cell["status"], cell["error"])
    assert "output 'y' leaves float16's range (65504) at node Mul#1 (Mul): float16 is the type the model declares " \
           "there" in cell["error"], cell["error"]
    assert "give inputs whose values fit float16" in cell["error"] and "float32" not in cell["error"], cell["error"]
    assert "every engine shares" not in cell["error"], cell["error"]


def test_an_invalid_model_and_a_string_input_of_another_form_are_refused_at_plan(tmp_path, write_matrix):
    """Issue 41, sweep 8 A5: Sum of uint8 (no type of Sum's schema) passed the plan and was `disputed`
    "give the case `expected` outputs": now refused at plan, in one line. Sweep 8 A4: a STRING input
    given as numbers or as an object array is refused naming STRING and the form taken."""
    sum_u8 = _save(tmp_path, "sum_u8", [helper.make_node("Sum", ["x", "x", "x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])], {"x": np.array([200, 100, 1], np.uint8)})
    plan = trtmatrix("plan", "-c", str(write_matrix(FP32 + sum_u8, environments=("ort-1.32",))))
    line = plan.stderr.strip().splitlines()[-1]
    assert plan.returncode == 2 and "sum_u8.onnx: not a valid ONNX model: a node is given a type its operator does " \
                                    "not take" in line and "tensor(uint8)" in line, plan.stderr

    numbers = _encoded(tmp_path, "str_nums", np.array([1.0, 2.0, 3.0], np.float32))
    plan = trtmatrix("plan", "-c", str(write_matrix(FP32 + numbers, environments=("ort-1.32",))))
    assert plan.returncode == 2 and "str_nums_in.npz: x: dtype float32, the model's input is STRING: give an array " \
                                    "of str" in plan.stderr and "object" not in plan.stderr, plan.stderr

    objects = _encoded(tmp_path, "str_obj", WORDS.astype(object))
    plan = trtmatrix("plan", "-c", str(write_matrix(FP32 + objects, environments=("ort-1.32",))))
    assert plan.returncode == 2 and "str_obj_in.npz: an object array, which only pickle reads" in plan.stderr, plan.stderr
