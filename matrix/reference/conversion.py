"""The blame split of a reduced-precision cell: what the conversion did before any engine ran.

The FP16 copy an engine runs, evaluated in float64, holds the copy's own rounding of constants
(and any it clamped to FP16's ±65504, flushed to zero or raised to its smallest subnormal) and
nothing of the engine. Held against the original's reference it is the conversion's error; the
engine's outputs held against it are the engine's. A cell is blamed on the engine only for the second.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from .float64_graph import float64_values

# From here FP16's rounding gives inf: the converter's clamp to 65504 is what keeps the value finite
# (below it, as 65519 → 65504, it is plain rounding; issue 41, sweep 10 C8).
FP16_OVERFLOW = 65520.0
# FP16's smallest subnormal: the converter raises a smaller non-zero constant to it (1e-8 → 5.96e-8).
FP16_TINY = 2.0 ** -24


def _constants(model: onnx.ModelProto) -> dict[str, tuple[np.ndarray, str]]:
    """{constant: (its values, the first node that reads it or makes it)} of the main graph."""
    readers: dict[str, str] = {}
    for order, node in enumerate(model.graph.node):
        for name in node.input:
            readers.setdefault(name, node.name or f"{node.op_type}#{order}")
    found = {t.name: (numpy_helper.to_array(t), readers.get(t.name, "?")) for t in model.graph.initializer}
    for order, node in enumerate(model.graph.node):
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    found[node.output[0]] = (numpy_helper.to_array(attribute.t),
                                             readers.get(node.output[0], node.name or f"Constant#{order}"))
    # A constant that is a graph output: the copy renames it and casts it back to the output's name.
    for node in model.graph.node:
        if node.op_type == "Cast" and node.input and node.input[0] in found and node.output[0] not in found:
            found[node.output[0]] = found[node.input[0]]
    return found


def changed_constants(original: onnx.ModelProto, copy: onnx.ModelProto) -> list[dict]:
    """The constants the conversion clamped (beyond FP16's range), flushed to zero or raised to FP16's
    smallest subnormal (below it; issue 41, sweep 8 A9), largest change first: what a cause line names."""
    mine = _constants(copy)
    changes = []
    for name, (before, reader) in _constants(original).items():
        if name not in mine or before.dtype.kind != "f" or not before.size:
            continue
        after = mine[name][0].astype(np.float64).reshape(before.shape) if mine[name][0].size == before.size else None
        if after is None:
            continue
        before64 = before.astype(np.float64)
        clamped = np.isfinite(before64) & (np.abs(before64) >= FP16_OVERFLOW)
        flushed = (before64 != 0) & (after == 0)
        raised = (before64 != 0) & (np.abs(before64) < FP16_TINY) & (np.abs(after) >= FP16_TINY)
        with np.errstate(invalid="ignore"):  # inf - inf where a constant holds ±inf: no change, never chosen
            change = np.abs(before64 - after)
        for kind, where in (("clamps", clamped), ("flushes to zero", flushed), ("raises", raised)):
            if where.any():
                at = int(np.argmax(np.where(where, change, -1)))
                changes.append({"constant": name, "node": reader, "what": kind, "count": int(where.sum()),
                                "before": float(before64.flat[at]), "after": float(after.flat[at])})
    return sorted(changes, key=lambda c: -abs(c["before"] - c["after"]))


def reduced_values(copy: onnx.ModelProto) -> int:
    """How many of the copy's tensors, graph values and Cast targets are FP16 or BF16: none means
    the conversion turned nothing (a DOUBLE model), and no cell of the copy tested that precision."""
    reduced = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    graph = copy.graph
    count = sum(t.data_type in reduced for t in graph.initializer)
    count += sum(v.type.tensor_type.elem_type in reduced for v in (*graph.input, *graph.output, *graph.value_info))
    return count + sum(node.op_type == "Cast" and any(a.name == "to" and a.i in reduced for a in node.attribute)
                       for node in graph.node)


def copy_float64(copy: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The copy's graph outputs evaluated in float64, its casts to FP16 not rounding: the conversion's
    error is its constants', the engine's its arithmetic. Raises ValueError, saying why, where an
    output has no float64 evaluation."""
    evaluated = float64_values(copy, inputs, narrow=False)
    lacking = [o.name for o in copy.graph.output if o.name not in evaluated.values]
    if lacking:  # a part of the outputs would read, held against the reference, as outputs the engine lacks
        why = next(iter(evaluated.missing.items()), ("", "a sequence, not a tensor"))
        raise ValueError(f"trtmatrix has no float64 evaluation of the FP16 copy for {', '.join(map(repr, lacking))} "
                         f"({f'node {why[0]}: ' if why[0] else ''}{why[1]})")
    return {name: evaluated.values[name] for name in (o.name for o in copy.graph.output)}


def _also(rest: list[dict]) -> str:
    """The next constant the conversion changed, after the largest change: a product of both is what
    the copy is off by (x · 1e-8 raised to 5.96e-8 · 1e8 clamped to 65504; issue 41, sweep 8 A9)."""
    if not rest:
        return ""
    change, more = rest[0], len(rest) - 1
    return (f", and {change['what']} constant {change['constant']!r} ({change['before']:.4g} → {change['after']:.5g}) "
            f"at node {change['node']}" + (f" (and {more} more constant{'s' * (more > 1)})" if more else ""))


def cause(changes: list[dict], conversion: float, engine: float, label: str = "FP16 copy",
          wrong_shape: str | None = None) -> str:
    """'FP16 copy clamps constant 'c' (1e+05 → 65504) at node d: the copy alone is off by 0.525;
    the engine is 0.00012 from the copy in float64' — where the conversion alone is beyond the
    tolerance. Not "adds": the engine's rounding may take its outputs back towards the reference
    (a Loop's FP16 sum 1.5e3 from the copy, 214 from the reference). `wrong_shape`: the copy in
    float64 gives an output of another shape than the reference ('y has shape (2,), the reference
    (3,)': a threshold its rounded constant moves), no distance to say."""
    said = ""
    if changes:
        first = changes[0]
        more = f" and {first['count'] - 1} more value{'s' * (first['count'] > 2)}" if first["count"] > 1 else ""
        said = (f"{label} {first['what']} constant {first['constant']!r} ({first['before']:.4g} → {first['after']:.5g}"
                f"{more}) at node {first['node']}{_also(changes[1:])}: ")
    else:
        said = f"{label}'s rounding of its constants: "
    alone = f"in the copy alone {wrong_shape}" if wrong_shape else f"the copy alone is off by {conversion:.3g}"
    return f"{said}{alone}; the engine is {engine:.3g} from the copy in float64"
