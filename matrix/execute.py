"""Run the cells of one environment through its worker and collect the raw results.

The host only starts the worker's supervisor and reads its event lines; each cell's result.json
(written by the worker, whatever happened to the cell) is the source of truth.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .backends import EnvironmentUnavailable, open_backend
from .config import Profile
from .envdefs import EnvDef
from .plan import Cell

RESULT, OUTPUTS, LOG = "result.json", "outputs.npz", "cell.log"
# A crash or timeout may not happen again: those results are not reused.
NOT_REUSED = {"crash", "timeout"}


@dataclass(frozen=True)
class CellJob:
    cell: Cell
    model: Path
    inputs: Path
    profile: Profile
    result_dir: Path

    def spec(self, engine: str, timeout_s: float) -> dict:
        return {
            "cell_id": self.cell.cell_id,
            "engine": engine,
            "model": str(self.model),
            "inputs": str(self.inputs),
            "profile": self.profile.model_dump(mode="json"),
            "out_dir": str(self.result_dir),
            "timeout_s": timeout_s,
        }


def result_dir(cache_dir: Path, cell: Cell) -> Path:
    return cache_dir / "results" / cell.content_key[:24]


def stored_result(directory: Path) -> dict | None:
    """A finished result that may be reused, or None."""
    try:
        result = json.loads((directory / RESULT).read_text())
    except (OSError, ValueError):
        return None
    return None if result.get("status") in NOT_REUSED else result


def run_environment(envdef: EnvDef, jobs: list[CellJob], cache_dir: Path, worker_home: Path,
                    timeout_s: float, on_event: Callable[[dict], None]) -> dict[str, dict]:
    """Return {cell_id: raw result}. Never raises for a cell's or an environment's failure."""
    try:
        backend = open_backend(envdef, cache_dir, worker_home)
        on_event({"event": "setup", "env": envdef.name})
        backend.prepare()
    except EnvironmentUnavailable as exc:
        return {job.cell.cell_id: {"status": "skipped", "error": str(exc)} for job in jobs}
    job_file = cache_dir / "jobs" / f"{envdef.name}.json"
    job_file.parent.mkdir(parents=True, exist_ok=True)
    job_file.write_text(json.dumps({"env": envdef.name,
                                    "cells": [job.spec(envdef.engine, timeout_s) for job in jobs]}))
    worker = backend.popen(["run", str(job_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in worker.stdout:
            if line.startswith("{"):
                on_event({**json.loads(line), "env": envdef.name})
        stderr = worker.stderr.read()
        worker.wait()
    except BaseException:
        worker.kill()
        worker.wait()
        raise
    results = {}
    for job in jobs:
        try:
            results[job.cell.cell_id] = json.loads((job.result_dir / RESULT).read_text())
        except (OSError, ValueError):
            tail = "\n".join(stderr.strip().splitlines()[-10:])
            results[job.cell.cell_id] = {"status": "error",
                                         "error": f"worker exited {worker.returncode} before this cell: {tail}"}
    return results
