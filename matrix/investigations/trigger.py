"""What makes a fault's op fail, in words for a report's title, read from the repro's model: the
op with its attributes, its constant inputs' values, the optional inputs it was not given, the
element type it computes in, and, where the op alone gives the right numbers (the reduction kept
what comes before it), the nodes before it: `Pad(…) → AveragePool(count_include_pad=0, …)`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..sources.fault_patterns import constants, element_types, input_names

LARGEST_SHOWN = 4  # elements of a constant input written out
# Attributes whose value here means "none of it": left out of a trigger.
NEUTRAL = {"pads": 0, "strides": 1, "dilations": 1}


def _value(value) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        text = ", ".join(f"{v:g}" if isinstance(v, (float, np.floating)) else str(v) for v in flat.tolist())
        return text if flat.size == 1 else f"[{text}]"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, onnx.TensorProto):
        return _value(numpy_helper.to_array(value)) if np.prod(value.dims) <= LARGEST_SHOWN else "a tensor"
    if isinstance(value, onnx.GraphProto):
        return "a subgraph"
    return str(value)


def _neutral(attribute: onnx.AttributeProto) -> bool:
    """Zero pads, unit strides or dilations: what leaving them out means, no part of a trigger.
    (A schema default the exporter wrote is kept: count_include_pad=0 is one, and a trigger.)"""
    value = helper.get_attribute_value(attribute)
    return attribute.name in NEUTRAL and isinstance(value, list) and all(v == NEUTRAL[attribute.name] for v in value)


def node_text(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """'Clip(min=-0.5, max not given) in float16'."""
    parts = [f"{a.name}={_value(helper.get_attribute_value(a))}" for a in node.attribute if not _neutral(a)]
    found = constants(model)
    for index, name in enumerate(input_names(model, node)):
        given = node.input[index] if index < len(node.input) else ""
        if not given:
            parts.append(f"{name} not given")
        elif given in found and found[given].size <= LARGEST_SHOWN and index > 0:
            parts.append(f"{name}={_value(found[given])}")
    dtype = element_types(model).get(node.input[0]) if node.input and node.input[0] else None
    return f"{node.op_type}({', '.join(parts)})" + (f" in {dtype}" if dtype and dtype != "float32" else "")


def trigger_text(model: onnx.ModelProto, op_type: str | None, alone_passes: bool) -> str | None:
    """The failing op as it is set up; with what feeds it where the op alone passes (a fusion)."""
    node = next((n for n in model.graph.node if n.op_type == op_type), None)
    if node is None:
        return None
    text = node_text(model, node)
    if alone_passes:
        producers = {out: n for n in model.graph.node for out in n.output if n.op_type != "Constant"}
        before = [producers[name] for name in node.input if name in producers]
        if before:
            text = " + ".join(node_text(model, n) for n in before) + " → " + text
    return text
