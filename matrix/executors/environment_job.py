"""One environment's cells through its worker, and their raw results: what every executor runs.

The host only starts the worker's supervisor and reads its event lines; each cell's result.json
(written by the worker, whatever happened to the cell) is the source of truth.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config import Profile
from ..environments.backend import Backend, EnvironmentUnavailable, running
from ..environments.definitions import EnvDef
from ..environments.image_names import image_ref
from ..plan import Cell
from ..store.cache import env_log, jobs_folder
from ..store.records import log_tail
from ..worker.files import RESULT
from .deadlines import Deadlines


@dataclass(frozen=True)
class CellJob:
    cell: Cell
    model: Path
    inputs: Path
    profile: Profile
    result_dir: Path
    node_types: Path  # {ONNX node name: op type}, so the worker can select layers by op type
    input_types: Path | None  # {op type: input element types} of `model`, for what onnxruntime refuses
    timing_cache: Path  # TensorRT: one per image and GPU model (store.cache.engine_caches)
    runtime_cache: Path  # TensorRT-RTX: the kernels it compiles at run time, the same way
    timeout_s: float  # its case's
    input_shapes: tuple[dict, ...] = ()  # TensorRT: every input set's shapes its profile spans
    engine_file: Path | None = None  # TensorRT: the engine those rows share (built by the first)

    def spec(self, engine: str, node: str, gpu: int | None) -> dict:
        return {
            "cell_id": self.cell.cell_id,
            "node": node,
            "gpu_index": gpu,  # the host's index of the GPU it runs on (in a container it is GPU 0)
            "engine": engine,
            "model": str(self.model),
            "inputs": str(self.inputs),
            "profile": self.profile.model_dump(mode="json"),
            "out_dir": str(self.result_dir),
            "node_types": str(self.node_types),
            "input_types": str(self.input_types) if self.input_types else None,
            "timing_cache": str(self.timing_cache),
            "runtime_cache": str(self.runtime_cache),
            "input_shapes": list(self.input_shapes),
            "engine_file": str(self.engine_file) if self.engine_file else None,
            "timeout_s": self.timeout_s,
        }


def error_text(exc: BaseException) -> tuple[str, str]:
    """One line for the record, and the end of the traceback for its log tail."""
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)[-6:])


@dataclass
class WorkerPass:
    """What one worker's supervisor did: its own log, how it ended, how many cells it finished."""
    log: Path
    returncode: int | None = None
    unavailable: str | None = None  # the environment could not start (EnvironmentUnavailable)
    unfit: str | None = None  # the supervisor started, and cannot run there (worker/__main__.py's "unfit")
    cells: int = 0
    deadlines: Deadlines | None = None  # the host's own watch over it (executors/deadlines.py)


def run_environment(backend: Backend, envdef: EnvDef, jobs: list[CellJob], cache_dir: Path,
                    gpu: int | None, on_event: Callable[[dict], None],
                    cell_jobs: int, name: str, node: str) -> tuple[dict[str, dict], Path]:
    """Return ({cell_id: raw result}, the worker's own log). Never raises for a cell's or an
    environment's failure. `cell_jobs` cells run at once (one on a GPU); `name` names the job and
    log files (the environment, or the part of it one executor task runs); `node` is where this
    is, kept in each result for the runs that reuse it."""
    done = run_worker(backend, envdef, jobs, cache_dir, gpu, on_event, cell_jobs, name, node)
    return read_results(jobs, [done]), done.log


def run_worker(backend: Backend, envdef: EnvDef, jobs: list[CellJob], cache_dir: Path,
               gpu: int | None, on_event: Callable[[dict], None], cell_jobs: int, name: str, node: str,
               shared: bool = False) -> WorkerPass:
    """One supervisor through `jobs`, in their order; `shared`: other supervisors have the same
    cells at the same time, and each cell runs in the one that claims it first (worker/supervisor.py)."""
    job_dir = jobs_folder(cache_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    job_file = job_dir / f"{name}.json"
    job_file.write_text(json.dumps({"env": envdef.name, "cell_jobs": 1 if gpu is not None else cell_jobs,
                                    "shared": shared, "launched": time.time(),  # the worker's clock starts here
                                    "cells": [job.spec(envdef.engine, node, gpu) for job in jobs]}))
    done = WorkerPass(env_log(cache_dir, name), deadlines=Deadlines({job.cell.cell_id: job.timeout_s for job in jobs}))
    try:
        with running(lambda: backend.start(["run", str(job_file)], done.log, gpu)) as worker:
            done.deadlines.watch(worker)
            try:
                for line in worker.lines():
                    if line.startswith("{"):
                        event = json.loads(line)
                        if event.get("event") == "unfit":
                            done.unfit = unfit_line(envdef, event)
                            continue
                        done.deadlines.saw(event)
                        done.cells += event.get("event") == "done"
                        on_event({**event, "env": envdef.name})
            finally:
                done.deadlines.end()
            done.returncode = None if done.deadlines.late else worker.wait()
    except EnvironmentUnavailable as exc:
        done.unavailable = str(exc)
    return done


def unfit_line(envdef: EnvDef, event: dict) -> str:
    """Each cell's error where the environment's interpreter lacks what the worker needs (an image
    without numpy): the environment's fault and its remedy, never the engine's; the image named last,
    where a cause cut short in the terminal loses least."""
    lacks = f"{envdef.name}: {event['error']} in its Python {event['python']}"
    missing = event["error"].removeprefix("No module named ").strip("'").split(".")[0]
    named = {r.lower().replace("_", "-") for r in envdef.requirements}  # tensorrt_rtx: tensorrt-rtx-cu12
    if envdef.backend == "venv" and not any(r.startswith(missing.lower().replace("_", "-")) for r in named):
        return f"{lacks}; the worker needs numpy and {envdef.engine}: add {missing} to `requirements` in {envdef.path}"
    if envdef.backend == "venv":
        return f"{lacks}: its venv is damaged; `trtmatrix cache --free venvs` makes it again"
    where = f"the image {image_ref(envdef)}" if envdef.backend == "docker" else event["executable"]
    return f"{lacks}; the worker needs numpy and {envdef.engine} in {where}"


def read_results(jobs: list[CellJob], passes: list[WorkerPass]) -> dict[str, dict]:
    """Each cell's result.json, written by whichever worker ran it; a cell none ran is skipped
    when no worker could start (the reason), else an error with the end of a worker's log."""
    started = [done for done in passes if done.unavailable is None]
    ended = next((done for done in started if done.returncode), started[0]) if started else None
    results = {}
    for job in jobs:
        try:
            results[job.cell.cell_id] = json.loads((job.result_dir / RESULT).read_text())
        except (OSError, ValueError):
            late = next((done for done in started if done.deadlines.late and job.cell.cell_id in done.deadlines.running),
                        next((done for done in started if done.deadlines.late), None))
            if late is not None:  # a worker the host stopped at a deadline it missed
                results[job.cell.cell_id] = late.deadlines.unfinished(job.cell.cell_id)
                continue
            if ended is None:
                results[job.cell.cell_id] = {"status": "skipped", "error": passes[0].unavailable}
                continue
            if ended.unfit:
                results[job.cell.cell_id] = {"status": "error", "error": ended.unfit}
                continue
            tail = "\n".join(log_tail(ended.log).splitlines()[-10:])
            results[job.cell.cell_id] = {"status": "error",
                                         "error": f"worker exited {ended.returncode} before this cell: {tail}"}
    return results
