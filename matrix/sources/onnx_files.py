"""Check an ONNX-file case's files when the plan is built, not as `error` cells in every environment.

A corrupt model or one whose node is given a type its operator does not take, an inputs file that
lacks a graph input or holds one of the wrong shape or dtype, an expected-outputs file with wrong
names or shapes: each is one ConfigError naming the offending file, so the CLI prints one line and
exits 2. Cheap: the checker and the loader read the model without its external data, and only the
declared inputs and outputs are compared (a symbolic or unknown dimension matches any size).
"""

from __future__ import annotations

import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import onnx

from ..config import ConfigError


def check_onnx_case(input_sets: list[dict[str, Path]], mask: str | None = None) -> dict[str, list[int | str] | None]:
    """`input_sets`: CaseSpec.all_onnx_paths() (each "onnx", "inputs" and optionally "expected"),
    one per row of the case; all exist. Returns each output's declared shape (None: undeclared)."""
    model = _model(input_sets[0]["onnx"])
    graph = model.graph
    for value in graph.output:  # an .npz holds tensors, and so do the references made of one
        kind = value.type.WhichOneof("value")
        if kind not in ("tensor_type", None):
            raise ConfigError(input_sets[0]["onnx"], value.name,
                              f"a {kind.removesuffix('_type').replace('_', ' ')} output, not a tensor: ONNX-file "
                              "cases judge tensor outputs (a case file may return a sequence of tensors, judged "
                              "item by item)")
    initializers = {init.name for init in graph.initializer}
    for paths in input_sets:
        inputs = _arrays(paths["inputs"])
        for value in graph.input:
            if value.name not in initializers:
                _compare(paths["inputs"], "input", value, inputs, dtype=True)
        _no_strangers(paths["inputs"], "input", inputs, {value.name for value in graph.input})
        if mask is not None:
            _check_mask(paths["inputs"], mask, inputs)
        if "expected" in paths:
            expected = _arrays(paths["expected"])
            for value in graph.output:
                _compare(paths["expected"], "output", value, expected, dtype=False)
            _no_strangers(paths["expected"], "output", expected, {value.name for value in graph.output})
            _shapes_follow_inputs(model, paths, inputs, expected)
    return {value.name: _declared(value) for value in graph.output}


def _check_mask(path: Path, mask: str, inputs: dict[str, np.ndarray]) -> None:
    if mask not in inputs:
        raise ConfigError(path, mask, f"the case's mask {mask!r} is not an input of the model (its inputs: "
                                      f"{sorted(inputs)})")
    if not (np.issubdtype(inputs[mask].dtype, np.integer) or inputs[mask].dtype == np.bool_):
        raise ConfigError(path, mask, f"a mask holds 0 where positions are left out and 1 elsewhere: integers "
                                      f"or booleans, not {inputs[mask].dtype}")
    if not inputs[mask].any():  # sweep 5 #15: known before anything runs, not a compare error in every cell
        raise ConfigError(path, mask, f"the mask is 0 everywhere (shape {list(inputs[mask].shape)}): it leaves out "
                                      "every element of every output, nothing would be judged")


def _shapes_follow_inputs(model: onnx.ModelProto, paths: dict[str, Path], inputs: dict[str, np.ndarray],
                          expected: dict[str, np.ndarray]) -> None:
    """Expected outputs of the shapes these inputs give: a named dimension (`batch`) takes its size
    from the inputs, and shape inference on the inputs' actual shapes gives the rest it can."""
    sizes: dict[str, tuple[int, str]] = {}
    for value in model.graph.input:
        for dim, size in zip(_declared(value) or [], inputs.get(value.name, np.zeros(0)).shape):
            if isinstance(dim, str) and dim != "?":
                sizes.setdefault(dim, (size, value.name))
    inferred = _inferred_outputs(model, inputs)
    for value in model.graph.output:
        got = expected[value.name].shape
        for axis, (dim, size) in enumerate(zip(_declared(value) or [None] * len(got), got)):
            want, why = (sizes[dim][0], f"dimension {dim!r} is {sizes[dim][0]} in input {sizes[dim][1]!r}") \
                if isinstance(dim, str) and dim in sizes else (inferred.get(value.name, {}).get(axis), "shape inference")
            if want is not None and want != size:
                raise ConfigError(paths["expected"], value.name,
                                  f"shape {list(got)}, but the inputs of {paths['inputs'].name} give {want} on axis "
                                  f"{axis} ({why}): inputs and expected outputs of different input sets?")


def _inferred_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, dict[int, int]]:
    """{output: {axis: size}} that ONNX shape inference finds with the inputs' actual shapes; what
    it cannot tell (or a model it fails on) is left out, not guessed."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        if value.name in inputs and value.type.tensor_type.HasField("shape"):
            for dim, size in zip(value.type.tensor_type.shape.dim, inputs[value.name].shape):
                dim.Clear()
                dim.dim_value = size
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is a help here, never a verdict
        return {}
    return {value.name: {axis: dim for axis, dim in enumerate(_declared(value) or []) if isinstance(dim, int) and dim}
            for value in inferred.graph.output}


def _no_strangers(path: Path, role: str, arrays: dict[str, np.ndarray], names: set[str]) -> None:
    """An array the model has no such name for would be ignored in silence (a misspelt input)."""
    for name in sorted(set(arrays) - names):
        raise ConfigError(path, name, f"not a graph {role} of the model (its {role}s: {sorted(names)})")


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _model(path: Path) -> onnx.ModelProto:
    try:
        onnx.checker.check_model(str(path))  # by path: external data files are looked for beside it
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # the checker and protobuf raise several types for one meaning
        raise ConfigError(path, "", f"not a valid ONNX model: {_one_line(exc)}") from None
    _types_allowed(path, model)
    return model


def _types_allowed(path: Path, model: onnx.ModelProto) -> None:
    """Every node given types its operator's schema takes (Sum of uint8 is no model: issue 41, sweep 8
    A5). The type half of `check_model(full_check=True)`: its shape half (a declared shape that
    differs from the inferred one) is left to the engines, which run such models (onnxruntime merges
    the shapes and warns), and so are operators of domains onnx does not know."""
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True)
    except onnx.shape_inference.InferenceError as exc:
        raise ConfigError(path, "", f"not a valid ONNX model: a node is given a type its operator does not take "
                                    f"(onnx shape inference: {_one_line(exc)})") from None


def _arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        data = np.load(path)
    except Exception as exc:  # zipfile, numpy and pickle refusals all mean the same here
        if not zipfile.is_zipfile(path):  # numpy's last guess, pickle, would be its words
            raise ConfigError(path, "", "not an .npz file: np.savez writes a zip of named arrays, and this is no "
                                        "zip") from None
        raise ConfigError(path, "", f"not a readable .npz file: {_one_line(exc)}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):  # np.save's one array, whatever the file's name
        raise ConfigError(path, "", "an .npy file (one array without a name), not an .npz of arrays named as the "
                                    "model's tensors: np.savez(path, x=array)")
    try:
        with data:
            return {name: data[name] for name in data.files}
    except Exception as exc:  # noqa: BLE001 - a member damaged inside the zip
        if "Object arrays cannot be loaded" in str(exc):  # strings as Python objects (issue 41, sweep 8 A4)
            raise ConfigError(path, "", "an object array, which only pickle reads (trtmatrix never unpickles a "
                                        "file): save strings as an array of str, np.array(['a', 'b']) (dtype <U)") from None
        raise ConfigError(path, "", f"not a readable .npz file: {_one_line(exc)}") from None


def _declared(value: onnx.ValueInfoProto) -> list[int | str] | None:
    """The declared shape (a dimension: its size, its symbolic name or '?'), or None if undeclared.
    A negative size is how some exporters (paddle2onnx) write a dynamic dimension, and onnxruntime
    reads it so: '?'."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or "?" for d in tensor.shape.dim]


def _compare(path: Path, role: str, value: onnx.ValueInfoProto, arrays: dict[str, np.ndarray], dtype: bool) -> None:
    if value.name not in arrays:
        alike = [name for name in arrays if unicodedata.normalize("NFC", name) == unicodedata.normalize("NFC", value.name)]
        if alike:  # they print alike: the code points say why
            raise ConfigError(path, value.name, f"missing: the file's array {ascii(alike[0])} differs from the model's "
                                                f"{role} {ascii(value.name)} only in Unicode normalisation (NFC, NFD): "
                                                "save it under the model's own name")
        raise ConfigError(path, value.name, f"missing: the model's {role} {value.name!r} is not among "
                                            f"the arrays of this file {sorted(arrays)}")
    array, shape = arrays[value.name], _declared(value)
    if shape is not None and (len(shape) != array.ndim or any(
            isinstance(dim, int) and dim != size for dim, size in zip(shape, array.shape))):
        raise ConfigError(path, value.name, f"shape {list(array.shape)}, the model's {role} is {shape}")
    elem_type = value.type.tensor_type.elem_type
    if elem_type == onnx.TensorProto.STRING and role == "input":  # issue 41, sweep 8 A4: not numpy's "object"
        if array.dtype.kind not in "US":
            raise ConfigError(path, value.name, f"dtype {array.dtype}, the model's input is STRING: give an array "
                                                f"of str (np.array(['a', 'b']), dtype <U) or of bytes (dtype |S)")
        return
    if elem_type == onnx.TensorProto.BFLOAT16 and role == "input":  # numpy has no bfloat16 of its own
        if as_bfloat16(array) is None:
            raise ConfigError(path, value.name, f"dtype {array.dtype}, the model's input is bfloat16, which numpy has "
                                                f"no type for: store its bit patterns as uint16 "
                                                f"(x.astype(ml_dtypes.bfloat16).view(np.uint16)), or ml_dtypes' "
                                                f"bfloat16 array itself")
        return
    declared = onnx.helper.tensor_dtype_to_np_dtype(elem_type) if elem_type else array.dtype
    # Expected outputs may be wider (float64 for float32), never text for numbers or numbers for text.
    wanted = declared if dtype or _is_text(declared) != _is_text(array.dtype) else array.dtype
    if array.dtype != wanted:
        raise ConfigError(path, value.name, f"dtype {array.dtype}, the model's {role} is {wanted}")


def as_bfloat16(array: np.ndarray) -> np.ndarray | None:
    """A bfloat16 input as an .npz holds it, as ml_dtypes' bfloat16: its bit patterns as uint16, or
    ml_dtypes' own array (which numpy saves as the raw type |V2); None for any other form."""
    import ml_dtypes

    if array.dtype == np.uint16 or array.dtype == ml_dtypes.bfloat16 or (array.dtype.kind == "V" and array.dtype.itemsize == 2):
        return array.view(ml_dtypes.bfloat16)
    return None


def _is_text(dtype: np.dtype) -> bool:
    return dtype.kind in "USO"
