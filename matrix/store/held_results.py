"""A run's own hard links to the result folders its cells used, made while it still held their
environment's lock (executors/unit.py). Another run may run those cells again the moment the lock
is free — a crash or timeout is never reused, `--no-reuse` runs every cell — and empty the cache's
folder while this run still judges and stores the result it got: this run reads its own links,
which no other run touches. (Issue 41: of two runs started together, one failed to store a
cell.log the other had just removed; with `--no-reuse` it could have stored the other's files.)
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock

from ..stops import removed_at_end
from ..worker.files import RESULT
from . import CELL_FILES, _link_or_copy
from .locks import held_if_free

HELD = "held"  # the cache's folder of runs' links: held/<run id>/<environment>/<result key>/


def held_folder(cache_dir: Path, run_id: str) -> Path:
    return cache_dir / HELD / run_id


def hold(directory: Path, folder: Path) -> Path:
    """The files of `directory` a run reads (its result, outputs and log), linked under the run's
    held `folder`; their folder there."""
    kept = folder / directory.parent.name / directory.name
    kept.mkdir(parents=True, exist_ok=True)
    for name in (RESULT, *CELL_FILES):
        if (directory / name).is_file() and not (kept / name).exists():
            _link_or_copy(directory / name, kept / name)
    return kept


@contextmanager
def holding(cache_dir: Path, run_id: str) -> Iterator[Path]:
    """The run's held folder, under a lock of its own while the block runs and removed however it
    ends; those of runs that died (their lock free: kill -9) are removed first."""
    root = cache_dir / HELD
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(root / f"{run_id}.lock")
    with removed_at_end(Path(lock.lock_file)), lock, removed_at_end(held_folder(cache_dir, run_id)) as folder:
        _remove_dead(root, run_id)
        yield folder


def _remove_dead(root: Path, own: str) -> None:
    for run_id in sorted({path.name.removesuffix(".lock") for path in root.iterdir()} - {own}):
        lock = FileLock(root / f"{run_id}.lock")
        with held_if_free(lock) as dead:  # else a live run's
            if dead:
                shutil.rmtree(root / run_id, ignore_errors=True)
                Path(lock.lock_file).unlink(missing_ok=True)
