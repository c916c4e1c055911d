"""Turn "Softmax" or "LayerNormalization_*" into the exact node names of a real graph.

Seed 004: trtexec did not honour wildcards in --layerPrecisions. Resolving patterns to exact
names before anything is built makes the selection visible and checkable.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import onnx


class NoMatch(ValueError):
    pass


def resolve_nodes(model: onnx.ModelProto, patterns: tuple[str, ...] | list[str]) -> list[str]:
    """A pattern matches nodes whose op type equals it or whose name matches it as a glob."""
    names: list[str] = []
    for pattern in patterns:
        hits = [n.name for n in model.graph.node if n.op_type == pattern or fnmatchcase(n.name, pattern)]
        if not hits:
            raise NoMatch(f"keep_fp32 pattern {pattern!r} matches no node (op type or name) in the model")
        names.extend(h for h in hits if h not in names)
    return names
