"""What an executor runs: one environment's cells (or those of them that ask for one GPU model),
set up, looked up in the result cache and run through the worker, on whichever machine the
executor picked. Plain data in, plain data out, so the unit can travel to another node (Ray);
comparing and recording stay with the orchestrator (matrix.run).

Paths in a unit (cache, artifacts, worker) must mean the same on the node as on the orchestrator:
the same machine, or a cache folder on storage every node mounts at the same path.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Iterator

from ..config import Profile
from ..environments import open_backend
from ..environments.backend import EnvironmentUnavailable, SetupFailed
from ..environments.definitions import EnvDef
from ..environments.gpus import host_gpus
from ..plan import Cell
from ..prepare import INPUTS, MODEL, artifact_digests, input_types_file, model_for_profile, node_types_file
from ..store.cache import engine_caches, env_log, result_dir, result_key, shared_engines, stored_result
from ..store.held_results import held_folder, hold
from ..store.locks import LockWaitEnded, cache_lock, held_for
from ..store.records import HOST
from .trt_named_dims import explained
from .environment_job import CellJob, WorkerPass, error_text, read_results, run_environment, run_worker

@dataclass(frozen=True)
class PendingCell:
    cell: Cell
    artifacts: Path
    profile: Profile
    gpus: tuple[str, ...]  # the case's GPU name patterns; empty: any GPU
    timeout_s: float  # the case's own, else the run's
    # TensorRT: the input shapes of every row its engine serves (run.py _engine_span), and the
    # name of that one engine, which the first of those rows to run builds and the others load.
    input_shapes: tuple[dict, ...] = ()
    engine_group: str | None = None


@dataclass(frozen=True)
class EnvironmentUnit:
    name: str  # the environment's name, or `<env>@<GPU model>` for a part of it (Ray)
    envdef: EnvDef
    cells: tuple[PendingCell, ...]
    cache_dir: Path
    worker_home: Path
    run_id: str
    reuse: bool
    cell_jobs: int
    command: str = "run"  # the trtmatrix command whose cells these are, as its locks' notes name it

    @property
    def timeout_s(self) -> float:
        """The longest any of its cells may take."""
        return max(pending.timeout_s for pending in self.cells)


@dataclass
class CellOutcome:
    cell_id: str
    fields: dict  # the worker's result plus the environment's facts, or a record's fields as they are
    key: str | None = None  # result key; None: nothing to compare (skipped or error before running)
    result_dir: Path | None = None
    reused: bool = False
    held: Path | None = None  # the run's own links to result_dir's files (store/held_results.py)


@dataclass
class UnitResult:
    outcomes: list[CellOutcome]
    # The worker's / container's own output, when a worker ran: read while this unit held its
    # environment's lock, since the next run of the environment (from any folder) writes the same file.
    log: str | None = None
    seconds: float = 0.0


# `with lease(envdef.gpu) as gpu:` — the GPU index this unit may use (None: no GPU), held while its
# cells run: the local executor's pool of the host's GPUs, or the GPU Ray gave the task.
GpuLease = Callable[[bool], AbstractContextManager]
# `with spare(gpu, n) as more:` — up to n more GPUs of the same model as `gpu` that nothing uses
# now, taken without waiting (the local executor's; none under Ray, which places one GPU a task).
SpareGpus = Callable[[int, int], AbstractContextManager]
# What an executor calls with each unit's result, in the orchestrator's process.
Done = Callable[[EnvironmentUnit, UnitResult], None]


@contextmanager
def no_spare(gpu: int, wanted: int) -> Iterator[list[int]]:
    yield []


def unit_recorded(unit: EnvironmentUnit, status: str, reason: str, node: str | None = None) -> UnitResult:
    """Every cell of the unit recorded with one status and reason (skipped here, a lost node)."""
    return UnitResult([CellOutcome(p.cell.cell_id, {"status": status, "error": reason, "node": node})
                       for p in unit.cells])


def run_unit(unit: EnvironmentUnit, lease: GpuLease, on_event: Callable[[dict], None],
             node: str = HOST, spare: SpareGpus = no_spare) -> UnitResult:
    """`node`: where this runs, as the records will say."""
    started = time.perf_counter()
    if not unit.worker_home.is_dir():
        return unit_recorded(unit, "error", f"{unit.cache_dir} is not visible on node {node}: the cache folder "
                                           "must be on storage every node mounts at the same path", node)
    # Another run on this cache running these cells now: wait for it, then reuse what it stored;
    # not for one that stays stopped longer than a cell may take (it keeps its lock, and runs nothing).
    try:
        with held_for(unit.cache_dir, f"env-{unit.name}", f"running {unit.name}'s cells",
                      lambda who: on_event({"event": "waiting", "env": unit.name, "for": who}), stopped_s=unit.timeout_s,
                      command=unit.command):
            try:
                result = _set_up_and_run(unit, lease, on_event, node, spare)
                _hold(result.outcomes, held_folder(unit.cache_dir, unit.run_id))
            finally:  # engines shared by the rows of a case live as long as the run's cells
                shutil.rmtree(shared_engines(unit.cache_dir, unit.envdef.name, unit.run_id), ignore_errors=True)
    except LockWaitEnded as exc:  # nothing was measured: skipped, never a regression (a --strict run goes red)
        return unit_recorded(unit, "skipped", f"not run: environment {unit.name} is held by {exc.who}, stopped for "
                                            f"longer than timeout_s ({unit.timeout_s:g} s); waited "
                                            f"{exc.waited_s:.0f} s for it", node)
    result.seconds = round(time.perf_counter() - started, 2)
    return result


def _hold(outcomes: list[CellOutcome], folder: Path) -> None:
    """Each result folder linked into the run's own, while the environment's lock is still held:
    the next run of these cells (from any folder) empties the cache's."""
    held = {}
    for outcome in outcomes:
        if outcome.result_dir is not None:
            if outcome.result_dir not in held:
                held[outcome.result_dir] = hold(outcome.result_dir, folder)
            outcome.held = held[outcome.result_dir]


def _set_up_and_run(unit: EnvironmentUnit, lease: GpuLease, on_event: Callable[[dict], None], node: str,
                    spare: SpareGpus) -> UnitResult:
    envdef = unit.envdef
    on_event({"event": "setup", "env": envdef.name})
    started = time.perf_counter()
    try:
        backend = open_backend(envdef, unit.cache_dir, unit.worker_home, unit.run_id)
        # Parts of one environment (per GPU model, on other nodes) share its venv or image build.
        with cache_lock(unit.cache_dir, f"prepare-{envdef.name}"):
            backend.prepare()
    except EnvironmentUnavailable as exc:
        return unit_recorded(unit, "skipped", str(exc), node)
    except SetupFailed as exc:
        return unit_recorded(unit, "error", str(exc), node)
    facts = {**backend.facts(), "node": node}
    with lease(envdef.gpu) as gpu:  # after set-up: an image pull holds no GPU
        outcomes, jobs = _outcomes_and_jobs(unit, backend.fingerprint(), facts, gpu)
        # Cells of one content (two profiles alike) share a result folder: the first runs, the others
        # take its result; two running at once would write the same files.
        runs: dict[Path, CellJob] = {}
        for job, _ in jobs:
            runs.setdefault(job.result_dir, job)
        on_event({"event": "ready", "env": unit.name, "setup_s": time.perf_counter() - started, "to_run": len(runs),
                  "reused": sum(o.reused for o in outcomes)})
        if not jobs:
            return UnitResult(_said(unit, outcomes))
        with (spare(gpu, len(runs) - 1) if gpu is not None else no_spare(0, 0)) as more:
            raws, log = _run_spread(backend, unit, list(runs.values()), [gpu, *more], on_event, node)
    outcomes += [CellOutcome(job.cell.cell_id, {**raws[runs[job.result_dir].cell.cell_id], **facts}, key, job.result_dir)
                 for job, key in jobs]
    return UnitResult(_said(unit, outcomes), log=log.read_text(errors="replace") if log.is_file() else None)


def _said(unit: EnvironmentUnit, outcomes: list[CellOutcome]) -> list[CellOutcome]:
    """TensorRT builds refused for two sizes of one dimension name, run now or reused: which, said."""
    if unit.envdef.engine == "tensorrt":
        pending = {p.cell.cell_id: p for p in unit.cells}
        for outcome in outcomes:
            cell = pending[outcome.cell_id]
            outcome.fields = explained(outcome.fields, cell.artifacts / MODEL, cell.artifacts / INPUTS, cell.input_shapes)
    return outcomes


def _outcomes_and_jobs(unit: EnvironmentUnit, fingerprint: str, facts: dict,
                       gpu: int | None) -> tuple[list[CellOutcome], list[tuple[CellJob, str]]]:
    """The cells to run now, with their result keys; stored, restricted or broken ones as outcomes."""
    gpu_name = host_gpus()[gpu] if gpu is not None else None
    caches = engine_caches(unit.cache_dir, unit.envdef.name, fingerprint, gpu_name)
    outcomes, jobs = [], []
    for pending in unit.cells:
        cell = pending.cell
        if gpu_name and pending.gpus and not any(fnmatchcase(gpu_name, g) for g in pending.gpus):
            outcomes.append(CellOutcome(cell.cell_id, {"status": "skipped", "gpu": gpu_name, "node": facts["node"], "error":
                            f"case runs only on GPUs matching {list(pending.gpus)}; this environment has {gpu_name}"}))
            continue
        key = result_key(cell.content_key, fingerprint, artifact_digests(pending.artifacts))
        directory = result_dir(unit.cache_dir, unit.envdef.name, key)
        stored = stored_result(directory) if unit.reuse else None
        if stored:  # `node`: where it ran then (results stored before nodes were kept: here)
            outcomes.append(CellOutcome(cell.cell_id, {**stored, **facts, "node": stored.get("node") or facts["node"]},
                                        key, directory, reused=True))
            continue
        try:
            model = model_for_profile(pending.artifacts, pending.profile, unit.envdef.runs_fp16_copy(pending.profile))
            types = input_types_file(model) if unit.envdef.engine == "onnxruntime" else None  # only it reads them
        except Exception as exc:
            error, tail = error_text(exc)
            outcomes.append(CellOutcome(cell.cell_id, {"status": "error", "node": facts["node"], "log_tail": tail,
                                                       "error": f"model variant failed: {error}"}))
            continue
        shutil.rmtree(directory, ignore_errors=True)  # a cell run again starts from an empty folder
        engine_file = shared_engines(unit.cache_dir, unit.envdef.name, unit.run_id) / f"{pending.engine_group}.engine" \
            if pending.engine_group else None
        jobs.append((CellJob(cell, model, pending.artifacts / INPUTS, pending.profile, directory,
                             node_types_file(pending.artifacts), types, *caches, pending.timeout_s,
                             pending.input_shapes, engine_file), key))
    return outcomes, jobs


def _run_spread(backend, unit: EnvironmentUnit, jobs: list[CellJob], gpus: list[int | None],
                on_event: Callable[[dict], None], node: str) -> tuple[dict[str, dict], Path]:
    """The jobs through one worker per GPU at once, pulling from one queue: each worker is given
    every job, in its own order (shared_orders), and runs those it claims first; the workers'
    logs joined into the environment's."""
    if len(gpus) == 1:
        return run_environment(backend, unit.envdef, jobs, unit.cache_dir, gpus[0], on_event,
                               unit.cell_jobs, unit.name, node)
    orders = shared_orders(len(jobs), len(gpus))
    with ThreadPoolExecutor(len(gpus)) as pool:
        passes = list(pool.map(lambda i: run_worker(
            backend, unit.envdef, [jobs[k] for k in orders[i]], unit.cache_dir, gpus[i], on_event,
            unit.cell_jobs, f"{unit.name}@gpu{gpus[i]}", node, shared=True), range(len(gpus))))
    log = env_log(unit.cache_dir, unit.name)
    log.write_text("".join(_worker_log(gpu, done) for gpu, done in zip(gpus, passes)))
    return read_results(jobs, passes), log


def _worker_log(gpu: int | None, done: WorkerPass) -> str:
    """A worker's part of the environment's log: a line saying how many cells it ran (or why it
    did not start: the others ran its cells), then its own log, if it wrote one."""
    what = f"did not start: {done.unavailable}" if done.unavailable else f"{done.cells} cells"
    return f"── the worker on GPU {gpu} ({what}) ──\n" + (done.log.read_text() if done.log.is_file() else "")


def shared_orders(count: int, workers: int) -> list[list[int]]:
    """The order in which each worker tries the `count` jobs: its own contiguous share of the plan
    order first (a case's cells together: a warm worker loads each program once), then the other
    shares from their ends backwards (the cells their own workers would reach last), so one that
    finishes early takes over the tail of a slower one — uneven cells, or a slow start — and
    two workers meet inside a share instead of alternating through it."""
    size, extra = divmod(count, workers)
    bounds = [index * size + min(index, extra) for index in range(workers + 1)]
    shares = [list(range(bounds[i], bounds[i + 1])) for i in range(workers)]
    return [shares[i] + [k for step in range(1, workers) for k in reversed(shares[(i + step) % workers])]
            for i in range(workers)]
