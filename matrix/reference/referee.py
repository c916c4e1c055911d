"""The referee: the same model evaluated a second, independent way, every intermediate tensor kept.

onnxruntime's CPU provider at the release this host has (the newest trtmatrix installs), graph
optimisations off (no fusion stands between an ONNX node and its value), in the model's own types.
It shares no code with onnx.reference, so where the two agree neither has misread the model.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import onnx
from onnx import helper

from .referee_process import in_referee_process


NO_NUMPY = ("bfloat16", "float8", "int4", "uint4", "float4")  # in onnxruntime's type names: tensor(bfloat16)


@dataclass
class RefereeValues:
    label: str  # "onnxruntime 1.32.0 CPU, float32, optimisations off"
    values: dict[str, np.ndarray]  # every top-level node output it could give, and the graph's outputs


@contextmanager
def _every_output(model: onnx.ModelProto, every: bool = True) -> Iterator[str | bytes]:
    """The model with every top-level node output as a graph output (onnxruntime keeps a graph output
    as it is computed), added to the model itself and taken off again (a copy of a model of a gigabyte
    costs as much as writing it). Its bytes, sent to the referee's process: no copy of the user's
    model is left on disk where trtmatrix is killed (issue 41, sweep 12 E10). Past protobuf's 2 GB, a
    file with its weights beside it, in a temporary folder that a kill -9 does leave."""
    known = {v.name for v in model.graph.output}
    added = [name for node in model.graph.node for name in node.output if name and name not in known] if every else []
    before = len(model.graph.output)
    model.graph.output.extend(helper.make_value_info(name, onnx.TypeProto()) for name in dict.fromkeys(added))
    try:
        if model.ByteSize() <= 1.5e9:
            yield model.SerializeToString()
            return
        with tempfile.TemporaryDirectory(prefix="trtmatrix-referee-") as folder:
            path = os.path.join(folder, "model.onnx")
            copy = onnx.ModelProto()  # writing external data moves the bytes out of the proto written
            copy.CopyFrom(model)
            onnx.save(copy, path, save_as_external_data=True)
            yield path
    finally:
        del model.graph.output[before:]


def referee_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def referee_label() -> str:
    return f"onnxruntime {referee_version()} CPU, float32, optimisations off"


def judged_against_itself(check: dict | None, engine: str, version: str | None) -> str | None:
    """Why a cell of the referee's own onnxruntime release has no reference for some outputs, or
    None: their reference is that release's own output (no float64 evaluation of an op), which the
    cell can only match (issue 41, sweep 10 C9: MeanVarianceNormalization's NaN passed so)."""
    if not check or not check.get("referee_outputs") or engine != "onnxruntime" or version != check.get("referee_version"):
        return None
    return (f"the reference for {', '.join(map(repr, check['referee_outputs']))} is this very release's output "
            f"({check['text']}): the cell would be judged against itself; give the case `expected` outputs")


def _session(model: str | bytes):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    # fatal only: a model it cannot load raises with its words (the cell's record keeps them); its ERROR
    # log line of the same words, colour codes and all, would land on the terminal (issue 41, sweep 8 A9)
    options.log_severity_level = 4
    onnxruntime.set_default_logger_severity(3)  # kernels' own warnings go through the default logger (RoiAlign's)
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class _EveryOutputRefused(Exception):
    """The model with every intermediate as an output did not load (one it cannot type: a sequence...)."""


def referee_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> RefereeValues:
    """Raises what onnxruntime raises where it cannot load or run the model, and RefereeCrashed where
    it crashes: it runs in a process of its own (referee_process.py)."""
    own = [o.name for o in model.graph.output]
    try:
        with _every_output(model) as given:
            values = in_referee_process(_evaluated, given, inputs, own, True)
    except _EveryOutputRefused:  # the graph's outputs alone
        with _every_output(model, every=False) as given:
            values = in_referee_process(_evaluated, given, inputs, own, False)
    return RefereeValues(referee_label(), values)


def _evaluated(model: str | bytes, inputs: dict[str, np.ndarray], own: list[str], every: bool) -> dict[str, np.ndarray]:
    """The referee's values of the model (its bytes or file; run in the referee's process)."""
    import onnxruntime

    try:
        session = _session(model)
    except Exception:  # noqa: BLE001 - raised again by referee_values, with the graph's outputs alone
        if every:
            raise _EveryOutputRefused() from None
        raise
    # An intermediate numpy has no type for (bfloat16, float8, int4) cannot be fetched: the check
    # passes over it (its node is held against the next one's inputs), the model still runs.
    names = [o.name for o in session.get_outputs() if o.name in own or not any(t in o.type for t in NO_NUMPY)]
    quiet = onnxruntime.RunOptions()
    quiet.log_severity_level = 4  # a failing kernel's ERROR log (colour codes and all) is the exception's text too
    bits = {i.name for i in session.get_inputs() if i.type == "tensor(bfloat16)"}
    if bits:  # numpy has no bfloat16: ml_dtypes' bits go in as onnxruntime's own values (its outputs: numpy's types)
        feeds = {i.name: onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(inputs[i.name].view(np.uint16),
                                                                                  onnx.TensorProto.BFLOAT16)
                 if i.name in bits else onnxruntime.OrtValue.ortvalue_from_numpy(inputs[i.name])
                 for i in session.get_inputs()}
        names = [o.name for o in session.get_outputs() if o.name in names and not any(t in o.type for t in NO_NUMPY)]
        results = [value.numpy() for value in session.run_with_ort_values(names, feeds, quiet)]
    else:
        results = session.run(names, {i.name: inputs[i.name] for i in session.get_inputs()}, quiet)
    return {name: value for name, value in zip(names, results) if isinstance(value, np.ndarray)}
