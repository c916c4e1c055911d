"""Where two evaluations of one model part: node by node, within what rounding explains.

Each node is evaluated in float64 on the referee's own inputs to it (its float32 values, exact in
float64) and held against the referee's output of that node. Fed the same numbers, the two differ
only by the referee's rounding inside that one node, which the values themselves bound: a few units
of its type's precision times the output's magnitude, plus, where the op sums terms, the magnitude of
those terms (the node evaluated on |inputs|) times √(their count), plus how far the output moves
when the inputs move by one unit of rounding (the node's own conditioning: a subtraction that
cancels, a normalisation by a small deviation), plus, for a normalisation, what a variance taken in
one pass loses (_one_pass_variance); a node that holds a subgraph (If, Loop, Scan) rounds
once for each node it holds. A difference beyond that is no rounding: one of the two evaluations
misreads the node. No constant depends on the model.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from ..graph_walk import every_node, node_inputs, subgraphs
from .float64_graph import as_float64, casts_to_string, evaluate_node, float64_node, node_label
from .ops import ignored_by_onnx_reference
from .steps import HOLDING, parted

# A few units of rounding: an op's kernel (exp, erf, tanh) may be off by more than half a unit.
UNITS = 8.0
# Ops that add up many terms: their rounding grows with the terms' magnitude, not the result's.
SUMMING = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2",
           "ReduceSumSquare", "ReduceLogSumExp", "GlobalAveragePool", "AveragePool", "CumSum", "Softmax",
           "LogSoftmax", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
           "LpNormalization", "LRN", "BatchNormalization", "SimplifiedLayerNormalization",
           "SkipLayerNormalization", "Attention", "MultiHeadAttention", "DFT", "STFT"}
# Ops of values within ±1 whose kernels approximate: their error is a few units of that range, not of
# each value. onnxruntime's Sigmoid is 1.5e-7 off at most but 5× off relative at x = -16, so a lone
# small probability would part by its own size (issue 41, sweep 12 E4: silero VAD on quiet audio).
WITHIN_ONE = {"Sigmoid", "Tanh", "Erf", "Softsign", "Softplus"}
# Ops whose kernels compute exp(x) - 1 or 1 + erf(x) without expm1: near 0 (or far below it) their error
# is a few units of the range they subtract from, alpha (Selu: alpha · gamma), or of |x| (Gelu, Mish),
# not of the small result (issue 41, sweep 15 H1: Elu of 1e-5 is 2,300 units of itself off in onnxruntime).
ALPHA_SCALED = {"Elu": (1.0, None), "Celu": (1.0, None), "Selu": (1.67326319217681884765625, 1.05070102214813232421875)}
INPUT_SCALED = {"Gelu", "FastGelu", "BiasGelu", "Mish"}


@dataclass
class Parting:
    """The first node whose two evaluations differ beyond rounding."""
    node: str
    op_type: str
    output: str
    delta: float  # the largest |float64 − referee| there (inf: shapes or NaN places differ)
    bound: float  # what rounding explains there
    detail: str = ""
    known: str = ""  # what onnx.reference is known to leave out of this node (ops.ignored_by_onnx_reference)

    def text(self, referee: str) -> str:
        seen = self.detail or f"|Δ| {self.delta:.3g} where rounding explains {self.bound:.2g}"
        where = f"node {self.node} ({self.op_type}), output {self.output!r}" if self.op_type else f"output {self.output!r}"
        return f"{where}: onnx.reference in float64 and {referee} part ({seen})" + (f"; {self.known}" if self.known else "")

    def as_dict(self) -> dict:
        return asdict(self)


# Normalisations whose kernels may take the variance in one pass, E[x²] − E[x]² (onnxruntime's
# LayerNormalization, the GroupNormalization function body): in float32 it loses eps · E[x²] / Var of
# the variance, 14 % on values near 100 of spread 0.09 (issue 41, sweep 13 F5), and y moves by half that.
def _groups(node: onnx.NodeProto, x: np.ndarray) -> np.ndarray | None:
    """The normalisation's groups of x as rows (each normalised on its own), or None."""
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in ("LayerNormalization", "SkipLayerNormalization"):
        return x.reshape(int(np.prod(x.shape[:attributes.get("axis", -1) % x.ndim])), -1)
    if node.op_type == "GroupNormalization" and x.ndim >= 2:
        return x.reshape(x.shape[0] * attributes["num_groups"], -1)
    if node.op_type == "InstanceNormalization" and x.ndim >= 2:
        return x.reshape(x.shape[0] * x.shape[1], -1)
    if node.op_type == "MeanVarianceNormalization":
        axes = [a % x.ndim for a in attributes.get("axes", [0, 2, 3])]
        kept = [a for a in range(x.ndim) if a not in axes]
        return np.transpose(x, kept + axes).reshape(int(np.prod([x.shape[a] for a in kept])), -1)
    return None


def _normalised_rows(node: onnx.NodeProto, given: dict[str, np.ndarray]) -> np.ndarray | None:
    """The groups a normalisation's float input is normalised in, as rows, or None."""
    x = given.get(node.input[0]) if node.input else None
    if x is None or x.dtype.kind != "f" or not x.size:
        return None
    try:
        return _groups(node, x)
    except (ValueError, KeyError, ZeroDivisionError):
        return None


def _one_pass_variance(node: onnx.NodeProto, given: dict[str, np.ndarray], y64: np.ndarray, eps: float) -> float:
    """What a one-pass variance's rounding moves a normalisation's output by (the note above), or 0."""
    rows = _normalised_rows(node, given)
    if rows is None or rows.shape[1] < 2:
        return 0.0
    with np.errstate(all="ignore"):
        spread = rows.var(axis=1)
        ratio = np.where(spread > 0, np.mean(rows * rows, axis=1) / spread, 0.0)
    return 0.5 * eps * float(np.nanmax(ratio)) * _finite_max(y64)


def _negative_in_one_pass(node: onnx.NodeProto, given: dict[str, np.ndarray], kind: np.dtype) -> bool:
    """Whether a one-pass variance in the referee's type goes below -epsilon in some group of a
    normalisation: its square root is then NaN there, onnxruntime's rounding, not a misreading
    (issue 41, sweep 14 G4: a group of spread 0.04 at 100)."""
    rows = _normalised_rows(node, given)
    if rows is None:
        return False
    epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
    narrow = rows.astype(kind)
    with np.errstate(all="ignore"):
        variance = np.mean(narrow * narrow, axis=1, dtype=kind) - np.mean(narrow, axis=1, dtype=kind) ** 2
    return bool((variance + kind.type(epsilon) < 0).any())


def _terms(node: onnx.NodeProto, given: dict[str, np.ndarray], out: np.ndarray, opset: int) -> int:
    """How many terms each output element of a summing op adds up."""
    float_inputs = [v for k, v in given.items() if k in node.input and v.dtype.kind == "f" and v.ndim]
    if node.op_type == "MatMul" and float_inputs:
        return float_inputs[0].shape[-1]
    if node.op_type == "Gemm" and float_inputs:
        trans = any(a.name == "transA" and a.i for a in node.attribute)
        return float_inputs[0].shape[0 if trans else -1]
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and node.input[1] in given:
        weights = given[node.input[1]]
        return max(1, weights.size // weights.shape[0 if node.op_type == "Conv" else 1])
    if node.op_type in ("Softmax", "LogSoftmax", "LayerNormalization") and float_inputs:
        # The output is the input's size: count along the axes each element sums over (Softmax before
        # opset 13 takes every axis from `axis` on, default 1; from 13 that axis alone, default -1).
        x = float_inputs[0]
        old = node.op_type != "LayerNormalization" and opset < 13
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1 if old else -1) % x.ndim
        return int(np.prod(x.shape[axis:])) if old or node.op_type == "LayerNormalization" else x.shape[axis]
    if node.op_type == "CumSum" and float_inputs and len(node.input) > 1 and node.input[1] in given:
        return float_inputs[0].shape[int(np.asarray(given[node.input[1]]).reshape(-1)[0]) % float_inputs[0].ndim]  # sweep 15 H15
    if node.op_type in ("DFT", "STFT") and float_inputs:  # a frame's length (sweep 15 H13), at most the signal's
        return max(float_inputs[0].shape[1:-1], default=1) if node.op_type == "DFT" or len(float_inputs) < 2 \
            else float_inputs[1].size
    return max([1] + [v.size // max(out.size, 1) for v in float_inputs])


# The floats narrower than float32 a node may round to. A type's finfo gives its unit of rounding
# (eps) and the fixed spacing of its subnormals, below whose magnitude a value's rounding is no longer
# a fraction of it: float32 holds x * 1e-40 to 1.4e-45, 1e-5 of itself (issue 41, sweep 7 N5).
NARROW = {onnx.TensorProto.FLOAT16: np.finfo(np.float16), onnx.TensorProto.BFLOAT16: ml_dtypes.finfo(ml_dtypes.bfloat16)}


def _narrow_types(node: onnx.NodeProto) -> list:
    """The finfo of each float narrower than float32 a node or its subgraphs cast to or hold."""
    found = [NARROW[a.i] for a in node.attribute if a.name == "to" and a.type == onnx.AttributeProto.INT and a.i in NARROW]
    found += [NARROW[a.t.data_type] for a in node.attribute if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in NARROW]
    for graph in subgraphs(node):
        found += [NARROW[t.data_type] for t in graph.initializer if t.data_type in NARROW]
        found += [kind for inner in graph.node for kind in _narrow_types(inner)]
    return found


def rounding_unit(node: onnx.NodeProto, dtype: np.dtype) -> tuple[float, float]:
    """(eps, its subnormals' spacing) of the narrowest float among an output's `dtype` and those the
    node or its subgraphs cast to or hold (an If whose branch casts to FP16 rounds there, though its
    output is float32)."""
    unit = max([np.finfo(dtype), *_narrow_types(node)], key=lambda kind: float(kind.eps))
    return float(unit.eps), float(unit.smallest_subnormal)


def subgraph_nodes(node: onnx.NodeProto) -> int:
    """How many nodes a node's subgraphs hold, at any depth."""
    return sum(1 for graph in subgraphs(node) for _ in every_node(graph))


def _finite_max(array: np.ndarray) -> float:
    finite = np.abs(array[np.isfinite(array)]) if array.size else array
    return float(finite.max()) if finite.size else 0.0


def _scale(node: onnx.NodeProto, y64: np.ndarray, given: dict[str, np.ndarray]) -> float:
    """The magnitude a node's rounding is a fraction of: its output's, or its range's (WITHIN_ONE,
    ALPHA_SCALED), or its input's (INPUT_SCALED)."""
    attributes = {a.name: a.f for a in node.attribute if a.type == onnx.AttributeProto.FLOAT}
    if node.op_type in WITHIN_ONE:
        floor = 1.0
    elif node.op_type in ALPHA_SCALED:
        alpha, gamma = ALPHA_SCALED[node.op_type]
        floor = abs(attributes.get("alpha", alpha) * (attributes.get("gamma", gamma) if gamma else 1.0))
    elif node.op_type in INPUT_SCALED and node.input and node.input[0] in given:
        floor = _finite_max(given[node.input[0]]) if given[node.input[0]].dtype.kind == "f" else 0.0
    else:
        floor = 0.0
    return max(_finite_max(y64), floor)


# Ops that interpolate at coordinates an engine computes in float32 (from `sizes`, its scale 333/200
# is a float32 too): a coordinate near 200 off by eps · 200 moves the output by that times the image's
# slope, 1.6e-5 in a cubic Resize of a 200×200 image of values within 1 (issue 41, sweep 17 K5).
INTERPOLATING = {"Resize", "Upsample"}


def _coordinates(node: onnx.NodeProto, given: dict[str, np.ndarray], y64: np.ndarray, eps: float) -> float:
    """How far an interpolation moves where its coordinates are off by a unit of rounding: eps times
    the largest coordinate times the steepest step between neighbours (twice it: cubic weights
    overshoot), else 0."""
    x = given.get(node.input[0]) if node.op_type in INTERPOLATING and node.input else None
    if x is None or x.dtype.kind != "f" or x.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        slope = max((_finite_max(np.diff(x, axis=axis)) for axis in range(x.ndim) if x.shape[axis] > 1), default=0.0)
    return 2.0 * eps * max([*x.shape, *y64.shape]) * slope


def _bound(node64: onnx.NodeProto, given: dict[str, np.ndarray], name: str, y64: np.ndarray, unit: tuple[float, float],
           model: onnx.ModelProto) -> float:
    eps, tiny = unit
    floats = {k for k, v in given.items() if v.dtype.kind == "f"}
    rng = np.random.default_rng(0)
    moved = {k: v * (1 + eps * rng.choice([-1.0, 1.0], size=v.shape)) if k in floats else v for k, v in given.items()}
    with np.errstate(all="ignore"):
        shifted = evaluate_node(node64, moved, model)[name]
    # a node holding a step whose output parts when its inputs move by a unit: a flip, no conditioning
    # (issue 41, sweep 20 N8: a Loop's Floor flipping somewhere in 1500 iterations "explained" a parting of 1)
    conditioning = 0.0 if node64.op_type in HOLDING and parted(shifted, y64) else _finite_max(shifted - y64)
    summed = 0.0
    if node64.op_type in SUMMING:
        absolute = {k: np.abs(v) if k in floats else v for k, v in given.items()}
        try:
            opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
            summed = np.sqrt(_terms(node64, given, y64, opset)) * _finite_max(evaluate_node(node64, absolute, model)[name])
        except Exception:  # noqa: BLE001 - an op that refuses |inputs| (a mask): its result's scale stands
            summed = 0.0
    # A node that holds a subgraph (If, Loop, Scan) computes all of its nodes: it rounds once per node.
    # What its iterations accumulate is its own float32 arithmetic, told apart where it parts (loop_steps).
    steps = max(1, subgraph_nodes(node64))
    return UNITS * steps * (eps * (_scale(node64, y64, given) + summed) + conditioning + tiny
                            + _one_pass_variance(node64, given, y64, eps) + _coordinates(node64, given, y64, eps))


def _differs(y64: np.ndarray, theirs: np.ndarray) -> tuple[float, str]:
    """(|Δ| of the finite values, or inf with why where no number says it)."""
    if y64.shape != theirs.shape:
        return float("inf"), f"shape {list(y64.shape)} against {list(theirs.shape)}"
    if y64.dtype.kind in "USO" or theirs.dtype.kind in "USO" or y64.dtype.kind in "biu" or y64.dtype == np.bool_:
        same = np.array_equal(y64.astype(str) if y64.dtype.kind in "USO" else y64,
                              theirs.astype(str) if theirs.dtype.kind in "USO" else theirs)
        return (0.0, "") if same else (float("inf"), "values differ")
    a, b = y64.astype(np.float64), theirs.astype(np.float64)
    if theirs.dtype.kind == "f":  # what the referee's type rounds to ±inf it holds so: its rounding (an overflow),
        with np.errstate(invalid="ignore", over="ignore"):  # from half a unit past its largest (65520 in FP16)
            a = np.where(np.isinf(a.astype(theirs.dtype)), np.copysign(np.inf, a), a)
    if not np.array_equal(np.isnan(a), np.isnan(b)) or not np.array_equal(np.where(np.isinf(a), a, 0),
                                                                          np.where(np.isinf(b), b, 0)):
        return float("inf"), "NaN or ±inf in different places"
    finite = np.isfinite(a)
    return (float(np.max(np.abs(a[finite] - b[finite]))) if finite.any() else 0.0), ""


def first_parting(model: onnx.ModelProto, inputs: dict[str, np.ndarray], theirs: dict[str, np.ndarray],
                  decided_inside: Collection[str] = ()) -> tuple[Parting | None, int]:
    """(the first node where float64 and the referee's values part, or None; how many nodes were
    held against each other). A node whose outputs a step inside it decides (`decided_inside`: an
    If, a Loop, a Scan; body_steps.py) parts by the flip: it is not held."""
    known = {**inputs, **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer}, **theirs}
    checked = 0
    for order, node in enumerate(model.graph.node):
        names = node_inputs(node)
        outputs = [name for name in node.output if name in theirs]
        if not outputs or any(name not in known for name in names) or set(outputs) <= set(decided_inside):
            continue
        own_types = casts_to_string(node)
        given = {name: np.asarray(known[name]) if own_types else as_float64(np.asarray(known[name])) for name in names}
        node64 = float64_node(node)
        try:
            mine = evaluate_node(node64, given, model)
        except Exception:  # noqa: BLE001 - no float64 evaluation of this node: nothing to hold it against
            continue
        checked += 1
        for name in outputs:
            if name not in mine or isinstance(mine[name], list):  # a sequence: the referee gives none to hold
                continue
            delta, why = _differs(mine[name], theirs[name])  # exact for integers, booleans and strings
            if why and theirs[name].dtype.kind == "f" and np.isnan(theirs[name]).any() \
                    and _negative_in_one_pass(node, given, theirs[name].dtype):
                continue
            if why:
                return Parting(node_label(node, order), node.op_type, name, delta, 0.0, why,
                               ignored_by_onnx_reference(node, given) or ""), checked
            if theirs[name].dtype.kind != "f":  # integers, booleans and strings: equal (_differs says where not)
                continue
            eps, tiny = unit = rounding_unit(node, theirs[name].dtype)
            if delta <= UNITS * (eps * _scale(node, mine[name], given) + tiny):  # within rounding of the result itself
                continue
            if delta > (bound := _bound(node64, given, name, mine[name], unit, model)):
                return Parting(node_label(node, order), node.op_type, name, delta, bound,
                               known=ignored_by_onnx_reference(node, given) or ""), checked
    return None, checked


def outputs_parting(float64: dict[str, np.ndarray], theirs: dict[str, np.ndarray], names: list[str]) -> Parting | None:
    """Where no node could be held against the referee's (its values of types numpy lacks, INT4),
    the outputs themselves, within a few units of their own rounding."""
    for name in names:
        if name not in float64 or name not in theirs:
            continue
        delta, why = _differs(float64[name], theirs[name])
        kind = np.finfo(theirs[name].dtype) if theirs[name].dtype.kind == "f" else None
        bound = UNITS * (float(kind.eps) * _finite_max(float64[name]) + float(kind.smallest_subnormal)) if kind else 0.0
        if why or delta > bound:
            return Parting("", "", name, delta, bound,
                           why or f"|Δ| {delta:.3g} at the output, where no node between could be held against "
                                  "each other")
    return None


def end_to_end_bound(float64: np.ndarray, referee: np.ndarray) -> float:
    """What rounding explains between two float64 evaluations of one output (PyTorch's, ONNX's): a
    few times what float32 rounding moved it by end to end (the referee's distance), at least a few
    units of float32 on its magnitude."""
    eps = float(np.finfo(np.float32).eps)
    return UNITS * max(_differs(float64, referee)[0], eps * _finite_max(float64.astype(np.float64)))
