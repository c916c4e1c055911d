"""Outputs float32 cannot hold: a value beyond float32's range (3.4e38) is ±inf in the model's own
type, and what follows it may be NaN (inf / inf), where float64 holds finite values. The referee's
float32 values at every node show where the model leaves its range; the model's arithmetic in its
declared type does it, not an engine, so no reference says what the float32 model means there, as
for an underflow (a value below float32's smallest normal, held as 0 or as a subnormal of few bits:
`x · 1e-30 · 1e-20 · 1e50` is 0 in float32, x in float64; issue 41, sweep 18 L2) or a step rounding
decides (rounding.py). Its mirror, a
domain's edge: `Sqrt(x * 0.1 - 0.3)` at 3 takes 0 in float32 and -7.45e-9 in float64 (NaN), so
float64 holds NaN or ±inf where float32 holds another value; which side the model means, float32's
rounding decides (issue 41, sweep 7 N14). A case file's PyTorch in float64 crosses such an edge
where its export, whose constants are float32, sits on it (issue 41, sweep 8 A15)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph_walk import Upstream, node_inputs
from .float64_graph import as_float64, evaluate_node, float64_node, float64_nodes, node_label
from .steps import OWN_ROUNDING, parted

# Where an op's domain ends, for its first input (Sqrt and Log below 0; Acos, Asin, Atanh beyond ±1).
EDGES = {"Sqrt": (0.0,), "Log": (0.0,), "Pow": (0.0,), "Acos": (-1.0, 1.0), "Asin": (-1.0, 1.0),
         "Atanh": (-1.0, 1.0), "Acosh": (1.0,)}


def _lost(float64: np.ndarray, theirs: np.ndarray) -> bool:
    """±inf or NaN in float32 where float64 is finite."""
    if theirs.dtype.kind != "f" or float64.shape != theirs.shape or np.asarray(float64).dtype.kind != "f":
        return False
    return bool(np.any(np.isfinite(float64) & ~np.isfinite(theirs)))


def _first_overflow(model: onnx.ModelProto, known: dict[str, np.ndarray], theirs: dict[str, np.ndarray],
                    among: set[int]) -> tuple[str, np.dtype] | None:
    """('Mul#1 (Mul)', float16): the first node of `among` whose referee output holds ±inf where all
    its float inputs (`known`: the inputs, weights and referee values) are finite, and that output's
    type (the one the model declares there: a FLOAT16 step of a float32 model is float16)."""
    for order in sorted(among):
        node = model.graph.node[order]
        read = [np.asarray(known[name]) for name in node_inputs(node) if name in known]
        made = [np.asarray(theirs[name]) for name in node.output if name in theirs]
        if all(np.isfinite(value).all() for value in read if value.dtype.kind == "f"):
            if (inf := next((value for value in made if value.dtype.kind == "f" and np.isinf(value).any()),
                            None)) is not None:
                return f"{node_label(node, order)} ({node.op_type})", inf.dtype
    return None


def overflowed(model: onnx.ModelProto, inputs: dict[str, np.ndarray], float64: dict[str, np.ndarray],
               theirs: dict[str, np.ndarray], names: list[str]) -> dict[str, tuple[str, np.dtype]]:
    """{output: (the node where the model's type leaves its range, that type)} for the outputs the
    referee gives as ±inf or NaN where float64 (`float64`: the reference's outputs) holds finite values."""
    lost = [name for name in names if name in float64 and name in theirs
            and _lost(np.asarray(float64[name]), np.asarray(theirs[name]))]
    if not lost:
        return {}
    upstream = Upstream(model.graph)  # once per model, as the weights below
    known = {**inputs, **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **theirs}
    found = {}
    for name in lost:
        if where := _first_overflow(model, known, theirs, upstream.of([name])):
            found[name] = where
    return found


def _flushed(float64: np.ndarray, theirs: np.ndarray) -> bool:
    """Values below the referee's type's smallest normal (1.2e-38 in float32) that it holds as 0, or
    as a subnormal off by more than rounding a normal value would make, and that are more than a
    unit of rounding of the output's largest value: one square of 448 below FP16's 6.1e-5 beside
    squares near 1 is lost in their rounding anyway (issue 41, sweep 19 M17)."""
    if theirs.dtype.kind != "f" or float64.dtype.kind != "f" or float64.shape != theirs.shape:
        return False
    kind = np.finfo(theirs.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.abs(float64[np.isfinite(float64)])
        small = np.isfinite(float64) & (float64 != 0) & (np.abs(float64) < kind.tiny) \
            & (np.abs(float64) > float(kind.eps) * float(finite.max(initial=0.0)))
        return bool(np.any(small & (np.abs(float64 - theirs) > OWN_ROUNDING * np.abs(float64))))


def _first_underflow(model: onnx.ModelProto, known: dict[str, np.ndarray], theirs: dict[str, np.ndarray],
                     among: set[int]) -> tuple[str, np.dtype] | None:
    """('Mul#1 (Mul)', float32): the first node of `among` whose float64 evaluation on the referee's
    own inputs to it the referee's output flushes (_flushed), and that output's type."""
    for order in sorted(among):
        node = model.graph.node[order]
        if any(name not in known for name in node_inputs(node)):
            continue
        try:
            with np.errstate(all="ignore"):
                mine = evaluate_node(float64_node(node), {name: as_float64(np.asarray(known[name]))
                                                          for name in node_inputs(node)}, model)
        except Exception:  # noqa: BLE001 - no float64 evaluation of this node: the next one may tell
            continue
        for name in node.output:
            if name in theirs and name in mine and _flushed(np.asarray(mine[name]), np.asarray(theirs[name])):
                return f"{node_label(node, order)} ({node.op_type})", np.asarray(theirs[name]).dtype
    return None


def underflowed(model: onnx.ModelProto, inputs: dict[str, np.ndarray], float64: dict[str, np.ndarray],
                theirs: dict[str, np.ndarray], names: list[str]) -> dict[str, tuple[str, np.dtype]]:
    """{output: (the node where the model's type flushes a value float64 holds, that type)} for the
    outputs the referee and float64 (`float64`: the reference's outputs) part beyond rounding at, though
    no node parts (a value of 1e-50 is 0 in float32, and 1e-50 from rounding's bound there)."""
    apart = [name for name in names if name in float64 and name in theirs and np.asarray(theirs[name]).dtype.kind == "f"
             and np.shape(float64[name]) == np.shape(theirs[name])
             and parted(np.asarray(float64[name], np.float64), np.asarray(theirs[name]))]
    if not apart:
        return {}
    upstream = Upstream(model.graph)
    known = {**inputs, **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **theirs}
    return {name: where for name in apart if (where := _first_underflow(model, known, theirs, upstream.of([name])))}


def _off_the_edge(float64: np.ndarray, theirs: np.ndarray) -> bool:
    """NaN or ±inf in float64 where float32 holds another value (Sqrt: 0 for NaN; Log: -inf for NaN)."""
    if theirs.dtype.kind != "f" or float64.shape != theirs.shape or np.asarray(float64).dtype.kind != "f":
        return False
    with np.errstate(invalid="ignore"):
        same = (float64 == theirs) | (np.isnan(float64) & np.isnan(theirs))
    return bool(np.any(~np.isfinite(float64) & ~same))


def _edges(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[int, str]:
    """{order: 'Sqrt#2 (Sqrt)'} of the nodes whose float64 output holds NaN or ±inf where all their
    float64 float inputs are finite, in one float64 pass over the model."""
    return {order: f"{node_label(node, order)} ({node.op_type})"
            for order, node, given, produced in float64_nodes(model, inputs)
            if not isinstance(produced, str)
            and all(np.isfinite(value).all() for value in given.values() if value.dtype.kind == "f")
            and any(value.dtype.kind == "f" and not np.isfinite(value).all() for value in produced.values())}


def crossed_an_edge(model: onnx.ModelProto, inputs: dict[str, np.ndarray], float64: dict[str, np.ndarray],
                    theirs: dict[str, np.ndarray], names: list[str]) -> dict[str, str]:
    """{output: the node where float64 leaves its domain} for the outputs float64 (`float64`: the
    reference's outputs) holds as NaN or ±inf where the referee's float32 holds other values, after
    the two agreed at every node: float32's rounding put the node's input on the edge's other side."""
    off = [name for name in names if name in float64 and name in theirs
           and _off_the_edge(np.asarray(float64[name]), np.asarray(theirs[name]))]
    if not off:
        return {}
    upstream, edges = Upstream(model.graph), _edges(model, inputs)
    found = {}
    for name in off:
        if among := upstream.of([name]) & edges.keys():
            found[name] = edges[min(among)]
    return found


def on_an_edge(model: onnx.ModelProto, inputs: dict[str, np.ndarray], name: str) -> str | None:
    """'Sqrt#2 (Sqrt)': the first node `name` is computed from whose float64 output leaves its domain
    from finite inputs, or whose first input float64 holds on its domain's edge (EDGES): where another
    evaluation of the same function (PyTorch's, its constants doubles) may cross it, or not."""
    among = Upstream(model.graph).of([name])
    for order, node, given, produced in float64_nodes(model, inputs):
        if order > max(among, default=-1):
            break
        if order not in among or isinstance(produced, str) or \
                not all(np.isfinite(value).all() for value in given.values() if value.dtype.kind == "f"):
            continue
        crossed = any(value.dtype.kind == "f" and not np.isfinite(value).all() for value in produced.values())
        first = given.get(node.input[0]) if node.input else None
        if crossed or node.op_type in EDGES and first is not None and np.isin(first, EDGES[node.op_type]).any():
            return f"{node_label(node, order)} ({node.op_type})"
    return None
