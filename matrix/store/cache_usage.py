"""What trtmatrix's cache holds, part by part, and freeing a part (`trtmatrix cache`). Every part
is made again when needed: freeing one costs time on the next run, never a result (runs keep
their own outputs in their run folders)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Each part of the cache, with what freeing it costs.
PARTS = {
    "artifacts": "prepared models, inputs and references: prepared again by the next run that needs them",
    "results": "each cell's outputs, reused by later runs: those cells run again",
    "venvs": "the venv environments: made again by the next run (seconds to minutes each)",
    "investigations": "what a stopped explain or repro left behind (a finished one removes its own)",
    "worker": "the worker as environments mount it: staged again at the next run",
    "jobs": "environment jobs' inputs and logs",
    "timing": "measured durations the scheduler orders environments by",
    "case-index": "which cases a case file declares, read again from the files",
}


def folder_bytes(path: Path) -> int:
    """Bytes of the files under `path` (links not followed, each file once)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while walking
                continue
    return total


def usage(cache: Path) -> dict[str, int]:
    """{part: bytes} of the cache's parts that exist."""
    return {part: folder_bytes(cache / part) for part in PARTS if (cache / part).is_dir()}


def free(cache: Path, parts: list[str]) -> dict[str, int]:
    """Remove the named parts ("all": every one); {part: bytes freed}."""
    chosen = list(PARTS) if "all" in parts else parts
    freed = {}
    for part in chosen:
        if part not in PARTS:
            raise ValueError(f"{part!r} is no part of the cache: one of {', '.join(PARTS)}, or all")
        if (cache / part).is_dir():
            freed[part] = folder_bytes(cache / part)
            shutil.rmtree(cache / part, ignore_errors=True)
    return freed


def size_text(count: float) -> str:
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("KB", "MB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} GB"
