"""Turn "Softmax" or "*LayerNormalization*" into exact layer names (Python 3.8, stdlib only).

Seed 004: trtexec did not honour wildcards in --layerPrecisions. Patterns are resolved to exact
names before anything is built — on the host against ONNX nodes (onnxruntime's FP16 copy), in
the worker against the layers of the parsed TensorRT network — so the selection is visible.
"""

from fnmatch import fnmatchcase


class NoMatch(ValueError):
    pass


def select_names(items, patterns):
    """items: (name, op_type or None) pairs. A pattern matches an item whose op type equals it
    or whose name matches it as a glob. Every pattern must match something."""
    names = []
    for pattern in patterns:
        hits = [name for name, op_type in items if op_type == pattern or fnmatchcase(name, pattern)]
        if not hits:
            raise NoMatch("keep_fp32 pattern {!r} matches no layer (by op type or name)".format(pattern))
        names.extend(h for h in hits if h not in names)
    return names
