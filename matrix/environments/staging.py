"""Put the worker where an environment can import it without installing anything.

The worker package is copied to `<cache>/worker/<hash>/trtmatrix_worker/`; an environment gets
that folder on PYTHONPATH (venv) or mounted read-only (container). The hash is part of every
cell's content key, so changing the worker re-runs cells. Polygraphy (pure Python) is staged in
`_fallback/` beside it: the TensorRT engine appends that to sys.path, so an image's own
Polygraphy wins and images without one still work.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from functools import cache
from pathlib import Path

WORKER_SOURCE = Path(__file__).parents[1] / "worker"
PACKAGE_NAME = "trtmatrix_worker"
FALLBACK = "_fallback"
FALLBACK_PACKAGES = ("polygraphy",)


def _worker_files() -> list[Path]:
    return [p for p in WORKER_SOURCE.rglob("*.py") if "__pycache__" not in p.parts]


@cache
def worker_hash() -> str:
    from ..store.hashing import hash_files, hash_json

    versions = [f"{name}=={importlib.metadata.version(name)}" for name in FALLBACK_PACKAGES]
    return hash_json([hash_files(_worker_files(), root=WORKER_SOURCE), versions])


def stage_worker(cache_dir: Path) -> Path:
    """Return the folder to put on PYTHONPATH; `python -m trtmatrix_worker` then works there. A staged
    copy whose files are not the worker's (a disk that filled, a file cut short) is staged again, said
    in one line: every cell errored on it, run after run (issue 41, sweep 16 J6)."""
    from ..store.hashing import hash_files

    home = cache_dir / "worker" / worker_hash()[:16]
    staged = home / PACKAGE_NAME
    if staged.is_dir():
        try:
            damaged = hash_files([p for p in staged.rglob("*.py") if "__pycache__" not in p.parts], root=staged) != \
                hash_files(_worker_files(), root=WORKER_SOURCE)
        except OSError:
            damaged = True
        if damaged:
            print(f"warning: the staged worker {staged} is not trtmatrix's worker (a file differs); staged again",
                  file=sys.stderr, flush=True)
            aside = home.with_name(f"{home.name}.damaged-{os.getpid()}")
            home.rename(aside)  # another run still reading it keeps its files until it ends
            shutil.rmtree(aside, ignore_errors=True)
    if not staged.is_dir():
        tmp = home.with_name(home.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _copy(_worker_files(), WORKER_SOURCE, tmp / PACKAGE_NAME)
        for name in FALLBACK_PACKAGES:
            source = Path(importlib.util.find_spec(name).submodule_search_locations[0])
            files = [p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
            _copy(files, source, tmp / FALLBACK / name)
        tmp.rename(home)
    return home


def _copy(files: list[Path], source: Path, target: Path) -> None:
    """File by file, so that the first failure (a full disk) is an OSError naming its file, not
    shutil.copytree's one error listing every file it could not copy."""
    for path in files:
        to = target / path.relative_to(source)
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, to)
