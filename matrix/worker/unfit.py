"""A supervisor that cannot run in its environment (an image without numpy, or without the engine's
own package) says why in one event line, {"event": "unfit", "error": ...}, runs no cell, and exits
UNFIT: the host gives every cell that line, naming the environment, instead of a traceback each."""

import json
import platform
import sys

UNFIT = 3


def unfit(exc):
    """One line for the host: what this interpreter lacks."""
    error = str(exc) if isinstance(exc, ModuleNotFoundError) else "{}: {}".format(type(exc).__name__, exc)
    print(json.dumps({"event": "unfit", "error": error, "python": platform.python_version(),
                      "executable": sys.executable}), flush=True)
    return UNFIT
