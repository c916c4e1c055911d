"""The local executor: environments run in threads on this host, a GPU environment on a GPU of
its own (one environment per GPU at a time, as many at once as there are GPUs).

What runs in each thread (executors/unit.py: set up the environment, run its cells through the
worker) is the same for every executor; this module decides only where and how many at once.
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from ..environments.backend import accept_workers, stop_all
from ..environments.gpus import host_gpus
from .unit import Done, EnvironmentUnit, run_unit


class GpuPool:
    """One environment per GPU at a time: a GPU environment leases an index and gives it back."""

    def __init__(self, count: int):
        self.count = count
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(count):
            self._free.put(index)

    @contextmanager
    def lease(self, needed: bool | str) -> Iterator[int | None]:
        """`needed`: the environment's `gpu` (true, false or "optional": a GPU where the host has one)."""
        if not needed or (needed == "optional" and not self.count):
            yield None
            return
        index = self._free.get()
        try:
            yield index
        finally:
            self._free.put(index)


class LocalExecutor:
    def __init__(self, jobs: int):
        count = len(host_gpus())
        self.gpus = GpuPool(count)
        self.workers = max(jobs, count)

    def run_all(self, units: list[EnvironmentUnit], on_event: Callable[[dict], None], done: Done) -> None:
        """Run every unit, handing each result to `done` (in the unit's thread); on Ctrl-C or any
        exception, stop every worker process and container before raising."""
        accept_workers()
        pool = ThreadPoolExecutor(max_workers=self.workers)
        try:
            for future in [pool.submit(lambda u=unit: done(u, run_unit(u, self.gpus.lease, on_event))) for unit in units]:
                future.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all()
            raise
        pool.shutdown()
