"""One run of the matrix: prepare → execute per environment → compare → store.

Nothing a cell does can stop the run: a case that fails to prepare, an environment that cannot
start, a worker that crashes, all become statuses on the cells concerned.
"""

from __future__ import annotations

import secrets
import shutil
import traceback
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from .compare import compare_outputs
from .envdefs import EnvDef
from .execute import LOG, OUTPUTS, RESULT, CellJob, result_dir, run_environment, stored_result
from .gpus import gpu_missing_reason
from .plan import Cell, Plan
from .prepare import INPUTS, REFERENCE, model_for_profile, prepare
from .records import empty_record, log_tail, outputs_json
from .staging import stage_worker
from .store import write_run

Events = Callable[[dict], None]


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def env_skip_reason(envdef: EnvDef) -> str | None:
    if envdef.gpu or envdef.engine == "tensorrt":
        return gpu_missing_reason()
    return None


def _error_text(exc: BaseException) -> tuple[str, str]:
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)[-6:])


class MatrixRun:
    def __init__(self, plan: Plan, reuse: bool = True, on_event: Events = lambda e: None):
        self.plan, self.reuse, self.on_event = plan, reuse, on_event
        self.cache = plan.path("cache_dir")
        self.run_id = new_run_id()
        self.records: dict[str, dict] = {}
        self.result_dirs: dict[str, Path] = {}
        self._artifacts: dict[tuple, Path | BaseException] = {}

    def _record(self, cell: Cell, **fields) -> dict:
        envdef = self.plan.envs[cell.env]
        tol = self.plan.config.tolerance(cell.case, cell.profile)
        record = empty_record(
            run_id=self.run_id, cell_id=cell.cell_id, row_id=cell.row_id, case=cell.case,
            params=dict(cell.params), profile=cell.profile,
            precision=self.plan.profile(cell.profile).precision, env=cell.env, engine=envdef.engine,
            atol=tol.atol, rtol=tol.rtol, content_key=cell.content_key)
        record.update(fields)
        self.records[cell.cell_id] = record
        self.on_event({"event": "recorded", "cell_id": cell.cell_id, "status": record["status"]})
        return record

    def _artifacts_for(self, cell: Cell) -> Path | BaseException:
        key = (cell.case, cell.params)
        if key not in self._artifacts:
            self.on_event({"event": "prepare", "case": cell.case, "params": dict(cell.params)})
            try:
                self._artifacts[key] = prepare(self.plan.cases[cell.case], cell.params, cell.artifact_key, self.cache)
            except Exception as exc:  # a broken case must not stop the others
                self._artifacts[key] = exc
        return self._artifacts[key]

    def _plan_environment(self, envdef: EnvDef, cells: list[Cell]) -> list[CellJob]:
        reason = env_skip_reason(envdef)
        jobs = []
        for cell in cells:
            if reason:
                self._record(cell, status="skipped", error=reason)
                continue
            artifacts = self._artifacts_for(cell)
            if isinstance(artifacts, BaseException):
                error, tail = _error_text(artifacts)
                self._record(cell, status="error", error=f"prepare failed: {error}", log_tail=tail)
                continue
            directory = result_dir(self.cache, cell)
            stored = stored_result(directory) if self.reuse else None
            if stored:
                self.result_dirs[cell.cell_id] = directory
                self._finish(cell, stored, artifacts, reused=True)
                continue
            try:
                model = model_for_profile(artifacts, self.plan.profile(cell.profile), envdef.engine)
            except Exception as exc:
                error, tail = _error_text(exc)
                self._record(cell, status="error", error=f"model variant failed: {error}", log_tail=tail)
                continue
            shutil.rmtree(directory, ignore_errors=True)
            jobs.append(CellJob(cell, model, artifacts / INPUTS, self.plan.profile(cell.profile), directory))
        return jobs

    def _finish(self, cell: Cell, raw: dict, artifacts: Path, reused: bool = False) -> None:
        directory = self.result_dirs.get(cell.cell_id)
        fields = {
            "status": raw.get("status", "error"), "error": raw.get("error"),
            "engine_version": raw.get("engine_version"), "python_version": raw.get("python_version"),
            "gpu": raw.get("gpu"), "build_s": raw.get("build_s"), "infer_ms": raw.get("infer_ms"),
            "log_tail": log_tail(directory / LOG) if directory else "", "reused": reused,
        }
        if fields["status"] == "ok":
            tol = self.plan.config.tolerance(cell.case, cell.profile)
            try:
                with np.load(directory / OUTPUTS) as out, np.load(artifacts / REFERENCE) as ref:
                    verdict, worst, per_output = compare_outputs(dict(out), dict(ref), tol.atol, tol.rtol)
                fields.update(worst, status=verdict, outputs=outputs_json(per_output))
            except Exception as exc:
                fields.update(status="error", error=f"compare failed: {_error_text(exc)[0]}")
        self._record(cell, **fields)

    def _execute(self, envdef: EnvDef, jobs: list[CellJob], worker_home: Path) -> None:
        for job in jobs:
            self.result_dirs[job.cell.cell_id] = job.result_dir
        raws = run_environment(envdef, jobs, self.cache, worker_home, self.plan.config.run.timeout_s, self.on_event)
        for job in jobs:
            self._finish(job.cell, raws[job.cell.cell_id], job.inputs.parent)

    def execute(self) -> Path:
        by_env: dict[str, list[Cell]] = defaultdict(list)
        for cell in self.plan.cells:
            by_env[cell.env].append(cell)
        planned = {name: self._plan_environment(self.plan.envs[name], cells) for name, cells in by_env.items()}
        worker_home = stage_worker(self.cache)
        with ThreadPoolExecutor(max_workers=self.plan.config.run.jobs) as pool:
            futures = [pool.submit(self._execute, self.plan.envs[name], jobs, worker_home)
                       for name, jobs in planned.items() if jobs]
            for future in futures:
                future.result()
        ordered = [self.records[cell.cell_id] for cell in self.plan.cells]
        return write_run(self.plan.path("reports_dir"), self.run_id, ordered, self.result_dirs)
