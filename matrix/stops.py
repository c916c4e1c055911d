"""A stop (Ctrl-C, SIGTERM, SIGHUP) and what must not outlive the process however it ends.

The CLI turns each of those signals into `Stopped` in the main thread and sets STOPPING first, so
that no thread reports a cell its stop broke as a finding. Whatever way the process ends (a
normal end, a stop, a full disk), what it was making is removed (`removed_at_end`: a run's lock
file, a prepare's half-made artifacts) and the processes it started and did not end — a case
file's stray fork or subprocess — are ended (`end_descendants`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# Set when a stop begins: workers no longer start, and progress is no longer reported.
STOPPING = threading.Event()
_signals: list[int] = []  # the stop signals that came, first first
_temporary: set[Path] = set()
_lock = threading.Lock()
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


class Stopped(BaseException):
    """A stop signal, raised in the main thread like Ctrl-C's KeyboardInterrupt (a BaseException,
    so no `except Exception` swallows it, and a case file's own `raise KeyboardInterrupt` stays
    the case file's fault)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def stop_requested(signum: int) -> None:
    """A stop signal came (the CLI's handler, first thing): said before anything reacts to it."""
    _signals.append(signum)
    STOPPING.set()


def stop_signal() -> int | None:
    """The stop signal that came, if one did: whatever fails after it is the stop's doing (a library
    that turns the Stopped raised inside it into an error of its own, say)."""
    return _signals[0] if _signals else None


@contextmanager
def removed_at_end(path: Path) -> Iterator[Path]:
    """`path` (a file or folder being made) is gone when the block ends, however it ends; and when
    the process is stopped without unwinding (os._exit), remove_temporaries() removes it."""
    with _lock:
        _temporary.add(path)
    try:
        yield path
    finally:
        _remove(path)
        with _lock:
            _temporary.discard(path)


def remove_temporaries() -> None:
    """Everything still inside a removed_at_end block: the process is about to end."""
    with _lock:
        paths = list(_temporary)
    for path in paths:
        _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether process `pid` still runs. A zombie is dead: a Ray worker killed by its raylet stays
    one until it is reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _parents() -> dict[int, int]:
    """{pid: parent pid} of every process this user can see (Linux /proc; elsewhere, none)."""
    found = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                found[int(entry.name)] = int(fh.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


def descendants(pid: int | None = None) -> list[int]:
    """The processes below `pid` (default: this one), children first."""
    parents = _parents()
    found, frontier = [], [pid or os.getpid()]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier and child not in found]
        found += children
        frontier = children
    return found


def adopt_orphans() -> None:
    """Linux: processes started below this one whose parent ends (a daemon's double fork) become
    this process's children instead of init's, so that end_descendants finds them too."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):  # not Linux
        pass


def end_descendants() -> list[int]:
    """Kill every process this one started that is still there (SIGKILL): when trtmatrix ends,
    its own workers are already stopped, so what is left was started by code it ran (a case file
    that forked, or started a server and left it). Returns their ids."""
    left = descendants()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return left


@dataclass
class Apart:
    """How a child process run by run_apart ended: its exit status (-N: killed by signal N; None:
    still running at its deadline, then killed) and what it wrote."""

    returncode: int | None
    out: str
    err: str


APART_PARENT = "TRTMATRIX_APART_PARENT"  # run_apart's child: the pid of the trtmatrix that started it
# In the environment of a worker, of a run_apart child and of what they start: "<pid>:<start time>"
# of the trtmatrix that started them, so that a later run finds what one that died left, a process
# in a session of its own included (environments/venv.py remove_dead_workers).
ORCHESTRATOR = "TRTMATRIX_ORCHESTRATOR"


def process_mark(pid: int) -> str | None:
    """"<pid>:<start time>" of a live process (its start time tells it from a later one of the same
    pid), or None where it is gone or there is no /proc (not Linux)."""
    try:
        return f"{pid}:{Path(f'/proc/{pid}/stat').read_text().rpartition(')')[2].split()[19]}"
    except (OSError, IndexError):
        return None


def end_with_parent() -> None:
    """In a run_apart child: once the trtmatrix that started it is gone (kill -9 leaves it no time to
    end its children), this process group and every process below it end too, rather than run on,
    orphaned, at full CPU. What it left after it ended is the next run's (ORCHESTRATOR)."""
    parent = int(os.environ.get(APART_PARENT) or 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        end_descendants()  # what the case's code started in a session of its own (a helper server)
        os.killpg(0, signal.SIGKILL)  # the group: what the case's code started, too

    if parent:
        adopt_orphans()  # a daemon's double fork stays below this process, for end_descendants
        threading.Thread(target=watch, daemon=True).start()


def run_apart(module: str, args: list[str], timeout_s: float, grace_s: float = 5.0) -> Apart:
    """`python -m module args` in a session of its own, for code trtmatrix must not run in its own
    process (a case file's): its output goes to files, so a process it leaves holds no pipe open;
    at its end, its deadline or a stop here, its whole process group is ended (SIGTERM, SIGKILL
    after `grace_s`), so nothing of it outlives the call."""
    import matrix

    path = os.pathsep.join(filter(None, [str(Path(matrix.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # No stdin: a case file's input() fails at once (EOFError) instead of waiting out the deadline.
        child = subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=err, text=True, start_new_session=True,
                                 env={**os.environ, "PYTHONPATH": path, APART_PARENT: str(os.getpid()),
                                      ORCHESTRATOR: process_mark(os.getpid()) or ""})
        finished = True
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            finished = False
        finally:
            for signum in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(child.pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    child.wait(grace_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        out.seek(0)
        err.seek(0)
        return Apart(child.returncode if finished else None, out.read(), err.read())
