"""Outputs that float32 rounding decides: a step (steps.py) on the other side of its jump in float32.

The float64 pass sees a step's own inputs held in float32 (float64_graph); what feeds the step may
decide it too: `Sign(Sub(a + 2**-26, a))` is 0 in float32 and 1 in float64, though Sign's input in
float64, 2**-26, is a float32 number. The referee computed every node in float32: where no node of
it parts from float64 beyond rounding (agreement.py) and a step's output is yet another on its
values, rounding upstream decided the step, and no reference says which the model means.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from .float64_graph import Float64Values, node_label
from .steps import jumped


def _value(name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray], theirs: dict[str, np.ndarray]):
    if name in theirs or name in inputs:
        return np.asarray(theirs[name] if name in theirs else inputs[name])
    tensor = next((t for t in model.graph.initializer if t.name == name), None)
    return None if tensor is None else numpy_helper.to_array(tensor)


def decided_by_rounding(model: onnx.ModelProto, inputs: dict[str, np.ndarray], float64: Float64Values,
                        theirs: dict[str, np.ndarray]) -> dict[str, str]:
    """{graph output: its step, 'Sign#2 (Sign)'}: float64.decided, and the outputs of the steps whose
    output on the referee's values (`theirs`, of the inlined `model` float64 was made of) jumps from
    float64's. Only where the referee agrees with float64 at every node: else it is no rounding."""
    flipped = []
    for order, outputs in float64.steps.items():
        node = model.graph.node[order]
        divisor = _value(node.input[1], model, inputs, theirs) if node.op_type == "Mod" else None
        if any(name in theirs and jumped(node, value, np.asarray(theirs[name]), divisor)
               for name, value in outputs.items()):
            flipped.append(order)
    decided = dict(float64.decided)
    for name, steps in float64.upstream.items():
        if name not in decided and (first := min(steps.intersection(flipped), default=None)) is not None:
            node = model.graph.node[first]
            decided[name] = f"{node_label(node, first)} ({node.op_type})"
    return decided
