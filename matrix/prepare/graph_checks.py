"""Checks on a prepared ONNX graph that flag known-dangerous patterns before any engine runs.

Seed 003 (NVIDIA/TensorRT#4333): torch.onnx exports F.scaled_dot_product_attention with its
scale split in two — Q * sqrt(scale) and K^T * sqrt(scale) — instead of applying it once. TensorRT
10.7 compiled that pattern wrong (1373.39 off the explicit attention); putting the whole scale on
Q fixed it, as did TensorRT 10.8. Finding the pattern is cheap and says why a cell may fail.
"""

from __future__ import annotations

import onnx
from packaging.specifiers import SpecifierSet

# Ops allowed between a scale Mul and the scores MatMul, and between the MatMul and its Softmax.
PASS_THROUGH = {"Transpose", "Reshape", "Cast"}
BEFORE_SOFTMAX = {"Add", "Where", "Cast", "Reshape"}


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output}


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _scale_mul(name: str, producers: dict) -> onnx.NodeProto | None:
    node = producers.get(name)
    while node is not None and node.op_type in PASS_THROUGH:
        node = producers.get(node.input[0])
    return node if node is not None and node.op_type == "Mul" else None


def _feeds_softmax(node: onnx.NodeProto, consumers: dict) -> bool:
    frontier = [node]
    for _ in range(3):
        frontier = [c for n in frontier for out in n.output for c in consumers.get(out, [])]
        if any(c.op_type == "Softmax" for c in frontier):
            return True
        frontier = [c for c in frontier if c.op_type in BEFORE_SOFTMAX]
    return False


def split_attention_scale(model: onnx.ModelProto) -> list[str]:
    """The attention-score MatMuls whose Q and K inputs are both scaled, with their two scales."""
    graph = model.graph
    producers, consumers = _producers(graph), _consumers(graph)
    found = []
    for node in graph.node:
        if node.op_type != "MatMul" or not _feeds_softmax(node, consumers):
            continue
        q_scale, k_scale = (_scale_mul(name, producers) for name in node.input[:2])
        if q_scale is not None and k_scale is not None:
            found.append(f"{node.name} ({q_scale.name} on Q, {k_scale.name} on K)")
    return found


def graph_warnings(model: onnx.ModelProto) -> list[dict]:
    """One sentence per pattern found, with the engine versions it matters to (the cells of
    those columns carry it; the report says it once per case)."""
    split = split_attention_scale(model)
    if not split:
        return []
    where = split[0] + (f" and {len(split) - 1} more" if len(split) > 1 else "")
    return [{"text": f"The attention scale is split across Q and K at {where}: the SDPA export that TensorRT 10.7 "
                     "computed wrong (NVIDIA/TensorRT#4333, fixed in 10.8; put the whole scale on Q, or use explicit "
                     "attention).", "engine": "tensorrt", "versions": ">=10.7,<10.8"}]


def applies(warning: dict, engine: str, version: str | None) -> bool:
    """Whether a graph warning concerns an environment of this engine and version."""
    return engine == warning["engine"] and version is not None and \
        SpecifierSet(warning["versions"]).contains(version, prereleases=True)
