"""The local executor: environments run in threads on this host, a GPU environment on a GPU of
its own (one environment per GPU at a time, as many at once as there are GPUs), and on every other
GPU of that model free when its cells start: a worker per GPU, the cells shared out.

What runs in each thread (executors/unit.py: set up the environment, run its cells through the
worker) is the same for every executor; this module decides only where and how many at once.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from ..environments.backend import accept_workers, stop_all
from ..environments.gpus import host_gpus
from .unit import Done, EnvironmentUnit, run_unit


class GpuPool:
    """One environment per GPU at a time: a GPU environment leases a GPU (the host's index) and
    gives it back, and spreads its cells over the GPUs of the same model nobody leased (spare)."""

    def __init__(self, names: dict[int, str]):
        self.names = names  # the GPUs trtmatrix may use (gpus.host_gpus: CUDA_VISIBLE_DEVICES honoured)
        self.count = len(names)
        self._free: queue.Queue[int] = queue.Queue()
        for index in names:
            self._free.put(index)
        self._taking = threading.Lock()

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

    @contextmanager
    def spare(self, gpu: int, wanted: int) -> Iterator[list[int]]:
        """Up to `wanted` free GPUs of `gpu`'s model, without waiting for any (a case's GPU-model
        routing was decided for that model); given back when the cells are done."""
        taken, passed = [], []
        with self._taking:
            while len(taken) < wanted:
                try:
                    index = self._free.get_nowait()
                except queue.Empty:
                    break
                (taken if self.names[index] == self.names[gpu] else passed).append(index)
            for index in passed:
                self._free.put(index)
        try:
            yield taken
        finally:
            for index in taken:
                self._free.put(index)


class LocalExecutor:
    def __init__(self, jobs: int):
        self.gpus = GpuPool(host_gpus())
        self.workers = max(jobs, self.gpus.count)

    def run_all(self, units: list[EnvironmentUnit], on_event: Callable[[dict], None], done: Done) -> None:
        """Run every unit, handing each result to `done` (in the unit's thread); on Ctrl-C or any
        exception, stop every worker process and container before raising."""
        def run(unit: EnvironmentUnit) -> None:
            done(unit, run_unit(unit, self.gpus.lease, on_event, spare=self.gpus.spare))

        accept_workers()
        pool = ThreadPoolExecutor(max_workers=self.workers)
        try:
            for future in [pool.submit(run, unit) for unit in units]:
                future.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            stop_all()
            raise
        pool.shutdown()
