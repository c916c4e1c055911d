"""The Ray executor: each unit (an environment's cells, split per GPU model where cases ask for
one) is one Ray task, placed by Ray resources on a node that can run it; the orchestrator stays
where `trtmatrix run --ray` was started and compares, stores and reports as with the local executor.

Resources a task asks for (operators declare the custom ones per node, docs/clusters-and-ci.md):
- `GPU: 1` for a GPU environment (TensorRT, torch on CUDA): one environment per GPU, as locally;
- `docker` for a docker environment: nodes with a Docker engine and the images;
- `gpu:<model>` (e.g. `gpu:L4`) for cells whose case lists GPU patterns (`gpus = ["*L4*"]`):
  the first declared model that matches; none declared → those cells are `skipped` with the reason.

Artifacts and results travel through the cache folder, which every node must mount at the same
path (unit.py checks it and says so); what comes back through Ray is each cell's small result.
A node that dies: Ray runs its task again elsewhere (MAX_RETRIES; cells it had finished are in the
cache and reused) or, when no live node has what the task asks for, its cells become `error` with
that reason. Ctrl-C cancels every task; at the end every live node with Docker removes the
containers whose task died (cancelled, or killed with its node).

Run for real here on a local multi-node cluster (tests/test_ray.py) with onnxruntime environments;
the GPU resource path has not run on real GPUs from this repository.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Iterator

from ..environments import remove_left_behind
from ..store.records import HOST
from .unit import Done, EnvironmentUnit, UnitResult, run_unit, unit_recorded

INSTALL_HINT = "--ray needs Ray: pip install 'trtmatrix[ray]'"
MAX_RETRIES = 2  # a task whose node died runs again on another node this many times
POLL_S = 2.0  # how often lost nodes are looked for while tasks run
CANCEL_GRACE_S = 5  # Ctrl-C: how long tasks get to stop their workers before they are killed
CLEAN_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 5
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
TINY = 0.001  # a custom resource asked for as a label: many tasks at once on a node that has it


def _remote_unit(unit: EnvironmentUnit) -> UnitResult:
    """Runs on the node Ray chose."""
    import ray

    node = f"{HOST} (Ray node {ray.get_runtime_context().get_node_id()[:8]})"
    return run_unit(unit, _ray_gpu, lambda event: None, node)


@contextmanager
def _ray_gpu(needed: bool | str) -> Iterator[int | None]:
    """The GPU Ray gave this task (its `GPU: 1`), as the host's index; none for `gpu = "optional"`
    environments, which Ray places without a GPU (TensorRT-RTX builds there)."""
    import ray

    ids = ray.get_gpu_ids() if needed else []
    yield int(ids[0]) if ids else None


def _missing(resources: dict, gpu: bool, live: set[str]) -> list[str]:
    """What a task asks for that no live node has."""
    return [r for r in resources if r not in live] + (["GPU"] if gpu and "GPU" not in live else [])


def _check_reachable(address: str) -> None:
    """ConnectionError at once when nothing listens at host:port (ray.init would wait minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not (host and port.isdigit()):
        return  # "auto": Ray looks the cluster up itself, and says at once when there is none
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConnectionError(exc.strerror or str(exc)) from None


@contextmanager
def _native_log_kept() -> Iterator[Path]:
    """Standard error of this process (file descriptor 2, where Ray's C++ core writes a line a
    second while it cannot reach a cluster) into a file meanwhile: a failure is one line, and what
    a connection that succeeds said is written out after it."""
    with tempfile.TemporaryDirectory(prefix="trtmatrix-ray-") as folder:
        log = Path(folder) / "stderr"
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with log.open("wb") as sink:
                os.dup2(sink.fileno(), 2)
            yield log
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sys.stderr.write(log.read_text(errors="replace"))


class RayExecutor:
    def __init__(self, address: str):
        if address.removeprefix("ray://").rpartition(":")[0] in LOOPBACK and "ray" not in sys.modules:
            # A cluster on this machine's loopback: Ray would rewrite 127.0.0.1 to the machine's
            # interface address (where nothing listens) unless told the cluster is local.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise ImportError(INSTALL_HINT) from None
        self.ray, self.address = ray, address
        if not ray.is_initialized():
            _check_reachable(address)
            with _native_log_kept() as log:
                try:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                except ConnectionError as exc:  # the line Ray's C++ core repeated while it tried
                    said = [line.split("] ", 1)[-1] for line in log.read_text(errors="replace").splitlines()]
                    raise ConnectionError(f"{exc}" + (f" ({said[-1]})" if said else "")) from None
        self.task = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(_remote_unit)

    def _live_resources(self) -> set[str]:
        return {name for node in self.ray.nodes() if node["Alive"] for name in node["Resources"]}

    def placements(self, unit: EnvironmentUnit) -> list[tuple[EnvironmentUnit, dict | str]]:
        """The unit split by the GPU patterns of its cases, each part with the resources it asks
        Ray for, or the reason no node of the cluster can run it."""
        live = self._live_resources()
        models = sorted(name.removeprefix("gpu:") for name in live if name.startswith("gpu:"))
        by_patterns: dict[tuple[str, ...], list] = {}
        for pending in unit.cells:
            by_patterns.setdefault(pending.gpus, []).append(pending)
        placed = []
        for patterns, cells in by_patterns.items():
            resources, name = {}, unit.name
            if unit.envdef.backend == "docker":
                resources["docker"] = TINY
            if patterns:
                model = next((m for m in models if any(fnmatchcase(m, p) for p in patterns)), None)
                if model is None:
                    placed.append((replace(unit, cells=tuple(cells)),
                                   f"case runs only on GPUs matching {list(patterns)}; no node of the Ray cluster at "
                                   f"{self.address} declares one (a node declares its GPU with ray start "
                                   "--resources '{\"gpu:<model>\": 1}')"))
                    continue
                resources[f"gpu:{model}"], name = TINY, f"{unit.name}@{model}"
            missing = _missing(resources, unit.envdef.needs_gpu, live)
            part = replace(unit, name=name, cells=tuple(cells))
            placed.append((part, f"no node of the Ray cluster at {self.address} has {' or '.join(missing)}"
                           if missing else resources))
        return placed

    def run_all(self, units: list[EnvironmentUnit], on_event: Callable[[dict], None], done: Done) -> None:
        running: dict = {}  # Ray object ref → (unit, resources)
        for unit in units:
            for part, placement in self.placements(unit):
                if isinstance(placement, str):
                    done(part, unit_recorded(part, "skipped", placement))
                    continue
                on_event({"event": "setup", "env": part.name})
                task = self.task.options(resources=placement, num_gpus=1 if part.envdef.needs_gpu else 0)
                running[task.remote(part)] = (part, placement)
        stopped = None
        try:
            self._collect(running, done)
        except BaseException:
            self._cancel(list(running))
            stopped = units[0].run_id if units else None
            raise
        finally:  # containers of killed tasks (cancelled, or their node died on a host that lives on)
            self._clean_every_node([unit.envdef for unit in units], stopped)

    def _collect(self, running: dict, done: Done) -> None:
        ray = self.ray
        while running:
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in ready:
                part, _ = running.pop(ref)
                try:
                    done(part, ray.get(ref))
                except ray.exceptions.RayError as exc:  # retries spent, the task's worker died, ...
                    done(part, unit_recorded(part, "error", f"Ray task failed: {type(exc).__name__}: "
                                                            f"{str(exc).splitlines()[0] if str(exc) else ''}"))
            live = self._live_resources()
            for ref, (part, resources) in list(running.items()):
                lost = _missing(resources, part.envdef.needs_gpu, live)
                if lost:  # Ray would wait for such a node forever
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    done(part, unit_recorded(part, "error", f"no live node of the Ray cluster has {' or '.join(lost)} "
                                                            "any more (its node left mid-run); finished cells are in "
                                                            "the cache and the next run reuses them"))

    def _cancel(self, refs: list) -> None:
        """Ctrl-C: tasks are interrupted (each stops its worker and container on the way out),
        then killed: a task blocked reading a silent worker is not interrupted by Ray."""
        if not refs:
            return
        for ref in refs:
            self.ray.cancel(ref)
        _, left = self.ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
        for ref in left:
            self.ray.cancel(ref, force=True)
        self.ray.wait(left, num_returns=len(left), timeout=CANCEL_GRACE_S)  # until their processes are gone

    def _clean_every_node(self, envdefs: list, stopped_run: str | None) -> None:
        """remove_left_behind on every live node with Docker: the containers whose starting
        process is dead, wherever they are, and after a Ctrl-C every container of this run (a
        force-cancelled task's process may not be gone yet when this runs)."""
        if not any(e.backend == "docker" for e in envdefs):
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        clean = self.ray.remote(num_cpus=0)(remove_left_behind)
        refs = [clean.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                .remote(envdefs, stopped_run) for node in self.ray.nodes() if node["Alive"] and "docker" in node["Resources"]]
        self.ray.wait(refs, num_returns=len(refs), timeout=CLEAN_TIMEOUT_S)
