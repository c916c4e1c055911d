"""Pattern → exact node names on the host, with the worker's own matching rule (one rule)."""

from __future__ import annotations

import onnx

from ..worker.layer_select import NoMatch, select_names

__all__ = ["NoMatch", "resolve_nodes", "node_types"]


def node_types(model: onnx.ModelProto) -> dict[str, str]:
    return {node.name: node.op_type for node in model.graph.node}


def resolve_nodes(model: onnx.ModelProto, patterns: tuple[str, ...] | list[str]) -> list[str]:
    return select_names(list(node_types(model).items()), patterns)
