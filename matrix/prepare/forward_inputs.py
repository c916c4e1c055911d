"""How a case file's inputs dict binds to its module's forward(): the export, the float64 reference
and the torch engine all pass the inputs positionally, in the dict's order, while the ONNX inputs
carry the dict's names. Where those names are forward()'s parameters, they are taken as such
({"b": ones, "a": zeros} for forward(a, b) is a = zeros, b = ones, whatever the dict's order);
names that are not its parameters bind in the dict's order, as they always did."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def module_and_inputs(built) -> tuple:
    """What a case function returned, checked to be `(module, {input_name: tensor})` (ValueError,
    one line saying what came instead; issue 41, sweep 7 N9)."""
    if not (isinstance(built, (tuple, list)) and len(built) == 2):
        raise ValueError(f"the case function returned {_kind(built)}, not (module, {{input_name: tensor}})")
    if not isinstance(built[1], Mapping):
        raise ValueError(f"the case function returned its inputs as {_kind(built[1])}, not a dict {{input_name: tensor}}")
    import torch

    # issue 41, sweep 18 L19: a numpy input raised "'numpy.ndarray' object has no attribute 'is_floating_point'"
    if wrong := next(((name, value) for name, value in built[1].items() if not isinstance(value, torch.Tensor)), None):
        raise ValueError(f"the case function returned input {wrong[0]!r} as {_kind(wrong[1])}, not a torch.Tensor "
                         "(torch.from_numpy(array) makes one of a numpy array)")
    return built


def _kind(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def bound_by_name(module, inputs: dict) -> dict:
    """`inputs` in forward()'s order where their names are its first parameters; a dict that would
    bind a parameter's name to another parameter (skipping one) is refused (ValueError, one line)."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):  # a forward inspect cannot read: the dict's order, as ever
        return inputs
    params = [p.name for p in signature.parameters.values() if p.kind in _POSITIONAL]
    if set(inputs) == set(params[:len(inputs)]):
        return {name: inputs[name] for name in params[:len(inputs)]}
    bound = zip(params, inputs)  # what binding in the dict's order does
    wrong = next((f"input {name!r} would be forward()'s {param!r}" for param, name in bound
                  if name != param and (name in params or param in inputs)), None)
    if wrong is None:  # every name that is a parameter lands on it
        return inputs
    raise ValueError(f"the case's inputs bind to forward({', '.join(params)}) in the dict's order: {wrong}; name "
                     "all of forward()'s parameters up to the last one given (bound by name), or none of them")
