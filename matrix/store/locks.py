"""File locks for what two runs at once (a nightly timer and a person, say) must not do together:
set up or run the same environment, prepare the same artifacts, stage the worker. A lock dies
with its process (flock), so a killed run never blocks the next one. But a run that is stopped
(SIGSTOP, a suspended terminal job) keeps its locks: a lock held while artifacts are prepared is
waited for only as long as preparing them may take, an environment's only while its holder is not
stopped for longer than a cell may take, and the holder leaves a note beside it, so the run that
waits says for whom (`waiting for run pid 812 which is preparing bigloop`).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

POLL_S = 1.0  # how often a waiting run looks at the lock (and at its holder's note)
NOTE_SUFFIX = ".holder.json"  # beside `<name>.lock`: who holds it, for what


def cache_lock(cache_dir: Path, name: str) -> FileLock:
    """The lock `name` (e.g. "env-ort-1.17") of a cache folder, held while its user works."""
    folder = cache_dir / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / (re.sub(r"[^A-Za-z0-9_.+-]", "-", name) + ".lock"))


class LockWaitEnded(TimeoutError):
    """A lock still held when the wait allowed for it ended: `who` holds it (holder_words)."""

    def __init__(self, who: str, waited_s: float):
        self.who, self.waited_s = who, waited_s
        super().__init__(f"held by {who}; waited {waited_s:.0f} s for it")


STOPPED_WORDS = " (its process is stopped: SIGSTOP or a suspended job)"


def holder_words(lock: FileLock) -> tuple[str, bool]:
    """('run pid 812 which is preparing bigloop (its process is stopped …)', whether it is stopped):
    who holds `lock`, from the note its holder leaves ('another run' where there is none: it has
    only just taken it). The note names the holder's command: a `report` is no run (sweep 8 A9)."""
    try:
        note = json.loads(_note(lock).read_text())
        pid, what, command = int(note["pid"]), f" which is {note['doing']}", str(note.get("command", "run"))
        if note.get("host") != socket.gethostname():
            return f"{command} pid {pid} on {note.get('host')}{what}", False
    except (OSError, ValueError, TypeError, KeyError):
        # no note, or half of one: its holder has just taken the lock, or was stopped before it wrote
        # it wholly, which a waiter must still see (issue 41, sweep 8 A9)
        if (pid := _locking_pid(lock)) is None:
            return "another run", False
        what, command = "", "process"
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):  # a killed holder's note: someone else has just taken the lock
        return "another run", False
    stopped = state in ("T", "t")
    return f"{command} pid {pid}{what}" + (STOPPED_WORDS if stopped else ""), stopped


def _locking_pid(lock: FileLock) -> int | None:
    """The process holding `lock`'s flock, from Linux's /proc/locks (`3: FLOCK ADVISORY WRITE 1155
    fe:00:2146663 0 EOF`: pid, then device major:minor in hex and inode), or None."""
    try:
        stat = os.stat(lock.lock_file)
        device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
        for fields in (line.split() for line in Path("/proc/locks").read_text().splitlines()):
            if fields[1] == "FLOCK" and fields[5] == device:  # a waiter's line reads "-> FLOCK"
                return int(fields[4])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _note(lock: FileLock) -> Path:
    return Path(lock.lock_file).with_suffix(NOTE_SUFFIX)


def is_lock_file(path: Path) -> bool:
    """A lock of locks/, or the note its holder leaves beside it (a killed holder's stays)."""
    return path.suffix == ".lock" or path.name.endswith(NOTE_SUFFIX)


@contextmanager
def held_for(cache_dir: Path, name: str, doing: str, waiting: Callable[[str], None], wait_s: float = math.inf,
             stopped_s: float = math.inf, command: str = "run") -> Iterator[None]:
    """The lock `name`, with a note saying who holds it for what (`doing`: "preparing bigloop") and
    which trtmatrix `command` (an `explain` is no run: sweep 8 A9); while another holds it,
    `waiting(who)` is told each time who changes, and LockWaitEnded is raised after `wait_s`
    seconds, or once the holder has been stopped for `stopped_s` on end."""
    with held(cache_lock(cache_dir, name), doing, waiting, wait_s, stopped_s, command):
        yield


@contextmanager
def held(lock: FileLock, doing: str, waiting: Callable[[str], None], wait_s: float = math.inf,
         stopped_s: float = math.inf, command: str = "run") -> Iterator[None]:
    """`lock`, held as held_for holds a cache's: waited for saying for whom, with a note while held
    naming this process's `command` (trtmatrix's: run, report, explain…)."""
    said, started = None, time.monotonic()
    stopped_since = None
    while True:
        try:
            lock.acquire(timeout=POLL_S)
            break
        except Timeout:
            who, stopped = holder_words(lock)
            if who != said:
                waiting(said := who)
            now = time.monotonic()
            stopped_since = (stopped_since or now) if stopped else None
            if now - started >= wait_s or (stopped_since is not None and now - stopped_since >= stopped_s):
                raise LockWaitEnded(who, now - started) from None
    note = _note(lock)
    try:  # written in place (no temporary file left in locks/): a waiter reading half of it asks /proc/locks
        note.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                                    "doing": doing}))
        yield
    finally:
        note.unlink(missing_ok=True)
        lock.release()


def remove_dead_note(lock: FileLock) -> bool:
    """The note beside `lock` of a holder that died (kill -9 ends its lock, not its note), removed
    under the lock so that it is never a live holder's; False where the lock is held or cannot be
    taken (a folder that cannot be written). Issue 41, sweep 8 A1."""
    note = _note(lock)
    if not note.exists():
        return False
    try:
        lock.acquire(timeout=0)
    except (Timeout, OSError):
        return False
    try:
        note.unlink(missing_ok=True)
    finally:
        lock.release()
    return True


def remove_dead_notes(cache_dir: Path) -> list[str]:
    """The notes in the cache's locks/ whose holders died; the names of their locks."""
    notes = sorted((cache_dir / "locks").glob(f"*{NOTE_SUFFIX}"))
    return [note.name.removesuffix(NOTE_SUFFIX) for note in notes
            if remove_dead_note(FileLock(note.with_name(note.name.removesuffix(NOTE_SUFFIX) + ".lock")))]


# Held shared by every run and investigation from its first look at the cache to its end; `cache
# --free` takes it alone, so it never frees a cache under a run that holds no other lock yet (between
# its plan and its environments' locks: issue 41, sweep 8 A6).
IN_USE = "cache-in-use"


# How long a run waits for a `cache --free` that is stopped (SIGSTOP, Ctrl-Z) before it gives up.
FREE_STOPPED_S = 10


class CacheBeingFreed(LockWaitEnded):
    def __str__(self) -> str:
        return (f"the cache is being freed by `trtmatrix cache --free`, {self.who}, stopped for "
                f"{FREE_STOPPED_S} s: let it go on (kill -CONT) or end it, then run again")


@contextmanager
def cache_in_use(cache_dir: Path) -> Iterator[None]:
    """The cache's IN_USE lock, shared with other runs; waited for while a `cache --free` frees,
    saying so, and not for ever for one that is stopped (issue 41, sweep 9 B5)."""
    lock = cache_lock(cache_dir, IN_USE)
    fd = os.open(lock.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        said, started, stopped_since = None, time.monotonic(), None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                who, stopped = holder_words(lock)
                if who != said:
                    print(f"waiting for `trtmatrix cache --free`, {(said := who)}, to finish freeing the cache",
                          file=sys.stderr, flush=True)
                now = time.monotonic()
                stopped_since = (stopped_since or now) if stopped else None
                if stopped_since is not None and now - stopped_since >= FREE_STOPPED_S:
                    raise CacheBeingFreed(who, now - started) from None
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)


def run_lock(run_folder_parent: Path, run_id: str) -> FileLock:
    """Held by a run from start to end: a `<run id>.partial` folder whose lock is free was left by
    a run that died."""
    run_folder_parent.mkdir(parents=True, exist_ok=True)
    return FileLock(run_folder_parent / f".{run_id}.lock")


def rejudge_lock(run_dir: Path) -> FileLock:
    """Held while `report` re-judges a stored run in place, so a second re-judging waits and the run's
    files are always all from one of them (issue 41, sweep 7 N10). Inside the run folder: it goes with it."""
    return FileLock(run_dir / ".rejudging.lock")


@contextmanager
def held_if_free(lock: FileLock) -> Iterator[bool]:
    """The lock held for the block where nobody holds it (True), else not taken (False): what a dead
    holder left is removed under it, and never a live one's."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


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
