"""The `trtmatrix` command: a thin layer, each command calling the library and printing. One module
per group of commands (typer's larger apps), each command's options beside its help; this module is
the entry point: how a command ends (its exit status, a stop signal, trtmatrix's own failure)."""

from __future__ import annotations

import signal

# A stop that comes while the imports below run (a third of a second) is kept, and acted on as
# soon as main() can: a run started with `cmd &` from a script inherits SIGINT ignored, and a
# kill -INT in that window was lost.
_EARLY_STOPS: list[int] = []
for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_signum, lambda signum, _frame: _EARLY_STOPS.append(signum))

from ..bytecode import keep_own_bytecode  # noqa: E402

keep_own_bytecode()  # before the imports below: a host without bytecode compiles them at every start

import atexit  # noqa: E402
import errno
import os
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path

from ..config import ConfigError  # noqa: E402
from ..store.locks import CacheBeingFreed  # noqa: E402
from ..stops import STOPPING, Stopped, adopt_orphans, end_descendants, remove_temporaries, stop_requested, stop_signal

# The commands, registered in the order `trtmatrix --help` lists them.
from . import running, runs, investigating, cache, tolerances, images  # noqa: E402,F401,I001
from .common import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, _say_error, app  # noqa: E402

__all__ = ["app", "main"]


# The commands that run cells (a stop keeps those that finished, for the next run to reuse).
CELL_COMMANDS = ("run", "explain", "precision", "repro", "bisect")


def _raise_stopped(signum, frame):
    stop_requested(signum)  # before anything else: no thread reports a cell this stop breaks
    if _importing(frame):  # an exception raised inside an extension module's init aborts the process
        _stop(Stopped(signum))
    raise Stopped(signum)


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _stop(exc: Stopped) -> None:
    """End a stopped command at once: every worker and container stopped, what it was making
    removed, the processes it started ended, one line, exit 128 + signal. Environment threads
    still setting up are not waited for (os._exit): what they finished is in the result cache, and
    the next run resumes from there."""
    from ..environments.backend import stop_all

    STOPPING.set()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second stop does not break this one
        signal.signal(signum, signal.SIG_IGN)
    # Environment threads may still turn a finished cell into a progress line: none may follow
    # the stop line, which must be the last thing the run says. rich checks `quiet` where it
    # writes, under this lock: no line is half-written when it flips. Not imported yet (the
    # signal came during the imports), or half imported: there is no progress line to silence.
    progress = getattr(sys.modules.get(f"{__package__}.report.console"), "console", None)
    if progress is not None:
        with progress._lock:
            progress.quiet = True
    stop_all()
    remove_temporaries()
    end_descendants()
    _flush()
    # The process's own stderr: the stop may come while a case file's output is being captured.
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "")
    said = "finished cells are kept in the cache; run again to resume" if command in CELL_COMMANDS \
        else "nothing it was writing is left half-written"
    print(f"stopped by {signal.Signals(exc.signum).name}: {said}", file=sys.__stderr__, flush=True)
    os._exit(128 + exc.signum)


def main() -> None:
    """The entry point: a failure of trtmatrix itself (not of a cell, not bad input) is one line
    naming the file that holds the traceback, and exit status 3; --debug prints the traceback.
    A stop signal at any moment is one line and exit 128 + its number."""
    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # stops end cleanly from here on
        signal.signal(signum, _raise_stopped)
    if _EARLY_STOPS:
        stop_requested(_EARLY_STOPS[0])
        _stop(Stopped(_EARLY_STOPS[0]))
    adopt_orphans()
    try:
        _leave(_command(debug))
    except Stopped as exc:
        _stop(exc)


def _command(debug: bool) -> int:
    """The command's exit status."""
    try:
        app()
    except SystemExit as exc:  # typer ends every command with one (usage errors: 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # typer has handled usage errors (2) and Exit already
        if (signum := stop_signal()) is not None:  # Ray's Cython turns the Stopped raised in its wait into a SystemError
            raise Stopped(signum) from exc
        bad = _bad_input(exc)
        if bad and not debug:
            _say_error(bad)
            return EXIT_USAGE
        if debug:
            traceback.print_exc()
            return EXIT_INTERNAL
        _say_error(f"trtmatrix failed: {type(exc).__name__}: {exc} ({_save_traceback()}; --debug prints it)")
        return EXIT_INTERNAL
    return EXIT_OK


def _leave(code: int) -> None:
    """End the process now that the command is done: its exit handlers run, and then neither a
    thread a case file left running (an interpreter's exit would wait for it forever) nor a
    process it started (it would outlive the run) keeps anything alive."""
    atexit._run_exitfuncs()
    remove_temporaries()
    end_descendants()
    _flush()
    os._exit(code)


def _flush() -> None:
    """What is buffered, written before os._exit (a reader that went away takes nothing)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or None: a descriptor closed at the start
            pass


# A path that is not what it must be (a file for a folder, a dangling link, a loop, no permission):
# bad input, named. A full disk or an I/O error stays trtmatrix's own failure (exit 3).
BAD_PATH_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.EACCES, errno.EPERM, errno.EEXIST,
                   errno.EROFS, errno.ENAMETOOLONG}


def _bad_input(exc: Exception) -> str | None:
    """The one line for bad input met after the plan was built (a damaged stored run, a path that
    is not what it must be), or None for a failure of trtmatrix itself."""
    if isinstance(exc, (ConfigError, CacheBeingFreed)):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in BAD_PATH_ERRNOS and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return None


KEPT_TRACEBACKS = 10  # the newest stay for a bug report; older ones are removed as a new one is written


def _save_traceback() -> str:
    folder = Path(tempfile.gettempdir())
    path = folder / f"trtmatrix-{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}.traceback"
    try:
        path.write_text(traceback.format_exc())
    except OSError as exc:
        return f"the traceback could not be written to {path}: {exc.strerror}"
    for old in sorted(folder.glob("trtmatrix-*.traceback"))[:-KEPT_TRACEBACKS]:  # named by time: oldest first
        old.unlink(missing_ok=True)
    return f"traceback in {path}"
