"""A PyTorch module's outputs as its ONNX export lists them, one rule for the reference made at
prepare time and for the torch engine's cells: tuples and lists item by item (`x, (y, z)` is three
outputs), a dict or a mapping like Hugging Face's ModelOutput by its values in order, as both
exporters flatten them (neither names the outputs after the keys); a None item is dropped, as both
exporters drop it (`return y, None`: one output; issue 41, sweep 7 N8)."""

from collections.abc import Mapping


def flat_outputs(outputs):
    if isinstance(outputs, Mapping):
        outputs = tuple(outputs.values())
    if isinstance(outputs, (tuple, list)):
        return tuple(leaf for item in outputs if item is not None for leaf in flat_outputs(item))
    return (outputs,)
