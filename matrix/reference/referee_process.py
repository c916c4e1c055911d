"""The referee's onnxruntime runs in a process of its own, started once and again after a crash: a
model onnxruntime dies on (SIGFPE of INT32_MIN / −1, a segfault in a kernel) ends that process, not
trtmatrix, whose run goes on and says so (issue 41, sweep 11 D4: exit 136, no line, every other case
of the matrix lost). The engines' cells already run in workers of their own; the host itself only
loads models in onnxruntime (the FP16 copy's check), it runs none.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Iterator

_lock = threading.Lock()  # one request at a time: prepares of several threads share the process
_child: tuple[Any, Any] | None = None  # (process, connection)
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("referee_deadline", default=None)


class RefereeCrashed(RuntimeError):
    """onnxruntime ended its process while evaluating the model."""


class RefereeKilled(RuntimeError):
    """The referee's process was ended from outside (SIGKILL, as the OOM killer does; SIGTERM): no
    finding of the model's, and nothing a prepared reference may keep (issue 41, sweep 12 E8)."""


class RefereeTimedOut(RefereeKilled):
    """The referee's process gave no answer within the row's deadline (stopped, or onnxruntime never
    returned): it is ended, and nothing of the preparation is kept (issue 41, sweep 12 E9)."""


FROM_OUTSIDE = {-signal.SIGKILL, -signal.SIGTERM, -signal.SIGHUP, -signal.SIGINT}


@contextmanager
def referee_deadline(seconds: float) -> Iterator[None]:
    """Each request of this thread waits `seconds` at most for its answer."""
    token = _deadline.set(seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def in_referee_process(function: Callable, *args) -> Any:
    """function(*args) in the referee's process; what it raises, raised here (as the same type where
    it can be pickled, else a RuntimeError subclass of the same name and words)."""
    global _child
    with _lock:
        if _child is None or _child[0].poll() is not None:
            _child = _start()
        process, connection = _child
        try:
            connection.send((function, args))
            if (seconds := _deadline.get()) is not None and not connection.poll(seconds):
                raise RefereeTimedOut(f"the referee's process gave no answer within timeout_s = {seconds:g} s "
                                      "(stopped, or onnxruntime never returned): it was ended")
            kind, *value = connection.recv()
        except (EOFError, OSError):
            _child = None  # first: a stop raised inside the wait leaves no dead process to ask again
            code = process.wait()
            if code in FROM_OUTSIDE:
                raise RefereeKilled(f"the referee's process was ended from outside ({_ended(code)}) while it "
                                    "evaluated the model: prepare it again (run again)") from None
            raise RefereeCrashed(f"onnxruntime crashed ({_ended(code)}) evaluating the model, in a process of "
                                 "its own") from None
        except BaseException:  # a stop or the deadline mid-request: its answer must not be the next request's
            _child = None
            process.kill()
            process.wait()
            raise
    if kind == "ok":
        return value[0]
    if kind == "raised":
        raise value[0]
    name, words = value
    raise type(name, (RuntimeError,), {})(words)


@atexit.register
def _stop() -> None:
    """The process ends with trtmatrix's: its connection closed, it returns (killed if it does not)."""
    global _child
    if _child is None:
        return
    process, connection = _child
    _child = None
    connection.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit status {code}"


def _start():
    """A Python of its own, not multiprocessing's spawn, which runs the parent's main module again in
    the child (a script of the user's that calls trtmatrix, unguarded)."""
    ours, theirs = socket.socketpair()
    # this very trtmatrix first on the path: not a `matrix` package of the folder it runs in
    start = f"import sys; sys.path.insert(0, sys.argv[2]); from {__name__} import serve; serve(int(sys.argv[1]))"
    # A session of its own, as the workers have: a Ctrl-C in the terminal reaches trtmatrix alone, which
    # ends this process itself (it died of one while it started, once, and the stop hung: sweep 12 E13)
    process = subprocess.Popen([sys.executable, "-c", start, str(theirs.fileno()), str(Path(__file__).resolve().parents[2])],
                               pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True)
    theirs.close()
    return process, Connection(ours.detach())


def serve(fd: int) -> None:
    """The referee's process: each request run, its answer sent back, until trtmatrix goes."""
    connection = Connection(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C sent to it all the same is trtmatrix's to handle
    parent = os.getppid()

    def watch() -> None:  # trtmatrix killed outright (kill -9): no request in hand runs on, orphaned (sweep 12 E10)
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):  # trtmatrix ended, however
            return
        try:
            connection.send(("ok", function(*args)))
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception, sent back to be raised there
            try:
                connection.send(("raised", exc))
            except Exception:  # noqa: BLE001 - one that cannot be pickled: its type's name and words
                connection.send(("words", type(exc).__name__, str(exc)))
