"""Steps: ops whose output jumps where an input crosses a value, so that a rounding of the input
can decide it (`Floor(x / 0.1)` at 0.7 is 6 in float64 and 7 in float32), and how to tell a jump
from the ordinary movement of a value with its inputs' rounding."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

# Ops whose output jumps where their input crosses a value (Mod by its divisor), or whose output's
# length is decided by their inputs' values (Range's count, Unique's distinct values).
STEP_OPS = {"Floor", "Ceil", "Round", "Sign", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal", "ArgMax",
            "ArgMin", "Hardmax", "TopK", "QuantizeLinear", "Mod", "Range", "Unique"}
# Those whose float outputs are whole numbers (a step's levels): held exactly. Other float outputs
# (TopK's values, Range's) move with their inputs' rounding, as any value does: only their shape is a step's.
WHOLE_FLOAT_OUTPUTS = {"Floor", "Ceil", "Round", "Sign", "Hardmax"}
INTEGER_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                 TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL}


def is_step(node: onnx.NodeProto) -> bool:
    """One of STEP_OPS, or a Cast to integers (a Cast between floats is no step)."""
    return node.op_type in STEP_OPS or node.op_type == "Cast" and \
        next((a.i for a in node.attribute if a.name == "to"), None) in INTEGER_TYPES


def jumped(node: onnx.NodeProto, one: np.ndarray, other: np.ndarray, divisor: np.ndarray | None = None) -> bool:
    """Whether two values of a step's output are on different sides of a jump: another shape,
    integers or levels that differ, or (Mod) values apart by more than half the divisor, where the
    remainder wraps (fmod(3 - 2**-26, 1) is 0 in float32, 0.99999998 in float64)."""
    if one.shape != other.shape:
        return True
    if one.dtype.kind != "f" or node.op_type in WHOLE_FLOAT_OUTPUTS:
        return not np.array_equal(one, other, equal_nan=one.dtype.kind == "f")
    if node.op_type == "Mod" and divisor is not None:
        with np.errstate(invalid="ignore"):
            return bool(np.any(np.abs(one.astype(np.float64) - other) > np.abs(divisor.astype(np.float64)) / 2))
    return False
