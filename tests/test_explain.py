"""`trtmatrix explain` names the op the known-issue registry documents for the real onnxruntime
regressions of cases/ort_regressions.py, on the released versions that have them, through the
real command line; the float64 intermediates say where they have no reference."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

from conftest import REPO, matrix_file, report_details
from matrix.reference.float64_graph import float64_values
from matrix.sources.known_issues import load_registry
from matrix.store import list_runs

REGISTRY = {issue.case: issue for issue in load_registry(REPO / "cases" / "known_issues.toml")}
BODY = '[profiles.fp32]\nprecision = "fp32"\n' + "".join(
    f'[cases.{case}]\nprofiles = ["fp32"]\n' for case in ("ort_clip_fp16_min_only", "ort_pad_avgpool_fusion"))


@pytest.fixture(scope="module")
def project(tmp_path_factory, cache_dir):
    home = tmp_path_factory.mktemp("explain")
    config = matrix_file(home, cache_dir, BODY, environments=("ort-1.19.0", "ort-1.20", "ort-1.32"))
    subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO, check=True,
                   capture_output=True)
    return config, list_runs(home / "reports")[-1]


def explain(config, cell, *args):
    result = subprocess.run([sys.executable, "-m", "matrix.cli", "explain", cell, "-c", str(config), *args],
                            cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    return result, (json.loads(result.stdout) if result.returncode == 0 and "--json" in args else None)


def test_explain_names_the_clip_kernel_on_the_release_that_has_the_bug(project):
    config, run_dir = project
    result, found = explain(config, "ort_clip_fp16_min_only/fp32/ort-1.19.0", "--json")
    assert result.returncode == 0, result.stderr
    first = found["first_divergent"]
    assert first["op_type"] == "Clip" and "Clip" in REGISTRY["ort_clip_fp16_min_only"].title
    assert first["max_abs"] > 0.1 and found["nodes"] == 4  # Cast → Constant(min) → Clip → Cast
    folder = run_dir / "explain" / "ort_clip_fp16_min_only__fp32__ort-1.19.0"
    layers = pd.read_parquet(folder / "layers.parquet")
    assert list(layers["op_type"]) == ["Cast", "Constant", "Clip", "Cast"]
    # The Cast to FP16 before it was observed and is within tolerance; the Cast after it inherits the error.
    assert list(layers["within"]) == [True, True, False, False]
    assert list(layers["inputs_within"]) == [True, True, True, False]
    assert json.loads((folder / "explain.json").read_text())["first_divergent"]["node"] == first["node"]
    # The report of the run, rendered again, shows it in the cell's details.
    cell = next(c for c in report_details(run_dir) if c["cell_id"] == "ort_clip_fp16_min_only/fp32/ort-1.19.0")
    assert "/Clip" in cell["findings"]["explain"]["summary"] and cell["findings"]["explain"]["plot"]["first"]


def test_a_fused_pair_is_observed_one_node_at_a_time_and_the_fused_op_is_named(project):
    config, _ = project
    result, _ = explain(config, "ort_pad_avgpool_fusion/fp32/ort-1.20")
    assert result.returncode == 0, result.stderr
    assert "observed alone" in result.stdout  # marking the Pad's output stops the fusion: the cell passed
    assert "first divergent node: /AveragePool (AveragePool" in result.stdout
    assert "AveragePool" in REGISTRY["ort_pad_avgpool_fusion"].title


def test_a_cell_that_passes_has_no_divergent_node_and_a_skipped_one_is_refused(project):
    config, _ = project
    result, found = explain(config, "ort_clip_fp16_min_only/fp32/ort-1.32", "--json")
    assert result.returncode == 0, result.stderr
    assert found["first_divergent"] is None and found["nodes"] == 4
    result, _ = explain(config, "ort_clip_fp16_min_only/fp32/ort-1.9", "--json")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "not a cell of the matrix" in result.stderr


def test_a_finding_goes_into_the_newest_run_that_holds_its_cell(project):
    """Issue 41, sweep 6 #10: explain and repro wrote into (and spoke for) the newest run even where
    it did not hold the cell — a run of other cases: repro's ISSUE.md said "no older release tried
    gives the right numbers" of a run that tried none. The newest run that holds the cell is taken;
    a --run that does not hold it is refused, naming the one that does."""
    config, run_dir = project
    newer = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--case",
                            "ort_pad_avgpool_fusion", "--env", "ort-1.32"], cwd=REPO, capture_output=True, text=True)
    newer_dir = list_runs(run_dir.parent.parent)[-1]
    assert newer.returncode == 0 and newer_dir != run_dir, newer.stderr
    result, _ = explain(config, "ort_clip_fp16_min_only/fp32/ort-1.20")
    assert result.returncode == 0, result.stderr
    assert f"written to {run_dir / 'explain' / 'ort_clip_fp16_min_only__fp32__ort-1.20'}" in result.stdout, result.stdout
    assert not (newer_dir / "explain").exists()
    refused, _ = explain(config, "ort_clip_fp16_min_only/fp32/ort-1.20", newer_dir.name)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"run {newer_dir.name} does not hold ort_clip_fp16_min_only/fp32/ort-1.20" in refused.stderr
    assert f"the newest run that holds it is {run_dir.name}" in refused.stderr, refused.stderr


def test_float64_values_skip_a_node_without_a_float64_reference_and_what_depends_on_it():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("FastGelu", ["sq"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Add", ["g", "x"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    found = float64_values(model, {"x": np.array([0.1, 0.2, 0.3], dtype=np.float32)})
    assert found.values["sq"].dtype == np.float64
    assert found.values["sq"][2] == np.float64(np.float32(0.3)) ** 2  # float64 arithmetic on the float32 input
    assert set(found.missing) == {"gelu", "add"}
    assert "FastGelu" in found.missing["gelu"] and "'g'" in found.missing["add"]
    onnx.checker.check_model(model)


def test_a_tensor_of_unknown_rank_is_observed_in_an_fp16_cell(tmp_path, cache_dir):
    """A stranger's explain of a real FP16 cell (PaddleOCR's recogniser) ended, exit 2, in its own FP16
    copy failing the checker ("Field 'shape' of 'type' is required but missing"): a Squeeze without
    axes has no rank shape inference can tell, and an output needs a shape. Declared with its float64
    value's rank, every tensor is observed."""
    graph = helper.make_graph(
        [helper.make_node("Squeeze", ["x"], ["s"], name="squeeze"), helper.make_node("Mul", ["s", "s"], ["m"], name="square"),
         helper.make_node("Sqrt", ["m"], ["y"], name="root")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["K"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model)
    assert not next(v for v in inferred.graph.value_info if v.name == "s").type.tensor_type.HasField("shape")
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).normal(size=(1, 64)).astype(np.float32) * 300)
    body = (f'[profiles.fp16]\nprecision = "fp16"\n[cases.sq]\nonnx = "{tmp_path / "m.onnx"}"\n'
            f'inputs = "{tmp_path / "in.npz"}"\nprofiles = ["fp16"]\n[cases.sq.tolerances.fp16]\natol = 1e-6\nrtol = 0.0\n')
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",))
    subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO, capture_output=True)
    result, found = explain(config, "sq/fp16/ort-1.20", "--json")
    assert result.returncode == 0, result.stderr
    layers = pd.read_parquet(list_runs(tmp_path / "reports")[-1] / "explain" / "sq__fp16__ort-1.20" / "layers.parquet")
    assert list(layers["node"]) == ["squeeze", "square", "root"]
