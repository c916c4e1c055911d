"""Writes the files a user brings: a small ONNX classifier (LayerNorm → MatMul → Relu → MatMul →
Softmax, batch dimension named `batch`), two input sets (1 and 4 samples) and, for each, the
outputs the model's own code computed (numpy, float64) — in this folder.

Stands in for your own model: trtmatrix reads these files, it does not need this script.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
FEATURES, HIDDEN, CLASSES = 32, 64, 10


def weights(rng):
    return {"gamma": 1 + 0.1 * rng.standard_normal(FEATURES), "beta": 0.1 * rng.standard_normal(FEATURES),
            "W1": rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES), "b1": 0.1 * rng.standard_normal(HIDDEN),
            "W2": rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN), "b2": 0.1 * rng.standard_normal(CLASSES)}


def model(w) -> onnx.ModelProto:
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["normed"], name="norm", axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["normed", "W1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["h_b"], name="fc1_bias"),
             helper.make_node("Relu", ["h_b"], ["a"], name="relu"),
             helper.make_node("MatMul", ["a", "W2"], ["logits_nb"], name="fc2"),
             helper.make_node("Add", ["logits_nb", "b2"], ["logits"], name="fc2_bias"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    graph = helper.make_graph(
        nodes, "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES])],
        [numpy_helper.from_array(value.astype(np.float32), name) for name, value in w.items()])
    # Opset 17, IR version 8: old enough for onnxruntime 1.17.
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(proto)
    return proto


def outputs(w, x):
    """The model's maths in numpy, float64: what your framework says the outputs are."""
    w = {name: value.astype(np.float32).astype(np.float64) for name, value in w.items()}
    x = x.astype(np.float64)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w["gamma"] + w["beta"]
    logits = np.maximum(normed @ w["W1"] + w["b1"], 0) @ w["W2"] + w["b2"]
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return {"logits": logits, "probs": e / e.sum(-1, keepdims=True)}


def main():
    rng = np.random.default_rng(0)
    w = weights(rng)
    onnx.save(model(w), HERE / "classifier.onnx")
    for batch in (1, 4):
        x = rng.standard_normal((batch, FEATURES)).astype(np.float32)
        np.savez(HERE / f"batch{batch}.npz", x=x)
        np.savez(HERE / f"batch{batch}_expected.npz", **outputs(w, x))
    print("wrote classifier.onnx, batch1.npz, batch4.npz, batch1_expected.npz, batch4_expected.npz")


if __name__ == "__main__":
    main()
