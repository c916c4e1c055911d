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


def remembered_digests(paths: list[Path], memo: Path) -> dict[str, dict[str, str]]:
    """{file name: {"sha256": hash_files([path]), "file": worker.files.file_digest(path)}} of files
    of one folder, remembered together in the file `memo`, each with its file's identity (see
    remembered): a re-run reads one memo for them, and does not hash a gigabyte model again (the BGE
    reranker's, twice a re-run), nor a run folder's copy of a file to list its digest. Asked again in
    the same process, the files' identities are enough (a run asks for each artifact's twice)."""
    identities = [file_identity(path) for path in paths]
    if (seen := _SEEN.get(memo)) and seen[0] == identities:
        return seen[1]
    try:
        kept = json.loads(memo.read_text())
    except (OSError, ValueError):  # none yet
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    digests, entries = {}, {}
    for path, identity in zip(paths, identities):
        entry = kept.get(path.name)
        if not (isinstance(entry, dict) and entry.get("identity") == identity
                and all(isinstance(entry.get(kind), str) for kind in ("sha256", "file"))):
            entry = {"identity": identity, **_both_digests(path)}
        entries[path.name] = entry
        digests[path.name] = {"sha256": entry["sha256"], "file": entry["file"]}
    if entries != kept:
        _keep(memo, entries)
    _SEEN[memo] = (identities, digests)
    return digests


_SEEN: dict[Path, tuple[list, dict]] = {}  # remembered_digests' answers in this process, by memo


def _both_digests(path: Path) -> dict[str, str]:
    """hash_files([path]) and file_digest(path) from one reading of the file."""
    named, plain = hashlib.sha256(path.name.encode()), hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            named.update(block)
            plain.update(block)
    return {"sha256": named.hexdigest(), "file": "sha256:" + plain.hexdigest()}


def remembered(path: Path, memo: Path, compute: Callable[[], Any], field: str = "value") -> Any:
    """compute()'s JSON answer about the file at `path`, remembered in the file `memo` with the
    file's identity (device, inode, size, modification time), so that a file rewritten or replaced
    is asked again; and sealed, so that a memo edited since is asked again too (issue 41, sweep 16 J18:
    a fault pattern's reach, edited, turned a fail into an xfail)."""
    identity = file_identity(path)
    try:
        kept = json.loads(memo.read_text())
        if kept["identity"] == identity and kept.get("seal") == _seal(identity, kept[field]):
            return kept[field]
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or of another shape
        pass
    answer = compute()
    _keep(memo, {"identity": identity, field: answer, "seal": _seal(identity, answer)})
    return answer


def _seal(identity: list[int], answer: Any) -> str:
    return hash_json([identity, answer])


def file_identity(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns]


def _keep(memo: Path, value: Any) -> None:
    """`value` as JSON in `memo`, whole or not at all; a read-only cache: asked again next time."""
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(value))
        tmp.replace(memo)
    except OSError:
        pass
