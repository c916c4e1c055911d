"""Issue 44, point 5 (small things that mislead), through `trtmatrix run` and `summary` on real
onnxruntime: the terminal's table shows enough digits to read 1.54 as 1.54; the FP16 forecast's
ready-to-paste trtexec line names the case's own ONNX file; summary says how --link-base keeps its
links working once pasted. (The known issue named under the table: tests/test_ci_gate.py.)"""

import shlex

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import PROFILES, make_tiny_model
from matrix.store import list_runs
from test_reports_cli import cli


def _scaled_model(directory, scale: float):
    """y = tanh(x @ (W · scale)): the MatMul's output leaves FP16's range when scale is large."""
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((16, 8)) * scale).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="big_matmul"), helper.make_node("Tanh", ["h"], ["y"], name="tanh")],
        "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [numpy_helper.from_array(weight, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = directory / "my model (scaled).onnx"  # a name with a space and parentheses: quoted when pasted
    onnx.save(model, path)
    np.savez(directory / "scaled_inputs.npz", x=rng.standard_normal((4, 16)).astype(np.float32))
    return path, directory / "scaled_inputs.npz"


def test_the_terminal_shows_three_digits_and_the_forecast_names_the_cases_own_file(write_matrix, tmp_path):
    model, inputs = make_tiny_model(tmp_path)
    expected = tmp_path / "twos.npz"
    np.savez(expected, y=np.full((4, 8), 2.0))
    scaled, scaled_inputs = _scaled_model(tmp_path, 1e5)
    body = (PROFILES + f'[cases.wrong]\nonnx = "{model}"\ninputs = "{inputs}"\nexpected = "{expected}"\nprofiles = ["fp32"]\n'
            + f'[cases.scaled]\nonnx = "{scaled}"\ninputs = "{scaled_inputs}"\nprofiles = ["fp32"]\n')
    done = cli("run", "-c", str(write_matrix(body, environments=("ort-1.32",))))
    assert done.returncode == 0, done.stderr

    # The error, computed here in float64 apart from trtmatrix: tanh never reaches 2.
    loaded = onnx.load(model)
    weight, bias = (numpy_helper.to_array(t).astype(np.float64) for t in loaded.graph.initializer)
    y = np.tanh(np.load(inputs)["x"].astype(np.float64) @ weight + bias)
    assert f"FAIL {2 - y.min():.2e}" in done.stderr  # '1.54e+00', never '2e+00'

    page = (list_runs(tmp_path / "reports")[-1] / "report.html").read_text()
    forecast = page.split('id="fp16-forecast"')[1]
    assert "big_matmul" in forecast
    pasted = f"trtexec --onnx={shlex.quote(str(scaled))} --fp16".replace("'", "&#39;")  # as the page escapes it
    assert pasted in forecast and "--onnx=model.onnx" not in forecast
    assert f"polygraphy run {shlex.quote(str(scaled))}".replace("'", "&#39;") in forecast


def test_summary_says_how_link_base_makes_its_links_survive_pasting(write_matrix, tmp_path):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + f'[cases.tiny]\nonnx = "{model}"\ninputs = "{inputs}"\nprofiles = ["fp32"]\n')
    assert cli("run", "-c", str(config)).returncode == 0
    local = cli("summary", "-c", str(config), "-o", str(tmp_path / "summary.md"))
    assert local.returncode == 0, local.stderr
    assert "pasted into a pull request or release notes they break; --link-base URL" in local.stderr
    published = cli("summary", "-c", str(config), "--link-base", "https://ci.example.org/nightly/report.html")
    assert published.returncode == 0 and "--link-base" not in published.stderr
    assert "[full report](https://ci.example.org/nightly/report.html)" in published.stdout
