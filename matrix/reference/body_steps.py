"""Steps inside a node's subgraph: the branch an If takes, each iteration of a Loop's or a Scan's body.

The float64 pass holds an If, a Loop or a Scan as one node, and the check (agreement.py) holds it
against the referee as one node too: a Floor(x / 0.1f) inside flips as it does outside (6 in float64,
7 in float32), but the node's bound counts how far its output moves when its inputs move by a unit
of rounding, and a flip is such a move, so a right engine failed against float64 (issue 41, sweep 15
H6; sweep 17 K3, K10, K12). Here the subgraph is evaluated node by node as a model of its own (what it
reads from outside declared in the types the model declares), each iteration on the values the last
one gave, so that a step in it is found as one outside is, nested subgraphs too.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from .steps import STEP_OPS

# What a subgraph must hold for a step in it to be looked for: ops that may flip (steps.py), or hold
# a subgraph that may.
MAY_STEP = {"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal", "Cast", "ArgMax", "ArgMin", "NonZero", "IsInf",
            "IsNaN", "QuantizeLinear", "TopK", "If", "Loop", "Scan", *STEP_OPS}
# Iterations traced at most: each is a node-by-node pass of the body (a flip past it is not looked for).
ITERATIONS = 1000

Evaluate = Callable[..., object]  # float64_graph.float64_values(model, inputs, keep=False)


def _graph(node: onnx.NodeProto, name: str) -> onnx.GraphProto | None:
    return next((a.g for a in node.attribute if a.name == name), None)


def _may_step(graph: onnx.GraphProto | None) -> bool:
    return graph is not None and any(inner.op_type in MAY_STEP for inner in graph.node)


def holds_a_step(node: onnx.NodeProto) -> bool:
    """Whether an If, a Loop or a Scan holds an op that may flip: where none flips on its float64
    inputs, one may still on what float32 rounded before it (`Sign(v)` in a body, v = (1 + 2**-26) - 1
    outside: issue 41, sweep 19 M13), which the referee's outputs of the node tell (rounding.py)."""
    return node.op_type in INSIDE and any(_may_step(a.g) for a in node.attribute if a.HasField("g"))


def _alone(graph: onnx.GraphProto, formal: dict[str, np.ndarray], outer: dict[str, np.ndarray],
           model: onnx.ModelProto, types: dict[str, np.dtype]) -> onnx.ModelProto:
    """The subgraph as a model of its own: its own inputs (fed `formal`) and what it reads from
    outside (`outer`) declared in the types the model declares for them (float32 where it holds them
    so), strings as strings."""
    def declared(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
        kind = TensorProto.STRING if value.dtype.kind in "USO" else \
            helper.np_dtype_to_tensor_dtype(np.dtype(types.get(name, value.dtype)))
        return helper.make_tensor_value_info(name, kind, None)
    own = {i.name: i for i in graph.input}
    inputs = [own[name] if own[name].type.tensor_type.elem_type else declared(name, value)
              for name, value in formal.items()] + [declared(name, value) for name, value in outer.items()]
    return helper.make_model(helper.make_graph(list(graph.node), graph.name or "body", inputs, list(graph.output),
                                               list(graph.initializer)),
                             opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _outer(graph: onnx.GraphProto, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the subgraph may read from outside: every value the node is given (its own inputs too: a
    Loop's body may read its condition by name), but those its own inputs hide."""
    formal = {i.name for i in graph.input}
    return {name: value for name, value in given.items() if name not in formal and isinstance(value, np.ndarray)}


def _first(decided: dict[str, str], graph: onnx.GraphProto) -> str | None:
    """The step deciding the subgraph's first decided output, in the order it lists them."""
    return next((decided[out.name] for out in graph.output if out.name in decided), None)


def _in_branch(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto,
               types: dict[str, np.dtype], label: str, evaluate: Evaluate) -> dict[str, str]:
    cond = given.get(node.input[0]) if node.input else None
    if not isinstance(cond, np.ndarray) or cond.size != 1:
        return {}
    name = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    branch = _graph(node, name)
    if not _may_step(branch):
        return {}
    outer = _outer(branch, given)
    traced = evaluate(_alone(branch, {}, outer, model, types), outer, keep=False)
    return {node.output[i]: f"{traced.decided[out.name]} in the {name} of {label}" for i, out in enumerate(branch.output)
            if out.name in traced.decided and i < len(node.output)}


def _in_loop(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto,
             types: dict[str, np.dtype], label: str, evaluate: Evaluate) -> dict[str, str]:
    """A Loop: its body run as the spec says (while the trip count lasts and the condition holds, the
    condition and the carried values each iteration's outputs), traced until a step in it flips."""
    body = _graph(node, "body")
    if not _may_step(body) or len(body.input) < 2:
        return {}
    trip, cond = (given.get(name) if name else None for name in [*node.input, "", ""][:2])
    carried = [given[name] for name in node.input[2:]]
    formal, outer = [i.name for i in body.input], _outer(body, given)
    alone = None
    for iteration in range(ITERATIONS if trip is None else min(int(np.asarray(trip).reshape(-1)[0]), ITERATIONS)):
        if cond is not None and not bool(np.asarray(cond).reshape(-1)[0]):
            break
        feeds = dict(zip(formal, [np.array(iteration, np.int64), np.array(True if cond is None else bool(
            np.asarray(cond).reshape(-1)[0])), *carried]))
        alone = alone or _alone(body, feeds, outer, model, types)
        traced = evaluate(alone, {**feeds, **outer}, keep=False)
        if step := _first(traced.decided, body):
            return dict.fromkeys(node.output, f"{step} in the body of {label} (its iteration {iteration + 1})")
        given_back = [traced.values.get(out.name) for out in body.output[:1 + len(carried)]]
        if any(value is None for value in given_back):
            return {}
        cond, carried = (None if cond is None else given_back[0]), given_back[1:]  # no condition given: a for loop
    return {}


def _in_scan(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto,
             types: dict[str, np.dtype], label: str, evaluate: Evaluate) -> dict[str, str]:
    """A Scan (opset 9 on: no batch axis): its body run on each slice of the scanned inputs, in their
    directions, the state carried, traced until a step in it flips."""
    body = _graph(node, "body")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if not _may_step(body) or opset < 9:
        return {}
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    count = attributes["num_scan_inputs"]
    states, scanned = [given[n] for n in node.input[:len(node.input) - count]], [given[n] for n in node.input[-count:]]
    axes = list(attributes.get("scan_input_axes") or [0] * count)
    backwards = list(attributes.get("scan_input_directions") or [0] * count)
    length = scanned[0].shape[axes[0]] if scanned else 0
    formal, outer = [i.name for i in body.input], _outer(body, given)
    alone = None
    for iteration in range(min(length, ITERATIONS)):
        slices = [np.take(value, length - 1 - iteration if back else iteration, axis=axis)
                  for value, axis, back in zip(scanned, axes, backwards)]
        feeds = dict(zip(formal, [*states, *slices]))
        alone = alone or _alone(body, feeds, outer, model, types)
        traced = evaluate(alone, {**feeds, **outer}, keep=False)
        if step := _first(traced.decided, body):
            return dict.fromkeys(node.output, f"{step} in the body of {label} (its iteration {iteration + 1})")
        states = [traced.values.get(out.name) for out in body.output[:len(states)]]
        if any(value is None for value in states):
            return {}
    return {}


INSIDE = {"If": _in_branch, "Loop": _in_loop, "Scan": _in_scan}


def decided_inside(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto,
                   types: dict[str, np.dtype], label: str, evaluate: Evaluate) -> dict[str, str]:
    """{output of an If, a Loop or a Scan: the step inside it that float32 rounding decides, 'Floor#0
    (Floor) in the body of Loop#2 (its iteration 1)'}, or {} (no step flips, or the subgraph cannot
    stand alone: the node stays one, as before)."""
    try:
        return INSIDE[node.op_type](node, given, model, types, label, evaluate) if node.op_type in INSIDE else {}
    except Exception:  # noqa: BLE001 - a subgraph that cannot stand alone or be run so
        return {}
