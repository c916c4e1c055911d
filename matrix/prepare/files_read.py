"""The files a case file's code reads through Python while it is imported and built (weights.npy
beside it, a tokenizer's JSON), and the folders it lists (a glob over shards): kept with its
artifacts, each file with its digest and each folder with its names, so that one that changed since
prepares the case again instead of judging the old export (issue 41, third sweep, 21; fourth, 8).
What it asks of the environment (a variable, whether a file exists) is not seen: `run --reprepare`
prepares a case file's cases again. The case file and the modules beside it are in the artifacts' key already
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
_read: set[str] = set()  # every file opened for reading, and folder listed, while recording, in this process
LISTINGS = ("os.listdir", "os.scandir")  # a glob over shards lists their folder
_recording = [False]
_installed = [False]


def _see(event: str, args: tuple) -> None:
    if not _recording[0]:
        return
    if event == "open":
        path, _, flags = args
        if isinstance(path, (str, bytes, os.PathLike)) and not (flags or 0) & _WRITES:
            _read.add(os.path.abspath(os.fsdecode(path)))
    elif event in LISTINGS and isinstance(args[0], (str, bytes, os.PathLike, type(None))) and not _by_import():
        _read.add(os.path.abspath(os.fsdecode(args[0] if args[0] is not None else ".")))


def _by_import() -> bool:
    """A listing the import system makes (it lists each folder on sys.path once): not the case's."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


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


def _listing(folder: str) -> list[str]:
    return sorted(os.listdir(folder))


def files_read(skip: Path) -> dict[str, dict]:
    """{path: {"identity", "sha256"}} of the regular files read so far, and {folder: {"listing"}} of
    the folders listed, but those under `skip` (the cache) or the environment's."""
    environment = _environment() + (os.path.join(str(skip), ""),)
    kept = {}
    for path in sorted(_read):
        if path.startswith(environment) or _metadata(path):
            continue
        if os.path.isdir(path):
            kept[path] = {"listing": _listing(path)}
        elif os.path.isfile(path):
            kept[path] = {"identity": file_identity(Path(path)), "sha256": hash_files([Path(path)])}
    return kept


def changed_since(kept: dict) -> str | None:
    """The first file or folder of files_read's answer that is not what was read then (gone, other
    bytes, other names in it)."""
    for path, entry in kept.items():
        try:
            if "listing" in entry:
                if _listing(path) == entry["listing"]:
                    continue
            elif file_identity(Path(path)) == entry["identity"] or hash_files([Path(path)]) == entry["sha256"]:
                continue
        except (OSError, TypeError, KeyError):
            pass
        return path
    return None
