"""Every intermediate tensor of an ONNX graph in float64, for `explain`.

The graph with every floating-point type made float64 (inputs, initializers, constants, Cast
targets) is evaluated node by node with onnx.reference.ReferenceEvaluator (numpy). Node by node,
so that a node whose op has no float64 implementation there is named and skipped, with every
node that depends on it, rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
# Attributes that name an output element type (Cast's `to`, RandomNormal's `dtype`, ...).
TYPE_ATTRIBUTES = {"to", "dtype"}


class GatherElements(OpRun):
    """onnx.reference's own GatherElements fails once the gathered axis has more than 64 entries
    (np.choose's limit, then a fallback that reshapes wrongly; onnx 1.23): XLM-RoBERTa's position
    ids hit it. np.take_along_axis is the op."""

    op_domain = ""

    def _run(self, data, indices, axis=None):
        axis = (axis or 0) % data.ndim
        return (np.take_along_axis(data, np.where(indices < 0, indices + data.shape[axis], indices), axis=axis),)


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


def float64_nodes(model: onnx.ModelProto, inputs: dict[str, np.ndarray], keep: bool = True
                  ) -> Iterator[tuple[int, onnx.NodeProto, dict[str, np.ndarray], dict[str, np.ndarray] | str]]:
    """(order, node, its float64 inputs, its float64 outputs or why it has none), node by node.
    keep=False frees each value after its last use (a forecast over a large model)."""
    opsets = {o.domain or "": o.version for o in model.opset_import}
    values = {name: _as_float64(array) for name, array in inputs.items()}
    values.update({t.name: _as_float64(numpy_helper.to_array(t)) for t in model.graph.initializer})
    last_use = {name: order for order, node in enumerate(model.graph.node) for name in node.input}
    for order, node in enumerate(model.graph.node):
        absent = [name for name in node.input if name and name not in values]
        given = {name: values[name] for name in node.input if name and name in values}
        if absent:
            yield order, node, given, f"no float64 value for its input {absent[0]!r}"
        else:
            try:
                with np.errstate(all="ignore"):  # inf/NaN are values here, reported where they matter
                    results = ReferenceEvaluator(_float64_node(node), opsets=opsets, new_ops=[GatherElements]).run(None, given)
            except Exception as exc:  # noqa: BLE001 - any failure: this node has no float64 reference
                yield order, node, given, f"no float64 reference for {node.op_type}: {type(exc).__name__}: {exc}"[:300]
            else:
                # A sequence (a list) has no float64 tensor: the nodes that read it have no value either.
                produced = {name: np.asarray(out) for name, out in zip(node.output, results) if name and not isinstance(out, list)}
                values.update(produced)
                yield order, node, given, produced
        if not keep:
            for name in [n for n in node.input if last_use.get(n) == order]:
                values.pop(name, None)


def float64_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> Float64Values:
    result = Float64Values({name: _as_float64(array) for name, array in inputs.items()})
    for order, node, _, outputs in float64_nodes(model, inputs):
        if isinstance(outputs, str):
            result.missing[node_label(node, order)] = outputs
        else:
            result.values.update(outputs)
    return result
