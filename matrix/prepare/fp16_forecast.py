"""FP16 risk forecast, before any engine is built: from the float64 value of every intermediate
tensor of the case's model on its inputs (once per case, at prepare time), the nodes whose values
FP16 cannot hold.

A node is risky when its finite outputs leave FP16's range (|x| > 65504; ±inf, ±0 and values
within range are exact in FP16, and ±3.4e38, float32's largest, is what exporters write for ±inf
in attention masks: a note, since FP16's ±65504 or ±inf masks the same), when a large share of them
falls below FP16's smallest normal value (6.1e-05: subnormal, few significant bits, or flushed to
0), or when a value it computes inside does: the sum of squares of LayerNormalization's input
along the normalised axes, the largest partial sum |A|·|B| of a MatMul/Gemm accumulation, the
squares behind ReduceSumSquare/ReduceL2, exp of Softmax's largest input (engines subtract the
maximum first, so that one is a note), or when it reads a graph input or weight beyond FP16's range
(the copy holds it as ±inf or ±65504 before any node computes). What this sees is these inputs'
values, not every input.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..reference.float64_graph import float64_values, node_label

FP16_MAX = 65504.0
FP16_SMALLEST_NORMAL = 2.0 ** -14
FLOAT32_MAX = float(np.finfo(np.float32).max)
SUBNORMAL_SHARE = 0.1  # a node with at least this share of its nonzero values below the normal range


def _attribute(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _largest(values) -> float:
    """The largest of `values`, -inf for none: an empty tensor (an input of zero rows) computes
    nothing FP16 could not hold."""
    return float(np.max(values, initial=-np.inf))


def _internal(node: onnx.NodeProto, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> tuple[float, str] | None:
    """(the largest value the op computes inside, what it is) for ops that square or sum."""
    op = node.op_type
    if op == "LayerNormalization" and inputs:
        x = inputs[0]
        axis = _attribute(node, "axis", -1) % x.ndim
        return _largest(np.sum(x ** 2, axis=tuple(range(axis, x.ndim)))), "sum of squares of its input"
    if op in ("MatMul", "Gemm") and len(inputs) >= 2:
        a, b = np.abs(inputs[0]), np.abs(inputs[1])
        if op == "Gemm":
            a = a.T if _attribute(node, "transA", 0) else a
            b = b.T if _attribute(node, "transB", 0) else b
        return _largest(np.matmul(a, b)), "largest partial sum of its accumulation"
    if op == "ReduceSumSquare" and outputs:
        return _largest(np.abs(outputs[0])), "sum of squares"
    if op == "ReduceL2" and outputs:
        return _largest(outputs[0] ** 2), "sum of squares"
    if op == "Softmax" and inputs:
        return float(np.exp(min(_largest(inputs[0]), 709.0))), "exp of its largest input (before the max is subtracted)"
    return None


def stand_in_only(magnitudes: np.ndarray) -> bool:
    """Whether every finite magnitude beyond FP16's range is float32's largest (3.4e38): what
    exporters write for ±inf (torch.finfo(float32).min in attention masks)."""
    beyond = magnitudes[magnitudes > FP16_MAX]
    return beyond.size > 0 and bool((beyond == FLOAT32_MAX).all())


def _tensors(values) -> list[np.ndarray]:
    """The tensors of node values, a sequence's (a list) each."""
    return [tensor for value in values for tensor in (value if isinstance(value, list) else [value])]


def node_risks(node: onnx.NodeProto, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> dict:
    floats = [o for o in outputs if np.issubdtype(o.dtype, np.floating) and o.size]
    magnitudes = np.concatenate([np.abs(o).ravel() for o in floats]) if floats else np.zeros(0)
    magnitudes = magnitudes[np.isfinite(magnitudes)]  # ±inf (and NaN) are what FP16 holds as they are
    nonzero = magnitudes[magnitudes > 0]
    numbers = {"max_abs": float(magnitudes.max()) if magnitudes.size else 0.0,
               "subnormal_share": float((nonzero < FP16_SMALLEST_NORMAL).mean()) if nonzero.size else 0.0}
    reasons = []
    if stand_in_only(magnitudes):
        reasons.append("holds ±3.4e+38, float32's largest, a stand-in for ±inf (as in attention masks): FP16 makes "
                       "it ±65504 or ±inf, which masks the same (a note)")
    elif numbers["max_abs"] > FP16_MAX:
        reasons.append(f"values reach {numbers['max_abs']:.3g} (FP16 max 65504)")
    if numbers["subnormal_share"] >= SUBNORMAL_SHARE:
        reasons.append(f"{numbers['subnormal_share']:.0%} of its nonzero values are below 6.1e-05 (FP16 subnormal)")
    internal = _internal(node, [i for i in inputs if np.issubdtype(i.dtype, np.floating)], floats)
    if internal and internal[0] > FP16_MAX:
        numbers["internal"], numbers["internal_what"] = internal
        note = " (engines subtract the max: a note)" if node.op_type == "Softmax" else ""
        reasons.append(f"{internal[1]} reaches {internal[0]:.3g}{note}")
    return {**numbers, "reasons": reasons}


def _beyond_fp16(value: np.ndarray) -> float:
    """The largest finite magnitude of a float value beyond FP16's range (float32's largest, the
    stand-in for ±inf, aside), or 0."""
    if not np.issubdtype(value.dtype, np.floating) or not value.size:
        return 0.0
    magnitudes = np.abs(value[np.isfinite(value)])
    return float(magnitudes.max()) if magnitudes.size and not stand_in_only(magnitudes) and \
        magnitudes.max() > FP16_MAX else 0.0


def inputs_beyond_fp16(inputs: dict[str, np.ndarray]) -> str | None:
    """'input 'x' holds 7e+04, beyond FP16's 65504': the cause of an FP16 cell's failure that no
    constant of the copy explains (its input is cast to FP16, inf, before any node computes;
    issue 41, sweep 8 A9), or None."""
    found = [f"input {name!r} holds {peak:.3g}, beyond FP16's 65504" for name, value in inputs.items()
             if (peak := _beyond_fp16(np.asarray(value)))]
    return "; ".join(found) or None


class Forecast:
    """Collects the risky nodes from a float64 pass as it goes (float64_values' `each`)."""

    def __init__(self):
        self.risky: list[dict] = []
        self.unknown: list[str] = []
        self.made: set[str] = set()  # what a node seen so far computed: the rest are inputs and weights

    def see(self, order: int, node: onnx.NodeProto, given: dict, outputs: dict | str) -> None:
        if isinstance(outputs, str):
            self.unknown.append(node_label(node, order))
            return
        found = node_risks(node, _tensors(given[n] for n in node.input if n in given), _tensors(outputs.values()))
        # A graph input or weight FP16 cannot hold: the copy makes it ±inf or ±65504 before any node computes.
        found["reasons"] += [f"its input {name!r}, which no node computes, reaches {peak:.3g} (FP16 max 65504)"
                             for name in node.input if name in given and name not in self.made
                             and isinstance(given[name], np.ndarray) and (peak := _beyond_fp16(given[name]))]
        self.made.update(outputs)
        if [r for r in found["reasons"] if "a note" not in r]:
            self.risky.append({"node": node_label(node, order), "name": node.name, "op_type": node.op_type,
                               "order": order, **found})

    def result(self, model: onnx.ModelProto) -> dict:
        """{"risky": [{node, op_type, order, max_abs, subnormal_share, reasons}], "nodes", "unknown"}:
        the risky nodes in topological order, how many were seen, which had no float64 value."""
        return {"risky": self.risky, "nodes": len(model.graph.node), "unknown": self.unknown}


def fp16_forecast(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict:
    forecast = Forecast()
    float64_values(model, inputs, keep=False, each=forecast.see)
    return forecast.result(model)
