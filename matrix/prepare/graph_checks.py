"""Checks on a prepared ONNX graph that flag known-dangerous patterns before any engine runs.

Seed 003 (NVIDIA/TensorRT#4333): torch.onnx exports F.scaled_dot_product_attention with its
scale split in two — Q * sqrt(scale) and K^T * sqrt(scale) — instead of applying it once. TensorRT
10.7 compiled that pattern wrong (1373.39 off the explicit attention); putting the whole scale on
Q fixed it, as did TensorRT 10.8. Finding the pattern is cheap and says why a cell may fail.
"""

from __future__ import annotations

import onnx

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
    """One warning per attention-score MatMul whose Q and K inputs are both scaled."""
    graph = model.graph
    producers, consumers = _producers(graph), _consumers(graph)
    warnings = []
    for node in graph.node:
        if node.op_type != "MatMul" or not _feeds_softmax(node, consumers):
            continue
        q_scale, k_scale = (_scale_mul(name, producers) for name in node.input[:2])
        if q_scale is not None and k_scale is not None:
            warnings.append(
                f"attention scores {node.name}: the scale is split across Q ({q_scale.name}) and K "
                f"({k_scale.name}) — the SDPA export pattern of seed 003 (NVIDIA/TensorRT#4333), which "
                "TensorRT 10.7 computed wrong; workaround: apply the whole scale to Q once, or explicit attention")
    return warnings


def graph_warnings(model: onnx.ModelProto) -> list[str]:
    return split_attention_scale(model)
