"""A TensorRT build refused because the model names two dimensions alike (`?`, `batch`) and the
inputs give them two sizes, said with the input, the dimensions and what to change.

TensorRT takes one dimension name for one size (the ONNX meaning of a shared dim_param), where
onnxruntime does not check: a model exported with every dimension named '?' runs there and its
TensorRT build fails with "?: Input dimensions with this name have different constant values",
which names neither the input nor the dimension.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

# TensorRT's words (TensorRT-RTX 1.7: "API Usage Error (?: Input dimensions with this name have ...)").
CONTRADICTION = "Input dimensions with this name have different constant values"


def _named_dims(model: Path) -> dict[str, list[tuple[str, int]]]:
    """{dimension name: [(input, axis), ...]} of the model's graph inputs."""
    graph = onnx.load(str(model), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    named: dict[str, list[tuple[str, int]]] = {}
    for value in graph.input:
        if value.name in weights:
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_param"):
                named.setdefault(dim.dim_param, []).append((value.name, axis))
    return named


def named_dims_conflict(model: Path, shape_sets: list[dict[str, tuple[int, ...]]]) -> str | None:
    """The first dimension name that one input set gives two sizes, said; None where there is none."""
    for name, places in _named_dims(model).items():
        for shapes in shape_sets:
            sizes = [(value, axis, shapes[value][axis]) for value, axis in places
                     if value in shapes and axis < len(shapes[value])]
            first = sizes[0] if sizes else None
            other = next((s for s in sizes if s[2] != first[2]), None) if first else None
            if other:
                return (f"input {first[0]!r} axis {first[1]} and input {other[0]!r} axis {other[1]} are both named "
                        f"{name!r} in the model, and the inputs give them {first[2]} and {other[2]}: TensorRT builds "
                        "one size per dimension name; give each dimension a name of its own in the model (dim_param), "
                        "or its fixed size")
    return None


def explained(raw: dict, model: Path, inputs: Path, input_shapes: tuple[dict, ...]) -> dict:
    """A TensorRT cell's result with the conflict said first where the builder refused for it."""
    if raw.get("status") != "error" or CONTRADICTION not in str(raw.get("error")):
        return raw
    if not input_shapes:
        with np.load(inputs) as data:
            input_shapes = ({name: data[name].shape for name in data.files},)
    try:
        conflict = named_dims_conflict(model, [{k: tuple(v) for k, v in s.items()} for s in input_shapes])
    except Exception:  # noqa: BLE001 - a model onnx cannot read here: TensorRT's words alone
        return raw
    return {**raw, "error": f"{conflict} (TensorRT's words: {raw['error']})"} if conflict else raw
