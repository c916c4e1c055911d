"""Steps: ops whose output jumps where an input crosses a value, so that a rounding of the input
can decide it (`Floor(x / 0.1)` at 0.7 is 6 in float64 and 7 in float32), and how to tell a jump
from the ordinary movement of a value with its inputs' rounding."""

from __future__ import annotations

import numpy as np
import onnx


# Ops whose float output jumps where their input crosses a value (Mod by its divisor, Shrink at
# ±lambd, ThresholdedRelu at alpha), or whose output's length is decided by their inputs' values
# (Range's count, Unique's distinct values, TopK's). Any other op whose output is integers or
# booleans read from floats is a step too (a comparison, ArgMax, a Cast to integers, IsInf,
# NonZero, MaxPool's indices, NonMaxSuppression's selection): is_step.
# Ops that select by their inputs' values, giving floats: Resize picks a neighbour and an output length
# by its scales, a tree ensemble a leaf by its features (issue 41, sweep 15 H4, H5, H11: 8 · 0.1f is
# 0.8f's other side in float64, another pixel, another leaf). Only their own flips are looked for:
# held against the referee's, their floats would part by everything upstream's rounding (float64_graph
# keeps them out of the steps held against the referee).
SELECTING = {"Resize", "Upsample", "TreeEnsemble", "TreeEnsembleRegressor", "TreeEnsembleClassifier", "Binarizer",
             "GridSample", "RoiAlign"}  # a nearest pixel, an adaptive sampling count: ceil(2.0000000298) (sweep 19 M14)
STEP_OPS = {"Floor", "Ceil", "Round", "Sign", "Hardmax", "TopK", "Mod", "Range", "Unique", "Shrink", "ThresholdedRelu",
            *SELECTING}
# Those whose float outputs are whole numbers (a step's levels): held exactly. Other float outputs
# (TopK's values, Range's) move with their inputs' rounding, as any value does: only their shape is
# a step's, or (Shrink, ThresholdedRelu) a jump beyond what rounding moves a value by.
WHOLE_FLOAT_OUTPUTS = {"Floor", "Ceil", "Round", "Sign", "Hardmax"}
PIECEWISE = {"Shrink", "ThresholdedRelu"}
# Integers that say nothing of their input's values (its shape), and nodes that hold a graph (an
# If, a Loop: what they hold is checked node by node there).
HOLDING = {"If", "Loop", "Scan"}  # a step inside one flips its outputs beyond rounding (body_steps.holds_a_step)
NO_STEP = {"Shape", "Size", *HOLDING}
# How far apart two values of one output are still the same side of any jump: a few float32 units of
# the output's largest value, or, for a smaller element, a part in 1e5 of its own (an error float32
# rounding rarely reaches; issue 41, sweep 15 H7: 0.007 against 0.006 beside a 3000 was "rounding"),
# down to a thousandth of the former (values near 0 part relatively by their rounding alone).
ROUNDING = 8.0 * float(np.finfo(np.float32).eps)
OWN_ROUNDING = 1e-5


def is_step(node: onnx.NodeProto, produced: dict[str, np.ndarray]) -> bool:
    """One of STEP_OPS, or a node (not NO_STEP) that gives integers or booleans: a Cast between
    floats, an Add, is no step; nor is a sequence (a list), whose items the nodes that read it give."""
    return node.op_type in STEP_OPS or node.op_type not in NO_STEP and \
        any(not isinstance(value, list) and np.asarray(value).dtype.kind in "iubUSO" for value in produced.values())


def parted(one: np.ndarray, other: np.ndarray) -> bool:
    """Whether two values of one output are apart beyond rounding: another shape, integers or
    booleans that differ, or floats more than a few float32 units of their magnitude apart."""
    return one.shape != other.shape or bool(parted_at(one, other).any())


def parted_at(one: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Where, element by element, two values of one output of one shape are apart beyond rounding
    (parted): the elements a step rounding decides, where float32 and float64 evaluations take
    different sides of it."""
    if one.dtype.kind != "f" or other.dtype.kind != "f":
        return np.asarray(one != other)
    a, b = one.astype(np.float64), other.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    scale = float(np.max(np.abs(np.concatenate([a[finite], b[finite]])), initial=0.0))
    with np.errstate(invalid="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        apart = np.abs(a - b)
        own = (apart > OWN_ROUNDING * np.maximum(np.abs(a), np.abs(b))) & (apart > 1e-3 * ROUNDING * scale)
        return np.where(finite, (apart > ROUNDING * scale) | own, ~same)


HOLDING_JUMP = 1e-3


def _leaped(one: np.ndarray, other: np.ndarray) -> bool:
    """Whether two values of one output part by more than a part in 1e3 of their largest (or in
    NaN's places, or exactly for integers): a flip, not what rounding moves a value by."""
    if one.dtype.kind != "f" or other.dtype.kind != "f":
        return not np.array_equal(one, other)
    a, b = one.astype(np.float64), other.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    scale = float(np.max(np.abs(np.concatenate([a[finite], b[finite]])), initial=0.0))
    with np.errstate(invalid="ignore"):
        return bool(np.any(np.abs(a[finite] - b[finite]) > HOLDING_JUMP * scale)) or \
            not np.array_equal(np.isnan(a), np.isnan(b))


def jumped(node: onnx.NodeProto, one: np.ndarray, other: np.ndarray, divisor: np.ndarray | None = None) -> bool:
    """Whether two values of a step's output are on different sides of a jump: another shape,
    integers or levels that differ, (Shrink, ThresholdedRelu) values apart beyond rounding, or (Mod)
    values apart by more than half the divisor, where the remainder wraps (fmod(3 - 2**-26, 1) is 0
    in float32, 0.99999998 in float64)."""
    if one.shape != other.shape:
        return True
    if one.dtype.kind != "f" or node.op_type in WHOLE_FLOAT_OUTPUTS:
        return not np.array_equal(one, other, equal_nan=one.dtype.kind == "f")
    if node.op_type in HOLDING:  # a flip inside: a jump of a part in 1e3 of the outputs' largest, far beyond
        return _leaped(one, other)  # the rounding a network in a branch accumulates (silero VAD's If)
    if node.op_type in PIECEWISE or node.op_type in SELECTING:
        return parted(one, other)
    if node.op_type == "Mod" and divisor is not None:
        with np.errstate(invalid="ignore"):
            return bool(np.any(np.abs(one.astype(np.float64) - other) > np.abs(divisor.astype(np.float64)) / 2))
    return False
