"""onnx.reference ops that break the ONNX spec (onnx 1.23), replaced by ones that follow it, and
those it is known to misread, named where they part from the referee (ignored_by_onnx_reference).

Each replacement is pinned to the spec's formula by a one-node test (tests/test_reference_ops.py),
and each has a test that fails once onnx's own op is right, so that the replacement can go.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference.op_run import OpRun

RECURRENT = {"RNN", "GRU", "LSTM"}


class GatherElements(OpRun):
    """onnx's fails once the gathered axis has more than 64 entries (np.choose's limit, then a
    fallback that reshapes wrongly): XLM-RoBERTa's position ids hit it."""

    op_domain = ""

    def _run(self, data, indices, axis=None):
        axis = (axis or 0) % data.ndim
        return (np.take_along_axis(data, np.where(indices < 0, indices + data.shape[axis], indices), axis=axis),)


class GlobalMaxPool(OpRun):
    """onnx's is right only for 4-D input: on [N, C, L] it gives [N, 1]. The spec: the maximum over
    every axis after the first two, kept as size 1."""

    op_domain = ""

    def _run(self, x):
        return (np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)


class BatchNormalization(OpRun):
    """onnx's opset-9 form uses the batch's own statistics whenever a `momentum` attribute is present,
    which one common exporter writes on every BatchNormalization. The spec: with one output (and
    training_mode 0 from opset 14), Y = (X - mean) / sqrt(var + epsilon) * scale + B."""

    op_domain = ""

    def _run(self, x, scale, bias, mean, var, epsilon=None, training_mode=None, **_):  # momentum: training only
        if training_mode or len(self.onnx_node.output) > 1:
            raise NotImplementedError("BatchNormalization in training mode (batch statistics)")
        epsilon = 1e-5 if epsilon is None else epsilon
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) * scale.reshape(shape) + bias.reshape(shape)
        return (y.astype(x.dtype),)


REPLACEMENTS = [GatherElements, GlobalMaxPool, BatchNormalization]


def ignored_by_onnx_reference(node: onnx.NodeProto, given: dict[str, np.ndarray]) -> str | None:
    """What of this node onnx.reference leaves out, where it matters here: its RNN, GRU and LSTM
    read no `sequence_lens` (every sequence runs the input's whole length)."""
    if node.op_type not in RECURRENT or len(node.input) < 5 or node.input[4] not in given or node.input[0] not in given:
        return None
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    steps = given[node.input[0]].shape[1 if layout else 0]
    lengths = np.asarray(given[node.input[4]]).ravel()
    if not (lengths < steps).any():
        return None
    return (f"onnx.reference's {node.op_type} ignores `sequence_lens` (sequences of {sorted(set(lengths.tolist()))} "
            f"steps, the input has {steps}): it is the float64 evaluation that misreads this node")
