"""A bad file of an ONNX-file case stops `trtmatrix plan` with one line naming that file (exit 2),
instead of becoming an `error` cell in every environment at run time."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import PROFILES, make_tiny_model, tiny_case

TRTMATRIX = Path(sys.executable).with_name("trtmatrix")


def plan(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(TRTMATRIX), "plan", "-c", str(config)], capture_output=True, text=True)


def matrix(write_matrix, model: Path, inputs: Path, expected: Path | None = None) -> Path:
    body = PROFILES + tiny_case(model, inputs) + (f'expected = "{expected}"\n' if expected else "")
    return write_matrix(body, environments=("ort-1.32",))


def assert_one_line_naming(proc: subprocess.CompletedProcess, path: Path, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), lines
    for word in words:
        assert word in lines[0]


def test_a_good_case_plans(write_matrix, tiny_model):
    proc = plan(matrix(write_matrix, *tiny_model))
    assert proc.returncode == 0, proc.stderr
    assert "tiny/fp32/ort-1.32" in proc.stdout


def test_symbolic_dimensions_take_any_size(write_matrix, tmp_path):
    model, _ = make_tiny_model(tmp_path)
    proto = onnx.load(str(model))
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(proto, str(model))
    inputs = tmp_path / "batch7.npz"
    np.savez(inputs, x=np.zeros((7, 16), dtype=np.float32))
    assert plan(matrix(write_matrix, model, inputs)).returncode == 0


@pytest.mark.parametrize("cut", [0.5, 0.0], ids=["truncated", "empty"])
def test_corrupt_model(write_matrix, tiny_model, cut):
    model, inputs = tiny_model
    data = model.read_bytes()
    model.write_bytes(data[:int(len(data) * cut)])
    assert_one_line_naming(plan(matrix(write_matrix, model, inputs)), model, "not a valid ONNX model")


@pytest.mark.parametrize("arrays, words", [
    ({"z": np.zeros((4, 16), np.float32)}, ["x: missing", "['z']"]),
    ({"x": np.zeros((4, 15), np.float32)}, ["x: shape [4, 15]", "[4, 16]"]),
    ({"x": np.zeros((4, 16, 1), np.float32)}, ["x: shape [4, 16, 1]"]),
    ({"x": np.zeros((4, 16), np.float64)}, ["x: dtype float64", "float32"]),
], ids=["input-missing", "wrong-shape", "wrong-rank", "wrong-dtype"])
def test_bad_inputs(write_matrix, tiny_model, tmp_path, arrays, words):
    model, _ = tiny_model
    inputs = tmp_path / "bad_inputs.npz"
    np.savez(inputs, **arrays)
    assert_one_line_naming(plan(matrix(write_matrix, model, inputs)), inputs, *words)


def test_a_name_that_differs_only_in_unicode_normalisation_says_so(write_matrix, tmp_path):
    """Issue 41, sweep 3 #5: an inputs file whose key is the model's input name in another Unicode
    normalisation (NFD 'e' + U+0301 for NFC 'é') was refused as "input 'é' is not among the arrays
    of this file ['é']": two names that print alike. The code points are shown and the cause said."""
    from onnx import TensorProto, helper

    from matrix.worker.files import save_arrays

    nfc, nfd = "\u00e9", "e\u0301"
    model = tmp_path / "accent.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", [nfc], ["y"])], "g", [helper.make_tensor_value_info(nfc, TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8), model)
    inputs = tmp_path / "accent.npz"
    save_arrays(inputs, {nfd: np.ones(3, np.float32)})
    assert_one_line_naming(plan(matrix(write_matrix, model, inputs)), inputs,
                           "the file's array 'e\\u0301' differs from the model's input '\\xe9' only in Unicode "
                           "normalisation")


def test_inputs_file_that_is_no_npz(write_matrix, tiny_model, tmp_path):
    model, _ = tiny_model
    inputs = tmp_path / "inputs.npz"
    inputs.write_text("x = 1\n")
    refused = plan(matrix(write_matrix, model, inputs))
    # issue 41's second sweep: numpy's last guess (pickle) was the message, inviting an unsafe load
    assert_one_line_naming(refused, inputs, "not an .npz file", "no zip")
    assert "pickle" not in refused.stderr


@pytest.mark.parametrize("make, words", [
    (lambda path: path.symlink_to(path.name), "a symbolic link to nothing (or a loop of links)"),
    (lambda path: os.mkfifo(path), "not a regular file (a pipe, a device or a socket)"),
], ids=["symlink-loop", "fifo"])
def test_an_inputs_path_that_is_no_file_says_what_it_is(write_matrix, tiny_model, tmp_path, make, words):
    """Issue 41's second sweep: a loop of links was "trtmatrix failed" (exit 3, a traceback file), a
    pipe "file not found"."""
    inputs = tmp_path / "in.npz"
    make(inputs)
    config = matrix(write_matrix, tiny_model[0], inputs)
    assert_one_line_naming(plan(config), config, f"cases.tiny.inputs: {words}: {inputs}")


@pytest.mark.parametrize("arrays, words", [
    ({"logits": np.zeros((4, 8))}, ["y: missing", "['logits']"]),
    ({"y": np.zeros((8, 4))}, ["y: shape [8, 4]", "[4, 8]"]),
    ({"y": np.full((4, 8), "1")}, ["y: dtype <U1", "float32"]),  # issue 41's second sweep: judged as max_abs 1
], ids=["wrong-name", "wrong-shape", "text-for-numbers"])
def test_bad_expected_outputs(write_matrix, tiny_model, tmp_path, arrays, words):
    expected = tmp_path / "expected.npz"
    np.savez(expected, **arrays)
    assert_one_line_naming(plan(matrix(write_matrix, *tiny_model, expected)), expected, *words)


def test_a_sequence_output_is_refused_at_plan_saying_what_is_judged(write_matrix, tmp_path):
    """Issue 41, second sweep, finding 24: a sequence output was `no_reference` ("onnxruntime cannot
    run the model", though it does), and with an expected file an `error` blaming the engine."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [3])])
    model = tmp_path / "seq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones(3, np.float32))
    assert_one_line_naming(plan(matrix(write_matrix, model, inputs)), model, "s: a sequence output, not a tensor")


def test_a_fifo_named_like_a_case_file_is_no_hang(write_matrix, tiny_model, tmp_path):
    """Issue 41, third sweep, finding 16: a FIFO named `x.py` in the cases folder blocked `plan` and
    `run` forever, silently, even for a matrix whose only case is an ONNX file."""
    cases = tmp_path / "cases"
    cases.mkdir()
    os.mkfifo(cases / "stray.py")
    config = write_matrix(PROFILES + tiny_case(*tiny_model), environments=("ort-1.32",), cases_dir=cases)
    done = subprocess.run([str(TRTMATRIX), "plan", "-c", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
