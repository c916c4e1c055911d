"""The FP16 risk forecast from float64 intermediates, on a model built so that each risk is known
by construction, and on the seed cases as prepared for real (the LayerNorm seed's five norms)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import matrix_file
from matrix.plan import build_plan
from matrix.prepare import case_meta, prepare
from matrix.prepare.fp16_forecast import fp16_forecast


def test_each_kind_of_risk_is_found_with_its_number_and_a_safe_node_is_not():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    far = helper.make_tensor_value_info("far", TensorProto.FLOAT, [2])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("ln", "mm", "tiny", "big", "safe", "scaled")]
    weights = [numpy_helper.from_array(np.ones(4, np.float32), "scale"), numpy_helper.from_array(np.zeros(4, np.float32), "bias"),
               numpy_helper.from_array(np.full((4, 1), 200, np.float32), "w"),
               numpy_helper.from_array(np.array(1e-7, np.float32), "small"), numpy_helper.from_array(np.array(7e4, np.float32), "shift")]
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], name="norm", axis=-1),
             helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
             helper.make_node("Mul", ["x", "small"], ["tiny"], name="shrink"),
             helper.make_node("Add", ["x", "shift"], ["big"], name="grow"),
             helper.make_node("Relu", ["x"], ["safe"], name="relu"),
             # issue 41, fourth sweep, 1: an input beyond FP16 that a node scales back into range
             helper.make_node("Div", ["far", "shift"], ["scaled"], name="scale_down")]
    model = helper.make_model(helper.make_graph(nodes, "risks", [x, far], outs, weights),
                              opset_imports=[helper.make_opsetid("", 17)])
    values = np.array([[300.0, -300.0, 300.0, -300.0]], np.float32)  # x @ w cancels to 0; |x| @ |w| does not

    found = {r["node"]: r for r in fp16_forecast(model, {"x": values, "far": np.array([1e6, 1.0], np.float32)})["risky"]}
    assert set(found) == {"norm", "matmul", "shrink", "grow", "scale_down"}
    assert "its input 'far', which no node computes, reaches 1e+06 (FP16 max 65504)" in found["scale_down"]["reasons"]
    assert found["norm"]["internal"] == (values.astype(np.float64) ** 2).sum() == 360000.0
    assert found["matmul"]["max_abs"] == 0.0 and found["matmul"]["internal"] == 4 * 300 * 200
    assert found["shrink"]["subnormal_share"] == 1.0  # 3e-5 < 6.1e-5 everywhere
    assert found["grow"]["max_abs"] == 70300.0 and "values reach 7.03e+04" in found["grow"]["reasons"][0]


def test_the_layernorm_seed_forecasts_its_five_norms_and_nothing_else(tmp_path, cache_dir):
    """Seed 004 (inputs of mean 30, spread 8, 384 wide): every LayerNorm's sum of squares passes
    65504 although its outputs are normalised; the matrix's fp16-layernorm-* profiles hold them."""
    config = matrix_file(tmp_path, cache_dir, '[profiles.fp16]\nprecision = "fp16"\n[cases.layernorm_block]\nprofiles = ["fp16"]\n',
                         environments=("ort-1.32",))
    plan = build_plan(config)
    cell = plan.cells[0]
    forecast = case_meta(prepare(plan.cases[cell.case], cell.params, cell.artifact_key, cache_dir))["fp16_forecast"]
    assert [r["name"] for r in forecast["risky"]] == [f"/norms.{i}/LayerNormalization" for i in range(4)] + \
        ["/final/LayerNormalization"]
    assert all(r["internal"] > 65504 and r["max_abs"] < 65504 for r in forecast["risky"])
