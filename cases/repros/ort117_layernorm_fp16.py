"""onnxruntime 1.17.3 (and 1.16.3, 1.18.1), CPU: two FP16 LayerNormalization nodes in a row are
right on the first run of a session and wrong from the second on, unless memory-pattern planning
is off; 1.19.0, 1.19.2, 1.20.1 and 1.32.0 are right on every run.

Run with any onnxruntime (needs numpy and onnx): prints max |out - float64 reference| per run,
exits 1 when a later run differs from the first. Entry `ort-layernorm-fp16-mem-pattern` of
cases/known_issues.toml.
"""

import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)
scale, bias = rng.standard_normal(32).astype(np.float16), rng.standard_normal(32).astype(np.float16)
graph = helper.make_graph(
    [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
     helper.make_node("LayerNormalization", ["x16", "scale", "bias"], ["n1"], axis=-1),
     helper.make_node("LayerNormalization", ["n1", "scale", "bias"], ["n2"], axis=-1),
     helper.make_node("Cast", ["n2"], ["y"], to=TensorProto.FLOAT)],
    "two_fp16_layernorms",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32])],
    [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias")],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
x = rng.standard_normal((1, 8, 32)).astype(np.float32)


def layernorm(v):
    v = v.astype(np.float64)
    return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) * scale + bias


reference = layernorm(layernorm(x))
broken = False
for mem_pattern in (True, False):
    options = ort.SessionOptions()
    options.enable_mem_pattern = mem_pattern
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    runs = [session.run(None, {"x": x})[0] for _ in range(3)]
    errors = [float(np.max(np.abs(run - reference))) for run in runs]
    broken |= any(not np.array_equal(run, runs[0]) for run in runs)
    print(f"onnxruntime {ort.__version__} enable_mem_pattern={mem_pattern}: max_abs per run",
          " ".join(f"{e:.3g}" for e in errors))
sys.exit(1 if broken else 0)
