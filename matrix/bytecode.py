"""Bytecode for the command itself on a host that asks for none beside its packages.

A host whose environment sets PYTHONDONTWRITEBYTECODE (an H100 host was lent so) compiles every
module from source at every start: pandas, numpy, onnx, pydantic and trtmatrix's own, each time
the command runs, before its first cell (issue 43: part of the fixed cost every GPU count pays).
As the workers do (environments/venv.py, PYTHONPYCACHEPREFIX), the command keeps its bytecode in
trtmatrix's own folder instead: nothing is written beside the packages, as the variable asks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def keep_own_bytecode() -> None:
    """Called first by the command, before its heavy imports."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.pycache_prefix:
        return
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    sys.pycache_prefix = str(home / "trtmatrix" / "pycache")
    sys.dont_write_bytecode = False
