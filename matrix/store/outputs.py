"""Files a person names (`-o`, `--output`, `--junit-xml`, and the reports folder's pages): checked
before the work that makes them, and written without replacing what is not theirs to replace.

- a regular file, or a name not there yet: replaced atomically (a temporary file beside it,
  renamed over it), so a reader never sees half of it;
- a symlink: followed; its target is replaced atomically and the link stays a link;
- a FIFO, a character device, or anything under /dev or /proc (`/dev/stdout`): written into
  (appended to), as a shell's `>>` would, never renamed over;
- anything else (a folder, a socket, a block device): refused with one line.

An error names the path the person gave, never the temporary file.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable

from . import replace_atomically

DIRECT = ("/dev/", "/proc/")  # streams by nature, whatever they resolve to (/dev/stdout → a file of the shell's)


def _kind(path: Path) -> tuple[str, str]:
    """("new" | "file" | "stream", "") or ("refused", why, said after the path)."""
    if os.path.abspath(path).startswith(DIRECT):
        return "stream", ""
    try:
        mode = os.stat(path).st_mode  # through symlinks
    except FileNotFoundError:  # nothing there yet, or a link to nothing yet
        return "new", ""
    except OSError as exc:
        return "refused", f": {exc.strerror}"
    if stat.S_ISREG(mode):
        return "file", ""
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream", ""
    if stat.S_ISDIR(mode):
        return "refused", " is a folder, not a file"
    what = "a socket" if stat.S_ISSOCK(mode) else "a block device" if stat.S_ISBLK(mode) else "a special file"
    return "refused", f" is {what}: an output goes to a file, a FIFO or a character device"


def _target(path: Path) -> Path:
    """Where a file output lands: a symlink's target (a chain followed to its end), else `path`."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def output_problem(path: Path | str) -> str | None:
    """Why an output cannot be written at `path`, or None."""
    path = Path(path)
    kind, why = _kind(path)
    if kind == "refused":
        return f"{path}{why}"
    if kind == "stream":
        return None if os.access(path, os.W_OK) else f"{path} cannot be written (permission denied)"
    target = _target(path)
    parent = Path(os.path.abspath(target)).parent
    if not parent.is_dir():
        return f"no folder {parent}"
    if kind == "file" and (parent / "run.json").is_file():  # a stored run's own file: the run would be damaged
        return f"{path} is a file of the stored run {parent.name}: write elsewhere"
    if not os.access(parent, os.W_OK | os.X_OK) or (kind == "file" and not os.access(target, os.W_OK)):
        return f"{path} cannot be written (permission denied)"
    return None


def write_output(path: Path | str, write: Callable[[Path], None]) -> None:
    """`write(p)` makes the output at p: a temporary file renamed over the target, or the stream
    itself. OSError naming `path` when it cannot."""
    path = Path(path)
    kind, why = _kind(path)
    if kind == "refused":
        raise OSError(errno.EINVAL, why.removeprefix(": ").strip(), str(path))
    try:
        if kind == "stream":
            _into_stream(path, write)
        else:
            replace_atomically(_target(path), write)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def _into_stream(path: Path, write: Callable[[Path], None]) -> None:
    """Made in a temporary file (a parquet writer seeks, a pipe cannot), then its bytes written into
    the stream, appended: a stream is never truncated (`/dev/stdout` of a `>>`)."""
    with tempfile.TemporaryDirectory(prefix="trtmatrix-output-") as folder:
        made = Path(folder) / path.name
        write(made)
        with made.open("rb") as source, path.open("ab") as stream:
            shutil.copyfileobj(source, stream)


def write_text_output(path: Path | str, text: str) -> None:
    write_output(path, lambda p: p.write_text(text))
