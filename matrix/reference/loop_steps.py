"""Steps inside a Loop's body that the float32 state the Loop carries decides.

body_steps traces each iteration on float64 values, holding a step's inputs in float32 there: it
sees `acc < 0.3` flip where 0.1f + 0.1f + 0.1f is 0.3f, but not a step that float32's rounding
accumulated over many iterations decides (`Floor(acc / 0.1f)` after 24 additions of 0.1f is 23 in
float32 and 24 in float64: each iteration's float64 state held in float32 is still 24), nor one past
the iterations it traces (issue 41, sweep 19 M2, M4). Where the check (agreement.py) then parts at the
Loop, the Loop is evaluated again by onnx.reference with each step of its body traced (a scan output
of one row per iteration), once in float64 and once in the model's own types: where the latter
agrees with the referee, the two evaluations differ by their types alone, and the first step whose
traced values jump between them is what rounding decided (issue 41, sweep 7 N12). A Loop whose steps
cannot be traced (a step's output changes size from one iteration to the next) stays a parting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .agreement import Parting
from .float64_graph import FLOAT_TYPES, as_float64, evaluate_node, float64_node, node_inputs, node_label
from .steps import NO_STEP, STEP_OPS, is_step, jumped, parted

TRACE = "trtmatrix_trace"
INTEGRAL = {TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
            TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


@dataclass
class LoopStep:
    decided: dict[str, str]  # {graph output the Loop reaches: 'Less#1 (Less) in the body of Loop#0'}
    why: tuple[str, str]  # as reference._decided takes it: the verb and the because


def _element_types(model: onnx.ModelProto, order: int) -> dict[str, int]:
    """{value: its element type} in the main graph and the Loop's body, as shape inference gives them
    (none where it cannot)."""
    try:
        typed = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - every step candidate is traced instead
        return {}
    body = next(a.g for a in typed.node[order].attribute if a.name == "body")
    values = [*typed.input, *typed.value_info, *typed.output, *body.input, *body.value_info, *body.output]
    types = {v.name: v.type.tensor_type.elem_type for v in values if v.type.tensor_type.elem_type}
    types.update({t.name: t.data_type for t in [*typed.initializer, *body.initializer]})
    return types


def _may_step(node: onnx.NodeProto, types: dict[str, int]) -> bool:
    """A step's op, or a node that may read floats and give integers or booleans (a type not known
    counts as either)."""
    if node.op_type in NO_STEP:
        return False
    return node.op_type in STEP_OPS or any(types.get(name, INTEGRAL) in INTEGRAL for name in node.output if name) \
        and any(types.get(name, TensorProto.FLOAT) in FLOAT_TYPES for name in node.input if name)


def _traced(loop: onnx.NodeProto, types: dict[str, int]) -> tuple[onnx.NodeProto, dict[str, tuple[int, onnx.NodeProto]]]:
    """A copy of the Loop whose body also gives each output of its possible steps, flattened to a row
    per iteration, as a scan output; {that output's name: (its node's order in the body, the node)}."""
    loop = onnx.NodeProto.FromString(loop.SerializeToString())
    body = next(a.g for a in loop.attribute if a.name == "body")
    shape = f"{TRACE}_shape"
    body.initializer.append(numpy_helper.from_array(np.array([1, -1], np.int64), shape))
    traced = {}
    for order, inner in enumerate(list(body.node)):
        for name in (inner.output if _may_step(inner, types) else []):
            row = f"{TRACE}_{len(traced)}"
            body.node.append(helper.make_node("Reshape", [name, shape], [row]))
            body.output.append(helper.make_value_info(row, onnx.TypeProto()))
            loop.output.append(row)
            traced[row] = (order, inner)
    return loop, traced


def _reached(model: onnx.ModelProto, order: int) -> list[str]:
    """The graph outputs that the outputs of node `order` reach."""
    reached = set(model.graph.node[order].output)
    for node in model.graph.node[order + 1:]:
        if reached.intersection(node_inputs(node)):
            reached.update(node.output)
    return [o.name for o in model.graph.output if o.name in reached]


def step_in_loop(model: onnx.ModelProto, inputs: dict[str, np.ndarray], theirs: dict[str, np.ndarray],
                 parting: Parting) -> LoopStep | None:
    """Where the check parted at an If, a Loop or a Scan: the step in a Loop's body that float32
    rounding decides, or, where the node computed in the model's own types gives what the referee
    gives, that own float32 arithmetic (a sum over 800 iterations, a cancellation or an underflow
    in a body: issue 41, sweep 19 M1, M15; sweep 20 N3, N8); None where it does not (a misread node)."""
    if parting.op_type not in ("If", "Loop", "Scan"):
        return None
    order = next(order for order, node in enumerate(model.graph.node) if node_label(node, order) == parting.node)
    node = model.graph.node[order]
    loop, traced = _traced(node, _element_types(model, order)) if node.op_type == "Loop" else (node, {})
    known = {**inputs, **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **theirs}
    own = {name: np.asarray(known[name]) for name in node_inputs(node)}
    try:
        wide = evaluate_node(float64_node(loop), {name: as_float64(value) for name, value in own.items()}, model)
        narrow = evaluate_node(loop, own, model)
    except Exception:  # noqa: BLE001 - a trace that changes size per iteration: the parting stands
        return None
    if any(name in theirs and parted(narrow[name], np.asarray(theirs[name])) for name in node.output):
        return None  # onnx.reference in the model's own types is not the referee: no rounding explains it
    flips = [(iteration, body_order, inner) for row, (body_order, inner) in traced.items()
             if is_step(inner, {row: narrow[row]})
             for iteration in range(min(len(wide[row]), len(narrow[row])))
             if jumped(inner, wide[row][iteration], narrow[row][iteration])]
    if not flips:
        return LoopStep(dict.fromkeys(_reached(model, order), f"{parting.node} ({node.op_type})"), OWN_ARITHMETIC)
    iteration, body_order, inner = min(flips, key=lambda flip: flip[:2])
    row = next(iter(traced))  # one row per iteration: how many times each evaluation ran the body
    label = f"{node_label(inner, body_order)} ({inner.op_type}) in the body of {parting.node} (its iteration {iteration + 1})"
    times = f"; the Loop runs {len(narrow[row])} times in float32, {len(wide[row])} in float64" \
        if len(narrow[row]) != len(wide[row]) else ""
    because = (f"a step whose inputs are other values in the Loop's float32 evaluation than in float64 (its float32 "
               f"state carried from iteration to iteration, or an iteration past those traced one by one){times}, so no "
               "reference says which the model means")
    return LoopStep(dict.fromkeys(_reached(model, order), label), ("is decided by rounding", because))


OWN_ARITHMETIC = ("is its own float32 arithmetic", "the node computed in the model's own types gives what the referee "
                  "gives and float64 does not (a sum rounding over its iterations, a cancellation, a value flushed to "
                  "0 or past float32's range in its body), so float64 is one reading of the model and float32 another")
