"""Which NVIDIA GPUs this host has, as nvidia-smi sees them (none on CPU-only machines)."""

from __future__ import annotations

import queue
import shutil
import subprocess
from contextlib import contextmanager
from functools import cache
from typing import Iterator


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


class GpuPool:
    """One environment per GPU at a time: a GPU environment leases an index and gives it back."""

    def __init__(self, count: int):
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(count):
            self._free.put(index)

    @contextmanager
    def lease(self, needed: bool) -> Iterator[int | None]:
        if not needed:
            yield None
            return
        index = self._free.get()
        try:
            yield index
        finally:
            self._free.put(index)
