"""Every intermediate tensor of an ONNX graph in float64, for `explain`.

The graph with every floating-point type made float64 (inputs, initializers, constants, Cast
targets) is evaluated node by node with onnx.reference.ReferenceEvaluator (numpy). Node by node,
so that a node whose op has no float64 implementation there is named and skipped, with every
node that depends on it, rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
# Attributes that name an output element type (Cast's `to`, RandomNormal's `dtype`, ...).
TYPE_ATTRIBUTES = {"to", "dtype"}


def node_label(node: onnx.NodeProto, index: int) -> str:
    """A node's name, or op type and position for an unnamed one: what the tables show."""
    return node.name or f"{node.op_type}#{index}"


def _as_float64(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if np.issubdtype(array.dtype, np.floating) else array


def _float64_node(node: onnx.NodeProto) -> onnx.NodeProto:
    node = onnx.NodeProto.FromString(node.SerializeToString())
    for attribute in node.attribute:
        if attribute.name in TYPE_ATTRIBUTES and attribute.type == onnx.AttributeProto.INT \
                and attribute.i in FLOAT_TYPES:
            attribute.i = TensorProto.DOUBLE
        elif attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in FLOAT_TYPES:
            attribute.t.CopyFrom(numpy_helper.from_array(_as_float64(numpy_helper.to_array(attribute.t)),
                                                         attribute.t.name))
    return node


@dataclass
class Float64Values:
    values: dict[str, np.ndarray]
    # Node label → why it has no float64 value (no implementation, or an input without one).
    missing: dict[str, str] = field(default_factory=dict)


def float64_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> Float64Values:
    opsets = {o.domain or "": o.version for o in model.opset_import}
    values = {name: _as_float64(array) for name, array in inputs.items()}
    values.update({t.name: _as_float64(numpy_helper.to_array(t)) for t in model.graph.initializer})
    result = Float64Values(values)
    for index, node in enumerate(model.graph.node):
        label = node_label(node, index)
        absent = [name for name in node.input if name and name not in values]
        if absent:
            result.missing[label] = f"no float64 value for its input {absent[0]!r}"
            continue
        try:
            evaluator = ReferenceEvaluator(_float64_node(node), opsets=opsets)
            outputs = evaluator.run(None, {name: values[name] for name in node.input if name})
        except Exception as exc:  # noqa: BLE001 - any failure: this node has no float64 reference
            result.missing[label] = f"no float64 reference for {node.op_type}: {type(exc).__name__}: {exc}"[:300]
            continue
        values.update({name: np.asarray(out) for name, out in zip(node.output, outputs) if name})
    return result
