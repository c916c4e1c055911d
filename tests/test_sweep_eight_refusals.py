"""Nothing silent, the stranger's eighth sweep (issue 41): a model the engine cannot load here, a
Dropout that draws nothing, a STRING graph input: each was a dispute, a missing reference or a
refusal at plan where the model can be judged or its refusal said. The verdicts are read from the
session's shared `trtmatrix run` (onnxruntime 1.32, tests/sweep_cases.py: its models), `trtmatrix
plan` for what is refused before it; each assertion failed on 527a463. The ninth sweep's B2 and B3
(a kernel that refuses the model whatever its inputs' values; a FLOAT16 step's overflow) ride in the
same run and failed on 4c534c5."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from matrix.store import read_run
from sweep_cases import WORDS, encoded, save_ml
from test_nothing_silent_four import trtmatrix

FP32 = '[profiles.fp32]\nprecision = "fp32"\n'


def test_what_cannot_load_here_draws_nothing_or_is_text_is_said_or_judged(sweep_run_132):
    """Issue 41, sweep 8 A5: a StringNormalizer onnxruntime cannot load here (no such locale) was
    `disputed` "give the case `expected` outputs", and `error` with them: now `unsupported` in both,
    the host's cause first. Sweep 8 A8: a Dropout whose training_mode input is fed False (or whose
    ratio is 0) was `no_reference` "draws random numbers": it is the identity, judged. Sweep 8 A4: a
    STRING graph input could be given in no form ("the model's input is object"): str and bytes
    arrays are taken, evaluated, compared and recorded."""
    done = sweep_run_132.done
    assert "Traceback" not in done.stderr, done.stderr
    cells = read_run(sweep_run_132.run_dir).set_index("row_id")

    # A5: the same status and cause without and with an expected file; nothing asks for one
    for row in ("locale/fp32", "locale_exp/fp32"):
        cell = cells.loc[row]
        assert cell["status"] == "unsupported", (row, cell["status"], cell["error"], cell["reference_check"])
        assert cell["error"].startswith("StringNormalizer's locale zz_ZZ.UTF-8 is not installed where onnxruntime "
                                        "runs (`locale -a` lists those that are) — onnxruntime 1.32.0: "), cell["error"]
    # (the shared run's bad_mode case, which no engine nor referee can run, is asked for them)
    asked = [line for line in done.stderr.splitlines() if "give the case `expected` outputs" in line]
    assert not [line for line in asked if "locale" in line], done.stderr
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
    # Since sweep 17 K7 such a cell runs, and onnxruntime's 70000 is float64's own reading, within tolerance: pass,
    # the dispute kept in its reference check
    cell = cells.loc["f16_step/fp32"]
    assert cell["status"] == "pass", (cell["status"], cell["error"])
    said = cell["reference_check"]
    assert "output 'y' leaves float16's range (65504) at node Mul#1 (Mul): float16 is the type the model declares " \
           "there" in said, said
    assert "give inputs whose values fit float16" in said and "float32" not in said, said
    assert "every engine shares" not in said, said


def test_an_invalid_model_and_a_string_input_of_another_form_are_refused_at_plan(tmp_path, write_matrix):
    """Issue 41, sweep 8 A5: Sum of uint8 (no type of Sum's schema) passed the plan and was `disputed`
    "give the case `expected` outputs": now refused at plan, in one line. Sweep 8 A4: a STRING input
    given as numbers or as an object array is refused naming STRING and the form taken."""
    sum_u8 = save_ml(tmp_path, "sum_u8", [helper.make_node("Sum", ["x", "x", "x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])], {"x": np.array([200, 100, 1], np.uint8)})
    plan = trtmatrix("plan", "-c", str(write_matrix(FP32 + sum_u8, environments=("ort-1.32",))))
    line = plan.stderr.strip().splitlines()[-1]
    assert plan.returncode == 2 and "sum_u8.onnx: not a valid ONNX model: a node is given a type its operator does " \
                                    "not take" in line and "tensor(uint8)" in line, plan.stderr

    numbers = encoded(tmp_path, "str_nums", np.array([1.0, 2.0, 3.0], np.float32))
    plan = trtmatrix("plan", "-c", str(write_matrix(FP32 + numbers, environments=("ort-1.32",))))
    assert plan.returncode == 2 and "str_nums_in.npz: x: dtype float32, the model's input is STRING: give an array " \
                                    "of str" in plan.stderr and "object" not in plan.stderr, plan.stderr

    objects = encoded(tmp_path, "str_obj", WORDS.astype(object))
    plan = trtmatrix("plan", "-c", str(write_matrix(FP32 + objects, environments=("ort-1.32",))))
    assert plan.returncode == 2 and "str_obj_in.npz: an object array, which only pickle reads" in plan.stderr, plan.stderr
