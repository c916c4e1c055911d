"""One module per engine, each with `version()`, `device()` and `run(...)`; imported lazily so
an environment only needs the engine it runs."""

import importlib

MODULES = {"onnxruntime": "onnxruntime_engine", "tensorrt": "tensorrt_engine"}
# Whether a cell may be a fork of a supervisor that imported the engine (supervisor.py). onnxruntime
# on the CPU: yes (its thread pools start with a session, not at import). TensorRT: no, CUDA state
# must never cross a fork; its cells start as new interpreters. Not run on real TensorRT yet.
FORK_SAFE = {"onnxruntime": True, "tensorrt": False}


class Unsupported(Exception):
    """The engine cannot run this profile on this model: the cell is 'skipped', with this reason."""


def load_engine(name):
    if name not in MODULES:
        raise ValueError("unknown engine {!r}; known: {}".format(name, ", ".join(sorted(MODULES))))
    return importlib.import_module("." + MODULES[name], __name__)
