"""What makes a fault's op fail, in words for a report's title, read from the repro's model: the
op explain found going wrong first, with its attributes, its constant inputs' values, the optional
inputs it was not given, the element type it computes in, and, where the op alone gives the right
numbers, the nodes the reduction found it needs (the layers of predecessors of the smallest
failing subgraph): `Pad(…) → AveragePool(count_include_pad=0, …)`,
`Cast(to=INT32) → Cast(to=BOOL) → Cast(to=FLOAT)`.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..sources.fault_patterns import constants, element_types, input_names, schema_default

LARGEST_SHOWN = 4  # elements of a constant input written out
# Attributes whose value here means "none of it": left out of a trigger.
NEUTRAL = {"pads": 0, "strides": 1, "dilations": 1}
TYPE_ATTRIBUTES = {"to", "dtype", "output_datatype"}  # an element type, said by its name (INT32, not 6)
LABEL = re.compile(r"^(?P<op>.+)#(?P<index>\d+)$")  # explain's label of an unnamed node: Op#position


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


def _attribute_text(attribute: onnx.AttributeProto) -> str:
    value = helper.get_attribute_value(attribute)
    if attribute.name in TYPE_ATTRIBUTES and isinstance(value, int) and value in TensorProto.DataType.values():
        return f"{attribute.name}={TensorProto.DataType.Name(value)}"
    return f"{attribute.name}={_value(value)}"


def _input_type(types: dict[str, str], node: onnx.NodeProto) -> str | None:
    """The element type the node computes in (its first input's, in `types`: element_types), where it
    is not float32; a Cast's is its producer's `to`, said already."""
    dtype = types.get(node.input[0]) if node.input and node.input[0] else None
    return None if node.op_type == "Cast" or dtype == "float32" else dtype


def node_text(model: onnx.ModelProto, node: onnx.NodeProto, found: dict[str, np.ndarray], types: dict[str, str],
              with_type: bool = True, defaults: bool = True) -> str:
    """'Clip(min=-0.5, max not given) in float16'; `found`, `types`: the model's constants and element
    types, read once for all its nodes; `defaults`: also the attributes written with their schema's
    default value (keepdims=1)."""
    parts = [_attribute_text(a) for a in node.attribute if not _neutral(a)
             and (defaults or helper.get_attribute_value(a) != schema_default(model, node, a.name))]
    for index, name in enumerate(input_names(model, node)):
        given = node.input[index] if index < len(node.input) else ""
        if not given:
            parts.append(f"{name} not given")
        elif given in found and found[given].size <= LARGEST_SHOWN and index > 0:
            parts.append(f"{name}={_value(found[given])}")
    dtype = _input_type(types, node) if with_type else None
    return node.op_type + (f"({', '.join(parts)})" if parts else "") + (f" in {dtype}" if dtype else "")


def focus_node(model: onnx.ModelProto, label: str | None, op_type: str | None) -> int | None:
    """The position of the node explain named (its name, or `Op#position` for an unnamed one);
    the first node of its op type where the model does not hold that name."""
    nodes = model.graph.node
    named = next((i for i, n in enumerate(nodes) if label and n.name == label), None)
    if named is not None:
        return named
    unnamed = LABEL.match(label or "")
    if unnamed and int(unnamed["index"]) < len(nodes) and nodes[int(unnamed["index"])].op_type == unnamed["op"]:
        return int(unnamed["index"])
    return next((i for i, n in enumerate(nodes) if n.op_type == op_type), None)


def needed_nodes(model: onnx.ModelProto, focus: int, depth: int | None) -> list[int]:
    """The focus and its predecessors up to `depth` layers (every one where None), in model order,
    constants left out (their values are said on the nodes that read them)."""
    nodes = model.graph.node
    producer = {name: i for i, n in enumerate(nodes) for name in n.output if name and n.op_type != "Constant"}
    chosen, layer, layers = {focus}, {focus}, 0
    while layer and (depth is None or layers < depth):
        layer = {producer[name] for i in layer for name in nodes[i].input if name in producer} - chosen
        chosen |= layer
        layers += 1
    return sorted(chosen)


def trigger_texts(model: onnx.ModelProto, label: str | None, op_type: str | None, depth: int | None) -> list[str]:
    """The failing op as it is set up, with the nodes the failure needs before it where the op alone
    passes (`depth`: how many layers of predecessors the smallest failing subgraph holds, 0 where
    the op fails alone, None where no smaller subgraph was found to fail). Shorter wordings follow
    for a title that must fit: the nodes before it without their schema-default attributes, then
    the op alone."""
    focus = focus_node(model, label, op_type)
    if focus is None:
        return []
    chain = [model.graph.node[i] for i in needed_nodes(model, focus, depth)]
    # Read once: a whole model's chain (no smaller subgraph failed) may be hundreds of nodes.
    found, types = constants(model), element_types(model)
    computes_in = {_input_type(types, n) for n in chain if n.op_type != "Cast"}
    once = computes_in.pop() if len(chain) > 1 and len(computes_in) == 1 else None  # one type for all: said once
    said = []
    for defaults in (True, False):
        text = " → ".join(node_text(model, n, found, types, once is None, defaults or n is chain[-1]) for n in chain)
        said.append(text + (f" in {once}" if once else ""))
    said.append(node_text(model, model.graph.node[focus], found, types))
    return list(dict.fromkeys(said))
