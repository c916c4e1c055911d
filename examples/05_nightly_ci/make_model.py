"""Writes this example's model, `features.onnx` (Conv 3x3 → Relu → Conv 1x1, a small image
feature extractor, batch dimension named `batch`), and its inputs, `images.npz`, in this folder.

`--smoothing` writes the model as the next night's commit changes it: a zero Pad and a 3x3
AveragePool that leaves the padding out of its averages (count_include_pad=0) after the Relu —
a pattern onnxruntime 1.19.0 to 1.20.1 compute wrongly on the border (cases/ort_regressions.py,
ort_pad_avgpool_fusion).
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def model(smoothing: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((8, 4, 3, 3)) / 6, "b1": 0.1 * rng.standard_normal(8),
               "w2": rng.standard_normal((4, 8, 1, 1)) / 3, "b2": 0.1 * rng.standard_normal(4),
               "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1])}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1")]
    last = "r1"
    if smoothing:
        nodes += [helper.make_node("Pad", ["r1", "pads"], ["padded"], name="pad", mode="constant"),
                  helper.make_node("AveragePool", ["padded"], ["smoothed"], name="smooth", kernel_shape=[3, 3],
                                   count_include_pad=0)]
        last = "smoothed"
    nodes.append(helper.make_node("Conv", [last, "w2", "b2"], ["features"], name="conv2"))
    graph = helper.make_graph(
        nodes, "features",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [numpy_helper.from_array(value.astype(np.int64 if name == "pads" else np.float32), name)
         for name, value in weights.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(proto)
    return proto


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoothing", action="store_true", help="the next night's model")
    smoothing = parser.parse_args().smoothing
    onnx.save(model(smoothing), HERE / "features.onnx")
    np.savez(HERE / "images.npz", x=np.random.default_rng(1).standard_normal((2, 4, 8, 8)).astype(np.float32) + 1)
    print(f"wrote features.onnx ({'with' if smoothing else 'without'} smoothing) and images.npz")


if __name__ == "__main__":
    main()
