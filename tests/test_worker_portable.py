"""The worker must run on the oldest Python of an NGC image with only numpy and the engine."""

import ast
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "matrix" / "worker"
# numpy and the engines; pynvml (nvidia-ml-py) is optional: probe.py falls back to nvidia-smi.
ALLOWED_THIRD_PARTY = {"numpy", "onnxruntime", "tensorrt", "tensorrt_rtx", "polygraphy", "torch", "pynvml"}
FILES = sorted(WORKER.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(WORKER)))
def test_python38_syntax_and_imports(path):
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots = {node.module.split(".")[0]}
        else:
            continue
        bad = roots - set(sys.stdlib_module_names) - ALLOWED_THIRD_PARTY
        assert not bad, f"{path.name} imports {bad}: the worker may use only stdlib, numpy and engines"
