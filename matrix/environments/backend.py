"""What every environment backend provides, and what it raises when it cannot run here.

A backend is prepared once (venv made, image built or pulled), then starts the worker's
supervisor as a `Worker`: stdout lines are its JSON events, stderr goes to the environment log.
Whatever happens, leaving the `with running(...)` block stops the worker and removes what it started.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterator, Protocol

from ..stops import STOPPING


class EnvironmentUnavailable(Exception):
    """This environment cannot run on this host; its cells become 'skipped' with this reason."""


class SetupFailed(Exception):
    """Setting up an environment that can run here failed (an install that still fails after
    retries): its cells become 'error' with this reason, never a quiet 'skipped'."""


class Worker(Protocol):
    def lines(self) -> Iterator[str]: ...

    def wait(self) -> int: ...

    def stop(self) -> None: ...


class Backend(Protocol):
    def prepare(self) -> None: ...

    def fingerprint(self) -> str: ...

    def facts(self) -> dict: ...

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> Worker: ...


# Workers of this process, so Ctrl-C or SIGTERM on the host can stop them from the main thread.
# Once stopping (STOPPING: set by stop_all, or by the CLI as a stop signal arrives), no worker
# starts: one whose start was under way is stopped as soon as it exists. `_busy` counts starts and
# stops under way, which stop_all waits for.
_live: set[Worker] = set()
_busy = 0
_lock = threading.Condition()


class running:
    """`with running(lambda: backend.start(...)) as worker:` — started unless the run is being
    stopped, stopped and forgotten on the way out."""

    def __init__(self, start: Callable[[], Worker]):
        self.start = start

    def __enter__(self) -> Worker:
        global _busy
        with _lock:
            if STOPPING.is_set():
                raise EnvironmentUnavailable("the run is being stopped")
            _busy += 1
        try:
            self.worker = self.start()
            with _lock:
                stopped = STOPPING.is_set()
                if not stopped:
                    _live.add(self.worker)
            if stopped:  # stop_all came during the start: stopped here, before stop_all returns
                self.worker.stop()
                raise EnvironmentUnavailable("the run is being stopped")
        finally:
            with _lock:
                _busy -= 1
                _lock.notify_all()
        return self.worker

    def __exit__(self, *exc) -> None:
        global _busy
        with _lock:
            _live.discard(self.worker)
            _busy += 1  # a stop_all meanwhile waits for this stop (a container's removal) to end
        try:
            self.worker.stop()
        finally:
            with _lock:
                _busy -= 1
                _lock.notify_all()


def accept_workers() -> None:
    """A new run in this process: workers may start again after an earlier stop_all."""
    STOPPING.clear()


def stop_all(wait_s: float = 30) -> None:
    """Stop every worker of this process; starts and stops under way (a container being created
    or removed) are waited for, up to `wait_s`, so none is left behind."""
    with _lock:
        STOPPING.set()
        _lock.wait_for(lambda: _busy == 0, timeout=wait_s)
        workers = list(_live)
    for worker in workers:
        worker.stop()
