"""The FP16 copy that onnxruntime profiles run is a valid model, everywhere it is made and run."""

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import small_matrix
from matrix.config import Profile
from matrix.prepare.fp16_variant import InvalidVariant
from matrix.prepare.layers import node_types
from matrix.plan import build_plan
from matrix.prepare import INPUTS, MODEL, REFERENCE, model_for_profile, prepare
from matrix.run import MatrixRun
from matrix.store import PARQUET

LEVELS = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
LAYERNORM_FP32 = Profile(precision="fp16", keep_fp32=("LayerNormalization",))


def fp16_profiles(plan):
    return {**{n: p for n, p in plan.config.profiles.items() if p.precision == "fp16"},
            "fp16-layernorm-fp32": LAYERNORM_FP32}


def test_every_fp16_variant_passes_the_full_checker_and_runs(prepared):
    plan, done = prepared
    assert set(fp16_profiles(plan)) == {"fp16", "fp16-softmax-fp32", "fp16-layernorm-fp32"}
    checked = []
    for (case, params), directory in done.items():
        op_types = set(node_types(onnx.load(str(directory / MODEL), load_external_data=False)).values())
        for name, profile in fp16_profiles(plan).items():
            if not set(profile.keep_fp32) <= op_types:
                continue  # keep_fp32 of an op type the case does not have is a configuration error
            variant = model_for_profile(directory, profile, True)
            onnx.checker.check_model(str(variant), full_check=True)  # strict shape and type inference
            with np.load(directory / INPUTS) as inputs, np.load(directory / REFERENCE) as reference:
                for level in LEVELS:
                    options = ort.SessionOptions()
                    options.graph_optimization_level = level
                    session = ort.InferenceSession(str(variant), options, providers=["CPUExecutionProvider"])
                    outputs = session.run(None, dict(inputs))
                    assert [o.name for o in session.get_outputs()] == reference.files
                    for value, expected in zip(outputs, reference.files):
                        assert value.dtype == np.float32 and value.shape == reference[expected].shape
                        assert np.isfinite(value).all(), (case, name, level)
            checked.append((case, name))
    assert {case for case, _ in checked} == {case for case, _ in done}
    assert {name for _, name in checked} == set(fp16_profiles(plan))


def test_fp16_variants_run_on_onnxruntime_1_17_without_graph_optimisations(write_matrix):
    """onnxruntime 1.17 inserts its own Casts with optimisations off; the converter's float16→float16
    Casts made it mistype them ("InsertedPrecisionFreeCast_… does not match expected type")."""
    body = small_matrix('["fp16-noopt"]') + '[profiles.fp16-noopt]\nprecision = "fp16"\noptimization = "off"\n'
    frame = pd.read_parquet(MatrixRun(build_plan(write_matrix(body, environments=("ort-1.17",)))).execute() / PARQUET)
    assert set(frame["engine_version"]) == {"1.17.3"}
    assert frame.loc[frame["verdict"].isin(["error", "crash"]), ["cell_id", "error"]].values.tolist() == []


def untyped_case(directory) -> str:
    """An ONNX-file case valid in FP32 whose FP16 copy (Gelu kept FP32) is not: the converter cannot
    type a com.microsoft op's output (Gelu's, here undeclared), casts nothing after it, and onnxruntime
    refuses the copy's Mul of float by float16. (An opset-13 DequantizeLinear was this example until
    its scale stayed FP32.)"""
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
         helper.make_node("Mul", ["g", "k"], ["y"], name="scale")],
        "untyped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0.5, dtype=np.float32), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    path = directory / "untyped.onnx"
    onnx.save(model, path)
    np.savez(directory / "inputs.npz", x=np.ones(4, dtype=np.float32))
    return f'[cases.tiny]\nonnx = "{path}"\ninputs = "{directory / "inputs.npz"}"\nprofiles = ["fp16"]\n'


def test_an_invalid_variant_is_never_written_and_its_cells_say_why(write_matrix, tmp_path):
    profile = '[profiles.fp16]\nprecision = "fp16"\nkeep_fp32 = ["gelu"]\n'
    plan = build_plan(write_matrix(profile + untyped_case(tmp_path), environments=("ort-1.32",)))
    cell = plan.cells[0]
    directory = prepare(plan.cases["tiny"], cell.params, cell.artifact_key, plan.path("cache_dir"))
    with pytest.raises(InvalidVariant, match="cannot load the FP16 variant.*Mul"):
        model_for_profile(directory, plan.profile("fp16"), True)
    assert [p.name for p in directory.iterdir() if "fp16" in p.name] == []
    frame = pd.read_parquet(MatrixRun(plan).execute() / PARQUET).set_index("cell_id")
    assert frame.loc["tiny/fp16/ort-1.32", "status"] == "error"
    assert frame.loc["tiny/fp16/ort-1.32", "error"].startswith("model variant failed: ")
    assert "(Mul) bound to different types" in frame.loc["tiny/fp16/ort-1.32", "error"]


def test_a_sparse_weight_is_made_dense_in_the_fp16_copy(tmp_path):
    """Issue 41, sweep 14 G9: the FP16 copy kept a `sparse_initializer`, which the checker's shape
    inference does not read (the copy failed its full check): every FP16 cell was "model variant
    failed: InvalidVariant". The copy holds it dense, in FP16, and runs."""
    from matrix.prepare.fp16_variant import write_fp16_variant

    weight = helper.make_sparse_tensor(numpy_helper.from_array(np.array([2, 1, 1, 1], np.float32), "w"),
                                       numpy_helper.from_array(np.array([0, 5, 10, 15], np.int64), "w_indices"), [4, 4])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], sparse_initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, tmp_path / "sparse.onnx")
    write_fp16_variant(model, [], tmp_path / "fp16.onnx", tmp_path / "sparse.onnx")
    session = ort.InferenceSession(str(tmp_path / "fp16.onnx"), providers=["CPUExecutionProvider"])
    x = np.array([[1, 2, 3, 4]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], [[2, 2, 3, 4]])
