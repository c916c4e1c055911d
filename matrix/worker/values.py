"""Values that are not numeric tensors of numpy's own types, kept in .npz files that numpy reads
without pickle (a worker never unpickles what a file holds):

- a string tensor: numpy's unicode array (`<U…`), read back as the object array of `str` that
  onnxruntime takes and returns;
- a sequence (a list of tensors): `name[]` holds its length and `name[0]`, `name[1]`, … its
  items, so the host judges a sequence item by item and its length exactly, as plain outputs;
- a tensor of a type numpy lacks (bfloat16, float8, int4, … ml_dtypes' types on the host): its
  bits as unsigned integers of the same width. A TensorRT build needs only its shape, so it
  travels without ml_dtypes in the environment.

An inputs file that holds any of them has one more entry, `__values__`: the names of its values,
the type of each tensor kept as bits, and the kinds of every value of the test (its outputs too),
so that an engine that cannot take them says so before it runs. Python 3.8, numpy only.
"""

import json

import numpy as np

from .files import save_arrays

MANIFEST = "__values__"
STRING, SEQUENCE, NO_NUMPY_TYPE = "string tensor", "sequence", "no numpy type"

# What each engine's worker feeds and reads back beyond numeric tensors of numpy's types:
# onnxruntime's Python API takes strings and sequences; a TensorRT build needs only shapes, so any
# tensor type (an engine of types numpy lacks is built, not run: tensorrt_engine).
TAKES = {"onnxruntime": {STRING, SEQUENCE}, "tensorrt": {NO_NUMPY_TYPE}}
WHY_NOT = {STRING: "only onnxruntime's Python API takes string tensors",
           SEQUENCE: "only onnxruntime's Python API takes sequences",
           NO_NUMPY_TYPE: "numpy has no such type, and {engine} takes numpy arrays (a TensorRT build needs only shapes)"}


def category(kind):
    """'bfloat16 tensor' → NO_NUMPY_TYPE; a string tensor and a sequence are their own."""
    return kind if kind in (STRING, SEQUENCE) else NO_NUMPY_TYPE


def _plain_type(dtype):
    return np.issubdtype(dtype, np.number) or dtype == bool


def kinds_of(value):
    """What a value is beyond a numeric tensor of numpy's types: a set of kinds (empty for one)."""
    if isinstance(value, list):
        return {SEQUENCE}.union(*[kinds_of(item) for item in value])
    if value.dtype == object or value.dtype.kind in "SU":
        return {STRING}
    return set() if _plain_type(value.dtype) else {"{} tensor".format(value.dtype.name)}


def as_text(value):
    """A string tensor of Python objects or bytes as numpy's unicode array, which an .npz keeps without pickle."""
    return np.array([v.decode() if isinstance(v, bytes) else str(v) for v in value.ravel()], dtype=str).reshape(value.shape)


def flatten(values, types=None):
    """{name: value} as {key: numpy array} an .npz holds without pickle; `types` collects the type
    names of tensors kept as bits."""
    flat = {}
    for name, value in values.items():
        if isinstance(value, list):
            flat["{}[]".format(name)] = np.array(len(value), dtype=np.int64)
            flat.update(flatten({"{}[{}]".format(name, i): item for i, item in enumerate(value)}, types))
        elif value.dtype == object or value.dtype.kind == "S":
            flat[name] = as_text(value)
        elif value.dtype.kind == "U" or _plain_type(value.dtype):
            flat[name] = value
        else:
            if types is None:
                raise ValueError("{!r} is a {} tensor, which numpy cannot store as such".format(name, value.dtype.name))
            types[name] = value.dtype.name
            flat[name] = value.view("uint{}".format(8 * value.dtype.itemsize))
    return flat


def save_values(path, values, kinds=()):
    """Inputs as a worker reads them (load_values); `kinds`: those of the test's every value."""
    types = {}
    flat = flatten(values, types)
    kinds = set(kinds).union(*[kinds_of(v) for v in values.values()])
    if kinds or types:
        flat[MANIFEST] = np.array(json.dumps({"names": list(values), "types": types, "kinds": sorted(kinds)}))
    save_arrays(path, flat)


def _unflatten(flat, name):
    if "{}[]".format(name) in flat:
        return [_unflatten(flat, "{}[{}]".format(name, i)) for i in range(int(flat["{}[]".format(name)]))]
    value = flat[name]
    return value.astype(object) if value.dtype.kind == "U" else value


def load_values(path):
    """({name: value}, {name: type name of a tensor kept as bits}, kinds of the test's values)."""
    with np.load(path) as data:
        flat = {key: data[key] for key in data.files}
    if MANIFEST not in flat:
        return flat, {}, set()
    manifest = json.loads(str(flat.pop(MANIFEST)))
    return {name: _unflatten(flat, name) for name in manifest["names"]}, manifest["types"], set(manifest["kinds"])


def refusal(engine, kinds):
    """Why `engine` cannot take a test of these kinds, or None."""
    taken = TAKES.get(engine, set())
    for kind in sorted(kinds):
        if category(kind) not in taken:
            return "the {} engine cannot take a {}: {}".format(engine, kind, WHY_NOT[category(kind)].format(engine=engine))
    return None
