"""Whether a known issue's fault pattern could ever match a model, checked against onnx's op schemas
when the registry is read: an op name in another case (`maxpool`), an element type no tensor has
(`fp16`), an attribute or input the op does not have, an opset where the op does not exist. Such an
entry would leave the failures it was written for unexplained, without a word. Ops of domains onnx
does not define (com.microsoft: onnxruntime's own ops) are not checked: their schemas are not in
onnx.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto, helper
from onnx.defs import OpSchema
from packaging.specifiers import InvalidSpecifier, SpecifierSet

# The Python values a registry's TOML gives, per attribute type of the schema (a float may be
# written as an integer: 1 for 1.0).
_KINDS = {OpSchema.AttrType.INT: (int,), OpSchema.AttrType.FLOAT: (int, float), OpSchema.AttrType.STRING: (str,),
          OpSchema.AttrType.INTS: (list, int), OpSchema.AttrType.FLOATS: (list, int, float)}


@functools.cache
def _schemas() -> dict[tuple[str, str], list[OpSchema]]:
    """{(domain, op): its schemas, oldest first} of every op onnx defines."""
    found: dict[tuple[str, str], list[OpSchema]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        found.setdefault((schema.domain, schema.name), []).append(schema)
    return {key: sorted(found[key], key=lambda s: s.since_version) for key in found}


@functools.cache
def element_type_names() -> tuple[str, ...]:
    """The element types as fault patterns name them (numpy's names: float16, int64, bool)."""
    names = set()
    for value in TensorProto.DataType.values():
        try:
            names.add(helper.tensor_dtype_to_np_dtype(value).name)
        except (KeyError, ValueError, TypeError):  # UNDEFINED
            continue
    return tuple(sorted(names))


def _twin(name: str, domain: str | None) -> str:
    """' (did you mean 'MaxPool'?)' for a name onnx knows in another case, else ''."""
    found = [op for d, op in _schemas() if (domain is None or d == domain) and op.lower() == name.lower()]
    return f" (did you mean {found[0]!r}?)" if found else ""


def _value_fits(value, kind) -> bool:
    types = _KINDS.get(kind)
    if types is None or isinstance(value, bool):
        return False
    if isinstance(value, list):
        return list in types and all(isinstance(v, types[1:]) and not isinstance(v, bool) for v in value)
    return list not in types and isinstance(value, types)


def fault_problem(pattern) -> tuple[str, str] | None:
    """(key, why) of the first part of a FaultPattern that no model can hold, else None."""
    if pattern.dtype is not None and pattern.dtype not in element_type_names():
        return "dtype", f"{pattern.dtype!r} is no element type (one of {', '.join(element_type_names())})"
    try:
        opset = SpecifierSet(pattern.opset) if pattern.opset is not None else None
    except InvalidSpecifier as exc:
        return "opset", f"not a version specifier: {exc}"
    domains = {d for d, _ in _schemas()}
    if pattern.domain not in domains:  # a runtime's own domain: its schemas are not onnx's
        return None
    versions = _schemas().get((pattern.domain, pattern.op))
    where = f"the ONNX domain {pattern.domain!r}" if pattern.domain else "the ONNX domain"
    if versions is None:
        return "op", f"{pattern.op!r} is no op of {where}{_twin(pattern.op, pattern.domain)}"
    if pattern.after is not None and _twin(pattern.after, None) and not any(op == pattern.after for _, op in _schemas()):
        return "after", f"{pattern.after!r} is no ONNX op{_twin(pattern.after, None)}"
    top = max(s.since_version for (d, _), found in _schemas().items() if d == pattern.domain for s in found)
    if not pattern.domain:
        top = max(top, onnx.defs.onnx_opset_version())
    first = versions[0].since_version
    opsets = [v for v in range(first, top + 1) if opset is None or str(v) in opset]
    if not opsets:
        return "opset", (f"{pattern.opset!r}: {pattern.op} is in opsets {first} to {top} (onnx {onnx.__version__}): "
                         "no model holds it there")
    # the op's versions a model of those opsets runs (each from its since_version to the next's), oldest first
    ends = [s.since_version for s in versions[1:]] + [top + 1]
    live = [s for s, end in zip(versions, ends) if any(s.since_version <= v < end for v in opsets)]
    attributes: dict[str, set] = {}  # {name: its types over the op's versions} (Cast-1's `to` was text)
    for schema in live:
        for name, attribute in schema.attributes.items():
            attributes.setdefault(name, set()).add(attribute.type)
    for key, names in (("attributes", list(pattern.attributes)), ("nonzero", list(pattern.nonzero))):
        for name in names:
            if name not in attributes:
                return f"{key}.{name}" if key == "attributes" else key, \
                    f"{pattern.op} has no attribute {name!r} (it has {', '.join(sorted(attributes)) or 'none'})"
    for name, value in pattern.attributes.items():
        if not any(_value_fits(value, kind) for kind in attributes[name]):
            kinds = " or ".join(sorted(kind.name for kind in attributes[name]))
            return f"attributes.{name}", (f"{value!r} can never be the value of {pattern.op}'s {name}, "
                                          f"an attribute of type {kinds}")
    inputs = {}
    for schema in live:
        for formal in schema.inputs:
            optional = formal.option == OpSchema.FormalParameterOption.Optional
            inputs[formal.name] = inputs.get(formal.name, False) or optional
    for name in pattern.absent:
        if name not in inputs:
            return "absent", f"{pattern.op} has no input {name!r} (its inputs: {', '.join(inputs)})"
        if not inputs[name]:
            return "absent", f"{name!r} is a required input of {pattern.op}: it is never absent"
    return None
