"""Pattern → exact node names on the host, with the worker's own matching rule (one rule)."""

from __future__ import annotations

import onnx

from ..worker.layer_select import NoMatch, select_names

__all__ = ["NoMatch", "named", "resolve_nodes", "node_types"]


def named(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each unnamed node of its main graph named as trtmatrix labels it ('Less#0': its
    op type and order): keep_fp32 selects nodes by name for the FP16 converter, and every unnamed node
    shared the name '' (issue 41, sweep 18 L22: keeping Mul kept an unnamed Less too, and Less
    matched nothing)."""
    taken = {node.name for node in model.graph.node}
    for order, node in enumerate(model.graph.node):
        if not node.name and f"{node.op_type}#{order}" not in taken:
            node.name = f"{node.op_type}#{order}"
    return model


def node_types(model: onnx.ModelProto) -> dict[str, str]:
    return {node.name: node.op_type for node in model.graph.node}


def input_types(model: onnx.ModelProto) -> dict[str, list[str]]:
    """{op type: element types of its nodes' inputs ('int8', 'float16')}, after shape inference
    where the model allows it (the declared types where it does not)."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an engine may run a model onnx cannot infer: its declared types still say something
        pass
    graph = model.graph
    known = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    known.update({t.name: t.data_type for t in graph.initializer})
    types: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
            if known.get(name):
                kind = onnx.helper.tensor_dtype_to_string(known[name]).removeprefix("TensorProto.").lower()
                if kind not in types.setdefault(node.op_type, []):
                    types[node.op_type].append(kind)
    return types


def resolve_nodes(model: onnx.ModelProto, patterns: tuple[str, ...] | list[str]) -> list[str]:
    """Exact names of the main graph's nodes `patterns` select. A node inside an If/Loop/Scan body
    cannot be kept alone (the FP16 copy keeps main-graph nodes); a pattern that matches only such
    nodes says so and names the nodes that hold them, which can be kept."""
    try:
        return select_names(list(node_types(model).items()), patterns)
    except NoMatch as exc:
        for pattern in patterns:
            holders = [f"{node.op_type} {node.name!r}" if node.name else node.op_type
                       for node in model.graph.node if _inside(node, pattern)]
            if holders and not _matching(model.graph.node, pattern):
                raise NoMatch(f"{exc}: it matches only nodes inside If/Loop/Scan bodies, which cannot be kept in FP32 "
                              f"on their own; keep the node that holds them instead ({', '.join(holders[:3])})") from None
        raise


def _matching(nodes, pattern: str) -> list[str]:
    try:
        return select_names([(node.name, node.op_type) for node in nodes], [pattern])
    except NoMatch:
        return []


def _inside(node: onnx.NodeProto, pattern: str) -> bool:
    """Whether a node of `node`'s subgraphs, at any depth, matches `pattern` (op type or name glob)."""
    return any(_matching(graph.node, pattern) or any(_inside(n, pattern) for n in graph.node)
               for a in node.attribute for graph in ([a.g] if a.HasField("g") else list(a.graphs)))
