"""Backends give an environment a Python that can run the worker: a virtualenv or a container.

A backend is prepared once (venv made, image built or pulled), then starts the worker's
supervisor as a `Worker`: stdout lines are its JSON events, stderr goes to the environment log.
Whatever happens, leaving the `with` block stops the worker and removes what it started.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator, Protocol

from ..envdefs import EnvDef


class EnvironmentUnavailable(Exception):
    """This environment cannot run on this host; its cells become 'skipped' with this reason."""


class Worker(Protocol):
    def lines(self) -> Iterator[str]: ...

    def wait(self) -> int: ...

    def stop(self) -> None: ...


class Backend(Protocol):
    def prepare(self) -> None: ...

    def fingerprint(self) -> str: ...

    def facts(self) -> dict: ...

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> Worker: ...


# Workers still running, so Ctrl-C on the host can stop them from the main thread.
_live: set[Worker] = set()
_live_lock = threading.Lock()


class running:
    """`with running(backend.start(...)) as worker:` — stopped and forgotten on the way out."""

    def __init__(self, worker: Worker):
        self.worker = worker

    def __enter__(self) -> Worker:
        with _live_lock:
            _live.add(self.worker)
        return self.worker

    def __exit__(self, *exc) -> None:
        with _live_lock:
            _live.discard(self.worker)
        self.worker.stop()


def stop_all() -> None:
    with _live_lock:
        workers = list(_live)
    for worker in workers:
        worker.stop()


def open_backend(envdef: EnvDef, cache_dir: Path, worker_home: Path) -> Backend:
    if envdef.backend == "docker":
        from .docker import DockerBackend

        return DockerBackend(envdef, cache_dir, worker_home)
    from .venv import VenvBackend

    return VenvBackend(envdef, cache_dir, worker_home)
