"""What a known fault is, as a pattern of the model an engine ran: an op, the attribute values and
absent inputs that trigger it, the element type it computes in, the op feeding it (a fusion), the
graph optimisation level. A registry entry with a pattern matches any model that holds it — a
user's own ONNX file as much as the case the repository keeps for it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import onnx
from onnx import helper, numpy_helper
from packaging.specifiers import SpecifierSet
from pydantic import Field, model_validator

from ..config import Items, KeyedError, Strict
from .fault_schema import fault_problem

AttributeValue = int | float | str | list[int] | list[float]


def element_types(model: onnx.ModelProto) -> dict[str, str]:
    """{tensor name: numpy dtype name} as shape inference finds them (empty where it cannot follow)."""
    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - a model shape inference cannot follow: no types known
        return {}
    infos = [*graph.input, *graph.value_info, *graph.output]
    return {i.name: helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name
            for i in infos if i.type.HasField("tensor_type") and i.type.tensor_type.elem_type}


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """{name: value} of the initializers and the `Constant` nodes' tensors."""
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def opset_of(model: onnx.ModelProto, domain: str) -> int:
    return next((o.version for o in model.opset_import if (o.domain or "") == domain), 1)


def attribute_value(model: onnx.ModelProto, node: onnx.NodeProto, name: str):
    """The node's value of an attribute, or its schema's default where the node does not set it;
    text as str (onnx gives bytes, which no registry's "constant" would ever equal)."""
    given = next((a for a in node.attribute if a.name == name), None)
    value = helper.get_attribute_value(given) if given is not None else schema_default(model, node, name)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def schema_default(model: onnx.ModelProto, node: onnx.NodeProto, name: str):
    """The default the op's schema gives an attribute (None where it gives none)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset_of(model, node.domain), node.domain)
    except onnx.defs.SchemaError:
        return None
    default = schema.attributes.get(name)
    if default is None or not default.default_value.name:
        return None
    return helper.get_attribute_value(default.default_value)


def input_names(model: onnx.ModelProto, node: onnx.NodeProto) -> list[str]:
    """The schema's names of the node's inputs, in order (Clip: input, min, max)."""
    try:
        return [i.name for i in onnx.defs.get_schema(node.op_type, opset_of(model, node.domain), node.domain).inputs]
    except onnx.defs.SchemaError:
        return []


def producer_of(name: str, producers: dict[str, onnx.NodeProto]) -> onnx.NodeProto | None:
    """The node that makes `name`, through the Identity nodes exporters leave between two ops: an engine
    removes them before it fuses (issue 41, sweep 16 J24: Pad → Identity → MaxPool was no pattern)."""
    node = producers.get(name)
    while node is not None and node.op_type == "Identity" and node.input:
        node = producers.get(node.input[0])
    return node


class FaultPattern(Strict):
    op: str = Field(min_length=1)  # the op type that computes wrong
    domain: str = ""
    opset: str | None = None  # PEP 440 specifier on the model's opset of that domain (">=19")
    attributes: dict[str, AttributeValue] = {}  # values the node has (set, or its schema's default)
    nonzero: Items[str] = ()  # attributes given with a value other than zeros (pads)
    absent: Items[str] = ()  # optional inputs of which at least one is not given (Clip: min, max)
    dtype: str | None = None  # the element type of its first input ("float16")
    after: str | None = None  # the op type producing its first input: a fusion of the two ("Pad")
    optimization: Literal["on", "off"] | None = None  # graph optimisations the cell runs with ("on": a fusion)

    @model_validator(mode="after")
    def _can_match(self) -> FaultPattern:
        """A pattern no model can hold (fault_schema) is refused where the registry is read."""
        if problem := fault_problem(self):
            raise KeyedError(*problem)
        return self

    def found_in(self, model: onnx.ModelProto, optimization: str) -> bool:
        if self.optimization is not None and self.optimization != optimization:
            return False
        return bool(self.nodes_in(model))

    def nodes_in(self, model: onnx.ModelProto) -> list[onnx.NodeProto]:
        """The model's nodes that hold the pattern (whatever the optimisation level)."""
        if self.opset and str(opset_of(model, self.domain)) not in SpecifierSet(self.opset):  # a version string, not an int
            return []
        nodes = [n for n in model.graph.node if n.op_type == self.op and (n.domain or "") == self.domain]
        if not nodes:
            return []
        producers = {out: n for n in model.graph.node for out in n.output}
        types = element_types(model) if self.dtype else {}
        return [node for node in nodes if self._node_matches(model, node, producers, types)]

    def _node_matches(self, model: onnx.ModelProto, node: onnx.NodeProto, producers: dict, types: dict) -> bool:
        for name, value in self.attributes.items():
            if attribute_value(model, node, name) != value:
                return False
        for name in self.nonzero:
            value = attribute_value(model, node, name)
            if not value or not any(value if isinstance(value, list) else [value]):
                return False
        if self.absent:
            names = input_names(model, node)
            given = {name for index, name in enumerate(names) if index < len(node.input) and node.input[index]}
            if all(name in given for name in self.absent):
                return False
        first = node.input[0] if node.input else ""
        if self.dtype and types.get(first) != self.dtype:
            return False
        return self.after is None or getattr(producer_of(first, producers), "op_type", None) == self.after

    def describe(self) -> str:
        """'Clip in float16 with min or max not given', for the registry's page and checks."""
        said = [f"{k}={v}" for k, v in self.attributes.items()] + [f"{k} nonzero" for k in self.nonzero]
        text = f"{self.op}({', '.join(said)})" + (f" in {self.dtype}" if self.dtype else "")
        if self.absent:
            text += f" with {' or '.join(self.absent)} not given"
        if self.after:
            text = f"{self.after} → {text}"
        if self.opset:
            text += f", opset {self.opset}"
        if self.optimization:
            text += f", graph optimisations {self.optimization}"
        return text
