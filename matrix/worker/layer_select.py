"""Turn "Softmax" or "*LayerNormalization*" into exact layer names (Python 3.8, stdlib only).

Seed 004: trtexec did not honour wildcards in --layerPrecisions. Patterns are resolved to exact
names before anything is built — on the host against ONNX nodes (onnxruntime's FP16 copy), in
the worker against the layers of the parsed TensorRT network — so the selection is visible.

TensorRT layer names are not ONNX node names: the parser names the first layer of a node after it
and gives the others a suffix or a name of its own (onnx-tensorrt's ImporterContext). From
TensorRT 10 every layer's metadata names the node it came from, so a pattern selects each layer
whose node (or own name) it matches; before 10 a layer's node is the one of its own name.
"""

from fnmatch import fnmatchcase

from .trt_dtypes import floating_outputs
from .trt_inspection import onnx_origins


class NoMatch(ValueError):
    pass


def _matches(pattern, name, op_type):
    return op_type == pattern or fnmatchcase(name, pattern)


def _select(candidates, patterns, what):
    """candidates: (name, [(name, op type or None) a pattern is tried on]) pairs."""
    names = []
    for pattern in patterns:
        hits = [name for name, keys in candidates if any(_matches(pattern, *key) for key in keys)]
        if not hits:
            raise NoMatch("keep_fp32 pattern {!r} matches no {}".format(pattern, what))
        names.extend(h for h in hits if h not in names)
    return names


def select_names(items, patterns):
    """items: (name, op_type or None) pairs. A pattern matches an item whose op type equals it
    or whose name matches it as a glob. Every pattern must match something."""
    return _select([(name, [(name, op_type)]) for name, op_type in items], patterns, "layer (by op type or name)")


def layer_origins(name, metadata):
    """The ONNX nodes a network layer came from: its metadata's, else the node of its own name."""
    return onnx_origins(metadata) or [name]


def select_layers(layers, node_types, patterns):
    """layers: (name, metadata, output dtype names) of each layer of the parsed TensorRT network;
    node_types: {ONNX node name: op type}. A pattern selects each layer with a floating-point
    output (trt_dtypes) whose own name it matches as a glob, or whose ONNX node it matches by op
    type or name. Every pattern must select something."""
    candidates = [(name, [(name, None)] + [(node, node_types.get(node)) for node in layer_origins(name, metadata)])
                  for name, metadata, dtypes in layers if floating_outputs(dtypes)]
    return _select(candidates, patterns, "floating-point layer of the TensorRT network (by the op type or name "
                                         "of the ONNX node it came from, or by its own name)")
