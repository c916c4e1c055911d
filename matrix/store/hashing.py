"""Content keys: stable hashes of what determines a result, so equal keys mean reusable results."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable


def hash_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def hash_files(paths: Iterable[Path], root: Path | None = None) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root) if root else path.name).encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def remembered_digest(path: Path, memo: Path) -> str:
    """hash_files([path]), remembered (see remembered). A gigabyte model costs a second to hash, at
    every run that asks (the BGE reranker's, twice a re-run)."""
    return remembered(path, memo, lambda: hash_files([path]), "sha256")


def remembered(path: Path, memo: Path, compute: Callable[[], Any], field: str = "value") -> Any:
    """compute()'s JSON answer about the file at `path`, remembered in the file `memo` with the
    file's identity (device, inode, size, modification time), so that a file rewritten or replaced
    is asked again."""
    stat = path.stat()
    identity = [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns]
    try:
        kept = json.loads(memo.read_text())
        if kept["identity"] == identity:
            return kept[field]
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or of another shape
        pass
    answer = compute()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"identity": identity, field: answer}))
        tmp.replace(memo)
    except OSError:  # a read-only cache: asked again next time
        pass
    return answer
