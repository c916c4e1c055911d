"""What the nodes of an ONNX graph read, and what each value is computed from: the walk the float64
reference, the overflow search and the known-issue registry's reach share. Below every layer that
reads graphs (sources, reference, prepare), so each imports the one walk."""

from __future__ import annotations

from typing import Iterable, Iterator

import onnx

# The floating types: what the float64 evaluation widens, and the constants a known issue's reach reads.
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs a node holds (an If's branches, a Loop's or a Scan's body)."""
    return [graph for attribute in node.attribute
            for graph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs)]


def every_node(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The graph's nodes and, after each, those of its subgraphs, at any depth."""
    for node in graph.node:
        yield node
        for inner in subgraphs(node):
            yield from every_node(inner)


# Ops onnx.reference computes in Python, element by element: NonMaxSuppression holds every pair of
# boxes against each other (40,000 boxes: minutes; issue 41, sweep 11 D7), GridSample and the pooling
# of regions sample each output pixel on its own (a 192 × 192 GridSample: minutes; sweep 15 H9).
ELEMENT_BY_ELEMENT = ("NonMaxSuppression", "GridSample", "RoiAlign", "MaxRoiPool", "DeformConv", "Col2Im")


def slow_in_float64(model: onnx.ModelProto) -> str | None:
    """What makes a model's float64 evaluation (onnx.reference: numpy and Python) run far longer than
    an engine, or None: a Loop or Scan iterates as often as its inputs say; ELEMENT_BY_ELEMENT ops.
    In the model's local functions too, which the evaluation writes out as their nodes (sweep 14 G10)."""
    ops = {node.op_type for node in every_node(model.graph)} | {
        inner.op_type for function in model.functions for node in function.node for inner in [node, *_nested(node)]}
    if ops & {"Loop", "Scan"}:
        return "a Loop or Scan"
    return next((f"a {op}" for op in ELEMENT_BY_ELEMENT if op in ops), None)


def _nested(node: onnx.NodeProto) -> Iterator[onnx.NodeProto]:
    for graph in subgraphs(node):
        yield from every_node(graph)


def outer_reads(node: onnx.NodeProto) -> list[str]:
    """The names a node's subgraphs (If, Loop, Scan bodies, at any depth) read from the scopes
    around it: inputs it has that its `input` list does not show."""
    found: list[str] = []

    def walk(graph: onnx.GraphProto, defined: set[str]) -> None:
        defined = defined | {v.name for v in graph.input} | {t.name for t in graph.initializer}
        for inner in graph.node:
            for name in inner.input:
                if name and name not in defined and name not in found:
                    found.append(name)
            for sub in subgraphs(inner):
                walk(sub, defined)
            defined = defined | set(inner.output)

    for graph in subgraphs(node):
        walk(graph, set())
    return found


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Every value a node reads: its inputs, then what its subgraphs read from outside."""
    return [name for name in dict.fromkeys([*node.input, *outer_reads(node)]) if name]


class Upstream:
    """The nodes each value of a graph is computed from, at any distance, found in one pass over the
    nodes (a graph lists them in topological order): a node's own output comes from the node and from
    all that made what it reads. Each set is an int whose bit k stands for node k, so a graph of n
    nodes holds n² bits, not n² set entries, and a union is one `|`."""

    def __init__(self, graph: onnx.GraphProto):
        self._bits: dict[str, int] = {}
        for order, node in enumerate(graph.node):
            bits = 1 << order
            for name in node_inputs(node):
                bits |= self._bits.get(name, 0)
            self._bits.update(dict.fromkeys([name for name in node.output if name], bits))

    def of(self, names: Iterable[str]) -> set[int]:
        """The orders of the nodes any of `names` is computed from (none for a graph input or weight)."""
        bits = 0
        for name in names:
            bits |= self._bits.get(name, 0)
        return {order for order, bit in enumerate(reversed(bin(bits))) if bit == "1"}
