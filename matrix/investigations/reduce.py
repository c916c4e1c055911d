"""The smallest part of a model that still fails, for `trtmatrix repro`: Polygraphy's `debug
reduce`, started where `explain` points.

The first candidate is the subgraph from the first divergent node's inputs to its outputs, cut
with onnx's own extractor (onnx.utils.Extractor); each next one adds the nodes that produce the
current one's inputs (a layer of predecessors), until the inputs are the model's own. Constants
(initializers, Constant nodes and what is computed from constants alone) stay inside every
candidate, never become inputs. A candidate's inputs are the float64 pass's values of those
tensors, cast to the types the model gives them; its expected outputs are the float64 values of
the divergent node's outputs. Candidates are judged by `smallest_failing` over their depth, a
batch of depths at a time (one environment job each): the failure is assumed to appear once with
depth and stay (a fusion across the cut needs its producers in; more of them do not undo it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper

from ..reference.float64_graph import RANDOM_OPS

BATCH = 6  # depths judged at once: one environment job runs them all


@dataclass
class Subgraph:
    depth: int  # layers of predecessors added to the divergent node
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]  # in the model's types
    expected: dict[str, np.ndarray]  # float64 (integers as they are)

    @property
    def nodes(self) -> int:
        return len(self.model.graph.node)


def constant_tensors(model: onnx.ModelProto) -> set[str]:
    """Initializers and every tensor computed from constants alone (Constant nodes included)."""
    constant = {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in RANDOM_OPS and all(not name or name in constant for name in node.input):
            constant.update(name for name in node.output if name)
    return constant


def _np_type(value: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))


@dataclass(frozen=True)
class Cut:
    depth: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class Reducer:
    """Cuts of one model around one node, and the subgraph of each, with its inputs and outputs."""

    def __init__(self, model: onnx.ModelProto, values: dict[str, np.ndarray]):
        self.model, self.values = model, values
        typed = onnx.shape_inference.infer_shapes(model)
        self.types = {v.name: v for v in [*typed.graph.value_info, *typed.graph.input, *typed.graph.output]}
        self.extractor = onnx.utils.Extractor(typed)

    def cuts(self, start: int) -> list[Cut]:
        """Node `start` alone, then with one more layer of predecessors each time, up to the
        model's inputs. A depth whose inputs have no float64 value (or no type) is left out: a
        deeper one covers it."""
        nodes = self.model.graph.node
        producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
        constant = constant_tensors(self.model)
        outputs = tuple(name for name in nodes[start].output if name and name in self.values)
        found: list[Cut] = []
        chosen, depth = {start}, 0
        while outputs:
            made = {name for index in chosen for name in nodes[index].output}
            inputs = tuple(sorted({name for index in chosen for name in nodes[index].input
                                   if name and name not in constant and name not in made}))
            if all(name in self.values and name in self.types for name in inputs):
                found.append(Cut(depth, inputs, outputs))
            more = chosen | {producer[name] for name in inputs if name in producer}
            if more == chosen:
                break
            chosen, depth = more, depth + 1
        return found

    def subgraph(self, cut: Cut) -> Subgraph:
        model = self.extractor.extract_model(list(cut.inputs), list(cut.outputs))
        # The extractor keeps the whole model's inferred types of inner tensors: not needed to
        # run the subgraph, and the file then says no more than the model itself did.
        del model.graph.value_info[:]
        return Subgraph(cut.depth, model,
                        {name: self.values[name].astype(_np_type(self.types[name])) for name in cut.inputs},
                        {name: self.values[name] for name in cut.outputs})


def smallest_failing(count: int, fails: Callable[[list[int]], list[bool]], batch: int = BATCH) -> int | None:
    """The smallest index in range(count) that fails, judging up to `batch` indices per call
    (evenly spread between the largest known to pass and the smallest known to fail); None when
    none of them fails."""
    low, high = -1, count
    while high - low > 1:
        span = high - low - 1
        picks = sorted({low + 1 + round(i * (span - 1) / max(min(batch, span) - 1, 1)) for i in range(min(batch, span))})
        results = dict(zip(picks, fails(picks)))
        high = min([p for p, failed in results.items() if failed] + [high])
        low = max([p for p, failed in results.items() if not failed and p < high] + [low])
    return high if high < count else None
