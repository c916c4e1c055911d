"""The referee: the same model evaluated a second, independent way, every intermediate tensor kept.

onnxruntime's CPU provider at the release this host has (the newest trtmatrix installs), graph
optimisations off (no fusion stands between an ONNX node and its value), in the model's own types.
It shares no code with onnx.reference, so where the two agree neither has misread the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper


@dataclass
class RefereeValues:
    label: str  # "onnxruntime 1.32.0 CPU, float32, optimisations off"
    values: dict[str, np.ndarray]  # every top-level node output it could give, and the graph's outputs


def _with_every_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose graph outputs are every top-level node output: onnxruntime keeps a graph
    output as it is computed, so nothing it returns is a value another node's fusion changed."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    known = {v.name for v in copy.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name not in known:
                copy.graph.output.append(helper.make_value_info(name, onnx.TypeProto()))
                known.add(name)
    return copy


def referee_label() -> str:
    import onnxruntime

    return f"onnxruntime {onnxruntime.__version__} CPU, float32, optimisations off"


def _session(model: onnx.ModelProto):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def referee_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> RefereeValues:
    """Raises what onnxruntime raises where it cannot load or run the model."""
    try:
        session = _session(_with_every_output(model))
    except Exception:  # noqa: BLE001 - an intermediate it cannot type (a sequence...): the graph's outputs alone
        session = _session(model)
    names = [o.name for o in session.get_outputs()]
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    results = session.run(names, feeds)
    values = {name: value for name, value in zip(names, results) if isinstance(value, np.ndarray)}
    return RefereeValues(referee_label(), values)
