"""Check an ONNX-file case's files when the plan is built, not as `error` cells in every environment.

A corrupt model, an inputs file that lacks a graph input or holds one of the wrong shape or dtype,
an expected-outputs file with wrong names or shapes: each is one ConfigError naming the offending
file, so the CLI prints one line and exits 2. Cheap: the checker and the loader read the model
without its external data, and only the declared inputs and outputs are compared (a symbolic or
unknown dimension matches any size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ..config import ConfigError


def check_onnx_case(paths: dict[str, Path]) -> None:
    """`paths`: CaseSpec.onnx_paths() ("onnx", "inputs" and optionally "expected"); all exist."""
    graph = _model(paths["onnx"]).graph
    initializers = {init.name for init in graph.initializer}
    inputs = _arrays(paths["inputs"])
    for value in graph.input:
        if value.name not in initializers:
            _compare(paths["inputs"], "input", value, inputs, dtype=True)
    _no_strangers(paths["inputs"], "input", inputs, {value.name for value in graph.input})
    if "expected" in paths:
        expected = _arrays(paths["expected"])
        for value in graph.output:
            _compare(paths["expected"], "output", value, expected, dtype=False)
        _no_strangers(paths["expected"], "output", expected, {value.name for value in graph.output})


def _no_strangers(path: Path, role: str, arrays: dict[str, np.ndarray], names: set[str]) -> None:
    """An array the model has no such name for would be ignored in silence (a misspelt input)."""
    for name in sorted(set(arrays) - names):
        raise ConfigError(path, name, f"not a graph {role} of the model (its {role}s: {sorted(names)})")


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _model(path: Path) -> onnx.ModelProto:
    try:
        onnx.checker.check_model(str(path))  # by path: external data files are looked for beside it
        return onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # the checker and protobuf raise several types for one meaning
        raise ConfigError(path, "", f"not a valid ONNX model: {_one_line(exc)}") from None


def _arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as data:
            return {name: data[name] for name in data.files}
    except Exception as exc:  # zipfile, numpy and pickle refusals all mean the same here
        raise ConfigError(path, "", f"not a readable .npz file: {_one_line(exc)}") from None


def _declared(value: onnx.ValueInfoProto) -> list[int | str] | None:
    """The declared shape (a dimension: its size, its symbolic name or '?'), or None if undeclared."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tensor.shape.dim]


def _compare(path: Path, role: str, value: onnx.ValueInfoProto, arrays: dict[str, np.ndarray], dtype: bool) -> None:
    if value.name not in arrays:
        raise ConfigError(path, value.name, f"missing: the model's {role} {value.name!r} is not among "
                                            f"the arrays of this file {sorted(arrays)}")
    array, shape = arrays[value.name], _declared(value)
    if shape is not None and (len(shape) != array.ndim or any(
            isinstance(dim, int) and dim != size for dim, size in zip(shape, array.shape))):
        raise ConfigError(path, value.name, f"shape {list(array.shape)}, the model's {role} is {shape}")
    elem_type = value.type.tensor_type.elem_type
    wanted = onnx.helper.tensor_dtype_to_np_dtype(elem_type) if dtype and elem_type else array.dtype
    if array.dtype != wanted:
        raise ConfigError(path, value.name, f"dtype {array.dtype}, the model's {role} is {wanted}")
