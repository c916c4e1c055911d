"""The orchestrator's own watch over a worker's supervisor: the supervisor enforces each cell's
timeout, but a supervisor that is stopped (SIGSTOP), wedged or gone silent enforces nothing, and
the run would wait on it forever. So the host keeps the deadlines too, from the events the
supervisor prints: a cell it started must end within its own timeout (its case's) plus GRACE_S;
while no cell runs, the next event is due within GRACE_S (START_S before the first: the engine
is imported then). A worker past a deadline is stopped, and its unfinished cells say why.
"""

from __future__ import annotations

import threading
import time

START_S = 300  # to the first event: importing torch or TensorRT in a cold container takes seconds, not minutes
GRACE_S = 15  # the supervisor's own work around a cell: a fork, a result file, an event line
POLL_S = 0.5


class Deadlines:
    def __init__(self, timeouts: dict[str, float]):
        self.timeouts = timeouts  # cell id → its timeout_s
        self.running: dict[str, float] = {}  # cell id → when its start was seen (monotonic)
        self.last, self.heard = time.monotonic(), False
        self.late: str | None = None  # why the worker was stopped, once it was
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._guard: threading.Thread | None = None

    def saw(self, event: dict) -> None:
        """An event line of the supervisor: {"event": "start" | "done", "cell_id": ...}."""
        with self._lock:
            self.last, self.heard = time.monotonic(), True
            if event.get("event") == "start":
                self.running[event.get("cell_id")] = self.last
            elif event.get("event") == "done":
                self.running.pop(event.get("cell_id"), None)

    def overdue(self) -> str | None:
        """Why the worker is late, or None."""
        now = time.monotonic()
        with self._lock:
            if self.running:
                cell, started = min(self.running.items(), key=lambda item: item[1] + self.timeouts[item[0]])
                if now > started + self.timeouts[cell] + GRACE_S:
                    return f"{cell} was still running {now - started:.0f} s after it started, past its timeout of " \
                           f"{self.timeouts[cell]:g} s"
                return None
            allowed = GRACE_S if self.heard else START_S
            return f"it said nothing for {allowed:g} s with no cell running" if now > self.last + allowed else None

    def watch(self, worker) -> None:
        """Stop `worker` (its stop(): the supervisor killed, or its container removed) at the first
        deadline it misses, from a thread of its own, until end()."""
        def guard():
            while not self._ended.wait(POLL_S):
                if why := self.overdue():
                    self.late = why
                    worker.stop()
                    return

        self._guard = threading.Thread(target=guard, name="trtmatrix-deadlines", daemon=True)
        self._guard.start()

    def end(self) -> None:
        """The worker's output has ended: no more watching (a stop under way is finished first)."""
        self._ended.set()
        if self._guard is not None:
            self._guard.join()

    def unfinished(self, cell_id: str) -> dict:
        """The raw result of a cell the stopped worker left without one."""
        if cell_id in self.running:
            return {"status": "timeout", "error": f"not finished within {self.timeouts[cell_id]:g}s; its worker "
                                                  f"stopped answering ({self.late}), so trtmatrix killed it"}
        return {"status": "error", "error": f"its worker stopped answering ({self.late}) before this cell; "
                                            "trtmatrix killed it"}
