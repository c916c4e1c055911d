"""Which NVIDIA GPUs this host has, as nvidia-smi sees them (none on CPU-only machines)."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache


@cache
def host_gpus() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return ()
    return tuple(line.strip() for line in listing.splitlines() if line.strip())


def gpu_missing_reason() -> str | None:
    if not shutil.which("nvidia-smi"):
        return "no NVIDIA GPU on this host (nvidia-smi not found)"
    if not host_gpus():
        return "no NVIDIA GPU on this host (nvidia-smi lists none)"
    return None
