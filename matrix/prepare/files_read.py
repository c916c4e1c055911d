"""The files a case file's code reads through Python while it is imported and built (weights.npy
beside it, a tokenizer's JSON): kept with its artifacts, each with its digest, so that a file that
changed since prepares the case again instead of judging the old export (issue 41, third sweep,
21). The case file and the modules beside it are in the artifacts' key already
(sources/case_files.local_modules); files of Python's installation are the environment's, and
what native code opens by itself (safetensors' reader) is not seen here.
"""

from __future__ import annotations

import os
import site
import sys
from contextlib import contextmanager
from pathlib import Path

from ..store.hashing import file_identity, hash_files

_WRITES = os.O_WRONLY | os.O_RDWR
_read: set[str] = set()  # every file opened for reading while recording, in this process
_recording = [False]
_installed = [False]


def _see(event: str, args: tuple) -> None:
    if _recording[0] and event == "open":
        path, _, flags = args
        if isinstance(path, (str, bytes, os.PathLike)) and not (flags or 0) & _WRITES:
            _read.add(os.path.abspath(os.fsdecode(path)))


@contextmanager
def recording():
    """Files opened for reading meanwhile are remembered (an audit hook: it stays for the process)."""
    if not _installed[0]:
        sys.addaudithook(_see)
        _installed[0] = True
    _recording[0] = True
    try:
        yield
    finally:
        _recording[0] = False


def _environment() -> tuple[str, ...]:
    """Folders whose files are Python's, trtmatrix's or the system's, not the case's."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, site.getusersitepackages(), *site.getsitepackages(),
               str(Path(__file__).resolve().parents[1]), "/proc", "/sys", "/dev"}
    return tuple(os.path.join(folder, "") for folder in folders)


def _metadata(path: str) -> bool:
    """Bytecode, and installed packages' metadata (importlib.metadata reads an editable install's
    entry points, which its next install rewrites)."""
    return any(part == "__pycache__" or part.endswith((".egg-info", ".dist-info")) for part in Path(path).parts)


def files_read(skip: Path) -> dict[str, dict]:
    """{path: {"identity", "sha256"}} of the regular files read so far, but those under `skip` (the
    cache) or the environment's."""
    environment = _environment() + (os.path.join(str(skip), ""),)
    kept = {}
    for path in sorted(_read):
        if path.startswith(environment) or _metadata(path) or not os.path.isfile(path):
            continue
        kept[path] = {"identity": file_identity(Path(path)), "sha256": hash_files([Path(path)])}
    return kept


def changed_since(kept: dict) -> str | None:
    """The first file of files_read's answer that is not what was read then (gone, or other bytes)."""
    for path, entry in kept.items():
        try:
            if file_identity(Path(path)) == entry["identity"] or hash_files([Path(path)]) == entry["sha256"]:
                continue
        except (OSError, TypeError, KeyError):
            pass
        return path
    return None
