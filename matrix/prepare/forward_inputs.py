"""How a case file's inputs dict binds to its module's forward(): the export, the float64 reference
and the torch engine all pass the inputs positionally, in the dict's order, while the ONNX inputs
carry the dict's names. Where those names are forward()'s parameters, they are taken as such
({"b": ones, "a": zeros} for forward(a, b) is a = zeros, b = ones, whatever the dict's order);
names that are not its parameters bind in the dict's order, as they always did."""

from __future__ import annotations

import inspect

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


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
