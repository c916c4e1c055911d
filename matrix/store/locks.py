"""File locks for what two runs at once (a nightly timer and a person, say) must not do together:
set up or run the same environment, prepare the same artifacts, stage the worker. A lock dies
with its process (flock), so a killed run never blocks the next one.
"""

from __future__ import annotations

import re
from pathlib import Path

from filelock import FileLock


def cache_lock(cache_dir: Path, name: str) -> FileLock:
    """The lock `name` (e.g. "env-ort-1.17") of a cache folder, held while its user works."""
    folder = cache_dir / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / (re.sub(r"[^A-Za-z0-9_.+-]", "-", name) + ".lock"))


def run_lock(run_folder_parent: Path, run_id: str) -> FileLock:
    """Held by a run from start to end: a `<run id>.partial` folder whose lock is free was left by
    a run that died."""
    run_folder_parent.mkdir(parents=True, exist_ok=True)
    return FileLock(run_folder_parent / f".{run_id}.lock")


def is_free(lock: FileLock) -> bool:
    try:
        lock.acquire(timeout=0)
    except TimeoutError:
        return False
    lock.release()
    return True


def held_cache_locks(cache_dir: Path) -> list[str]:
    """The names of the cache's locks some process holds now: a run or an investigation at work."""
    folder = cache_dir / "locks"
    return [path.stem for path in sorted(folder.glob("*.lock")) if not is_free(FileLock(path))] if folder.is_dir() else []
