"""One run of the matrix: prepare → execute per environment → compare → store.

Nothing a cell does can stop the run: a case that fails to prepare, an environment that cannot
start, a worker that crashes, all become statuses on the cells concerned.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from functools import cache
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version as package_version
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pandas as pd

from . import acceptance, compare
from .compare import compare_files, judged_beside_a_step, judging_error
from .environments import remove_left_behind
from .environments.definitions import EnvDef
from .environments.gpus import gpu_missing_reason
from .environments.resolve import resolved_together
from .environments.staging import stage_worker
from .executors.environment_job import error_text
from .executors.local import LocalExecutor
from .executors.prepare_apart import PrepareFailed, prepare_apart
from .executors.unit import EnvironmentUnit, PendingCell, UnitResult
from .plan import Cell, Plan, plan_of_trials, row_words
from .prepare import (DECIDES, INPUTS, MODEL, REFERENCE, SECOND, SIDES, artifact_dir, case_meta, checked_digests,
                      copy_facts, copy_path, file_digests, mask_array, model_for_profile, prepared, prepared_meta)
from .reference import DISPUTED, NoReference
from .reference.conversion import cause as conversion_cause
from .reference.referee import judged_against_itself
from .prepare.fp16_forecast import inputs_beyond_fp16
from .prepare.graph_checks import applies
from .prepare.pattern_copy import (computed_otherwise, observation, pattern_explains, pattern_inputs, pattern_tensors,
                                    write_observed_copy)
from .report.error_text import distance_text
from .report.precision_ran import not_converted, precision_text
from .report.publish import publish_staged
from .sources import fault_patterns, known_issues
from .sources.known_issues import KnownIssue, apply_known_issues, faults_found, known_status, to_observe
from .sources.pattern_notes import with_unchecked_patterns
from .sources.onnx_suites import suite_label, typed_tensors
from .statuses import EXPECTED_CAUSE, ORDER, STEP_CAUSE
from .store import RUNS, SEQUENCE, STEP_DECIDES, STEP_SIDE, matrix_digest, next_sequence, remove_dead_partials, stage_run, to_frame
from .store.cache import ARTIFACT_LOCK, faults_memo, remove_artifact, remove_dead_artifacts, speed_tests
from .store.cache_tag import tag_cache
from .store.hashing import hash_files, hash_json, remembered
from .store.held_results import holding
from .store.judgements import store_judgement, stored_judgement
from .store.locks import (LockWaitEnded, cache_in_use, cache_lock, held_for, held_if_free, remove_dead_notes,
                          run_lock)
from .store.records import HOST, REPORTED, empty_record, log_tail, storable
from .stops import STOPPING, removed_at_end
from .worker.engines import Unsupported, check_profile
from .worker.files import DIGESTS, LOG, OUTPUTS, RESULT

Events = Callable[[dict], None]
# Threads judging cells while the environments run: enough to keep up with several GPUs. On four
# H200s two threads judged 448 cells 9.8 s after the last one ran (issue 43); numpy's work on an
# output's elements releases the GIL, so threads share the host's cores.
JUDGES = max(2, min(16, (os.cpu_count() or 1) // 4))


def new_run_id() -> str:
    """Sorts by start time, to the millisecond: "the previous run" is the one sorted before."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S") + f".{now.microsecond // 1000:03d}Z-" + secrets.token_hex(2)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


@cache
def _compare_code() -> str:
    """Part of a stored judgement's key: a change to how cells are compared re-judges them all."""
    return hash_files([Path(compare.__file__), Path(acceptance.__file__)])


@cache
def _fault_code() -> str:
    """Part of a remembered finding's key: a change to how fault patterns are found looks again."""
    return hash_files([Path(fault_patterns.__file__), Path(known_issues.__file__)])


def env_skip_reason(envdef: EnvDef) -> str | None:
    if envdef.needs_gpu:
        return gpu_missing_reason()
    return None


def trtmatrix_version() -> str:
    """Installed, the package's version; run from a checkout with PYTHONPATH (a GPU host or a
    container where nothing is pip-installed), that says so instead of failing the run's end."""
    try:
        return package_version("trtmatrix")
    except PackageNotFoundError:
        return "not installed (run from a source tree)"


def _matches_the_model(directory: Path, artifacts: Path, rules) -> tuple[dict, str] | None:
    """(the comparison, the user's file as named) where a cell's outputs pass against the model's
    own evaluation kept beside a user's expected file (SECOND), else None."""
    (tol, accept, mask) = rules
    again, checked = compare_files(directory / OUTPUTS, artifacts / SECOND, tol.atol, tol.rtol, accept,
                                   mask=mask_array(artifacts / INPUTS, mask))
    if again != "pass":
        return None
    return checked, case_meta(artifacts).get("reference", "your expected outputs").split(":")[0]


def _only_where_decided(directory: Path, artifacts: Path, rules) -> bool:
    """Whether a cell failing against a user's expected file passes once the elements the step
    decides (where the model's float32 and float64 evaluations part) hold its own values: only
    then is the step the cause; a fail elsewhere is the engine's or the file's (issue 41, sweep 8 A16)."""
    (tol, accept, mask) = rules
    if not (artifacts / DECIDES).is_file() or not _file_holds_the_float64_side(artifacts) \
            or not _on_a_side(directory, artifacts, tol):
        return False
    return compare_files(directory / OUTPUTS, artifacts / REFERENCE, tol.atol, tol.rtol, accept,
                         mask=mask_array(artifacts / INPUTS, mask), settled=artifacts / DECIDES)[0] == "pass"


def _on_a_side(directory: Path, artifacts: Path, tol) -> bool:
    """Whether the user's file and the engine's outputs each hold, at every element a step decides,
    one of its sides (the model's float64 evaluation, the referee's float32), within the tolerance:
    100 where the step gives 6 or 7 is the file's fault, 17 the engine's (issue 41, sweep 19 M16)."""
    if not (artifacts / STEP_SIDE).is_file() or not (artifacts / SIDES).is_file():
        return True
    marks, wide, narrow = (typed_tensors(artifacts / name) for name in (DECIDES, SIDES, STEP_SIDE))
    held = [typed_tensors(artifacts / REFERENCE), typed_tensors(directory / OUTPUTS)]
    for name, mark in marks.items():
        sides = [side[name] for side in (wide, narrow) if name in side]
        if mark.ndim == 0 or not all(s.shape == mark.shape and s.dtype.kind in "fiub" for s in sides):
            continue
        for values in (v[name] for v in held if name in v and v[name].shape == mark.shape):
            with np.errstate(invalid="ignore"):
                near = np.zeros(mark.shape, bool)
                for side in sides:
                    near |= np.abs(values.astype(np.float64) - side) <= tol.atol + tol.rtol * np.abs(side.astype(np.float64))
            if np.any(mark & ~near):
                return False
    return True


def _file_holds_the_float64_side(artifacts: Path) -> bool:
    """Whether the user's file holds the model's float64 side of each output whose length a step
    decides: a file holding neither side was "your file holds one side" (issue 41, sweep 15 H10)."""
    if not (artifacts / SIDES).is_file():
        return True
    marks = typed_tensors(artifacts / DECIDES)
    sides = {name: side for name, side in typed_tensors(artifacts / SIDES).items() if np.ndim(marks.get(name, True)) == 0}
    given = typed_tensors(artifacts / REFERENCE)
    return all(name in given and given[name].shape == side.shape and (
        np.allclose(given[name], side, rtol=1e-5, atol=0, equal_nan=True) if side.dtype.kind == "f" == given[name].dtype.kind
        else np.array_equal(given[name], side)) for name, side in sides.items())


def _against_a_step(decided: str) -> str:
    """The cause of a fail against a user's expected file where float32 rounding decides the output
    in the model's own evaluation (issue 41, sweep 7 N6): the file holds one side of that step, a
    float32 engine may give the other, and no tolerance settles which."""
    return (f"{STEP_CAUSE}{decided} (float32 and float64 take different sides of it): your "
            "expected file holds one side, a float32 engine may give the other; give inputs away from it")


PATTERN_COPIES = "known-issue-patterns"


def _remove_dead_observations(cache: Path) -> None:
    """The observed copies of runs killed while they observed (their lock free): a full copy of the
    model each, never read again (issue 41, sweep 16 J23)."""
    folder = cache / "investigations" / PATTERN_COPIES
    for left in folder.iterdir() if folder.is_dir() else ():
        lock = cache_lock(cache, f"{PATTERN_COPIES}-{left.name}")
        with held_if_free(lock) as free:
            if free:
                shutil.rmtree(left, ignore_errors=True)
                Path(lock.lock_file).unlink(missing_ok=True)


class HeldElsewhere(Exception):
    """A row another run prepares (or holds stopped) for longer than this run waits for it: its cells
    did not run here, and are `skipped`, never a regression (a --strict run goes red)."""


class MatrixRun:
    def __init__(self, plan: Plan, reuse: bool = True, on_event: Events = lambda e: None, executor=None,
                 reprepare: bool = False, observe: bool = True, command: str = "run"):
        """`executor`: where environments run (executors.open_executor); default this host.
        `reprepare`: case files' cases prepared again, though prepared. `observe`: a known issue's
        pattern observed where a failure cannot tell it (_observe_patterns; not in those trials).
        `command`: the trtmatrix command running these cells (an investigation's), as its locks name it."""
        self.plan, self.reuse, self.reprepare, self.observe = plan, reuse, reprepare, observe
        self.command = command
        # Once a stop begins, nothing more is reported: cells its stop broke are no finding.
        self.on_event = lambda event: None if STOPPING.is_set() else on_event(event)
        self.cache = plan.path("cache_dir")
        self.run_id, self.started = new_run_id(), utc_now()
        self.config_digest = matrix_digest(plan.config_path)  # the content judged, read as the run begins
        self.records: dict[str, dict] = {}
        self.result_dirs: dict[str, Path] = {}  # each cell's result folder in the cache (investigations remove trials')
        self._held: dict[str, Path] = {}  # the run's own links to them, which it judges and stores (held_results)
        self._output_digests: dict[Path, str] = {}  # {a cell's output file: its digest, as its result names it}
        self._artifacts: dict[tuple, Path | BaseException] = {}
        self._faults: dict[tuple, str] = {}  # (model ran, optimisation, engine) → the fault patterns in it
        self._pattern_keys: dict[tuple, str] = {}  # (optimisation, engine) → _patterns_key
        self._model_digests: dict[Path, str] = {}
        self._shapes: dict[Path, dict] = {}
        self._metas: dict[Path, dict] = {}
        self._rows = len({(cell.case, cell.params) for cell in plan.cells})  # artifacts at most, for progress
        self.env_logs: dict[str, str] = {}
        self.env_seconds: dict[str, float] = {}  # set-up + all cells, per environment (run.json)
        self._cells = {cell.cell_id: cell for cell in plan.cells}
        self._judging: dict[str, Future] = {}  # cells being judged while their environment runs
        self._judges: ThreadPoolExecutor | None = None
        self.executor = executor or LocalExecutor(plan.config.run.jobs)
        settings = plan.config.run
        self.cell_jobs = settings.cell_jobs or max(1, (os.cpu_count() or 1) // settings.jobs)

    def _record(self, cell: Cell, **fields) -> dict:
        envdef, spec = self.plan.envs[cell.env], self.plan.cases[cell.case]
        tol = self.plan.tolerance(cell)
        record = empty_record(
            run_id=self.run_id, cell_id=cell.cell_id, row_id=cell.row_id, case=cell.case,
            params=dict(cell.params), profile=cell.profile,
            precision=self.plan.profile(cell.profile).precision, env=cell.env, engine=envdef.label,
            env_version=envdef.version,
            atol=tol.atol, rtol=tol.rtol, content_key=cell.content_key, case_key=cell.case_key or None,
            suite=suite_label(spec.entry.suite, spec.entry.suite_dir) if spec.suite is not None else None,
            mask=spec.entry.mask)
        record.update({name: storable(value) if isinstance(value, str) else value for name, value in fields.items()})
        record["verdict"] = record["status"]  # before known issues turn it into xfail/xpass
        self.records[cell.cell_id] = record
        # What the matrix will show: a known issue's failure is announced as xfail, not fail.
        shown = known_status(record, self.plan.known_issues)[0]
        self.on_event({"event": "recorded", "cell_id": cell.cell_id, "status": shown})
        return record

    def _artifacts_for(self, case: str, params, artifact_key: str) -> Path | BaseException:
        key, spec = (case, params), self.plan.cases[case]
        # --reprepare: a case file's build may read what no key sees (a variable, whether a file
        # exists: prepare/files_read.py).
        fresh = self.reprepare and spec.torch_case is not None
        # Ready: no lock, no progress line (thousands of suite tests on a re-run), its case.json kept.
        if key not in self._artifacts and not fresh and (ready := prepared_meta(self.cache, case, artifact_key, warn=True)):
            self._artifacts[key], self._metas[ready[0]] = ready
        if key not in self._artifacts:
            rows = [(params, artifact_key)]  # a case file's other rows too: imported once for all of them
            if spec.torch_case is not None:
                rows += [row for row in dict.fromkeys((c.params, c.artifact_key) for c in self.plan.cells if c.case == case)
                         if row[0] != params and (case, row[0]) not in self._artifacts
                         and (fresh or not prepared(self.cache, case, row[1], warn=True))]
            for row_params, _ in rows:
                self.on_event({"event": "prepare", "case": case, "params": dict(row_params)})
            started = time.perf_counter()
            made = self._prepared_under_locks(spec, rows, fresh)
            for row_params, row_key in rows:
                self._artifacts[(case, row_params)] = made[row_key]
                failed = made[row_key] if isinstance(made[row_key], BaseException) else None
                self.on_event({"event": "prepared", "case": case, "params": dict(row_params),
                               "seconds": (time.perf_counter() - started) / len(rows), "of": self._rows,
                               "error": None if failed is None else " ".join(str(failed).split()) or type(failed).__name__})
        return self._artifacts[key]

    def _prepared_under_locks(self, spec, rows: list, fresh: bool) -> dict[str, Path | BaseException]:
        """prepare_apart's artifacts, made while this run holds their locks. Another run preparing
        them is waited for (then its artifacts are reused) as long as preparing them may take
        (the case's timeout_s for each row): a run that is stopped holds its locks for ever."""
        timeout_s, case = self.plan.config.timeout_s(spec.name), spec.name
        doing = "preparing " + row_words(case, rows[0][0]) + (f" and {len(rows) - 1} more" if len(rows) > 1 else "")

        def waiting(who: str) -> None:
            for row_params, _ in rows:
                self.on_event({"event": "waiting", "case": case, "params": dict(row_params), "for": who})

        try:
            with ExitStack() as locks:
                for _, row_key in sorted(rows, key=lambda row: row[1]):
                    name = ARTIFACT_LOCK + artifact_dir(self.cache, case, row_key).name
                    locks.enter_context(held_for(self.cache, name, doing, waiting, wait_s=timeout_s * len(rows),
                                                 command=self.command))
                try:
                    return prepare_apart(self.plan.config_path, spec, rows, self.cache, timeout_s, fresh)
                except Exception as exc:  # a broken case must not stop the others
                    return {row_key: exc for _, row_key in rows}
        except LockWaitEnded as exc:
            why = f"not run: not prepared within {timeout_s:g} s (timeout_s, for each row): its artifacts' lock is {exc}"
            return {row_key: HeldElsewhere(why) for _, row_key in rows}

    def _model_digest(self, artifacts: Path) -> str:
        if artifacts not in self._model_digests:
            self._model_digests[artifacts] = checked_digests(artifacts, self.cache)[MODEL]
        return self._model_digests[artifacts]

    def _case_meta(self, artifacts: Path) -> dict:
        """An artifact's case.json, read once a run (prepared artifacts are not rewritten in place)."""
        if artifacts not in self._metas:
            self._metas[artifacts] = case_meta(artifacts)
        return self._metas[artifacts]

    def _input_shapes(self, artifacts: Path) -> dict:
        """{input: shape} of an artifact's inputs, read once per run (every TensorRT cell of a case
        asks for all of its rows')."""
        if artifacts not in self._shapes:
            with np.load(artifacts / INPUTS) as data:
                self._shapes[artifacts] = {name: list(data[name].shape) for name in data.files}
        return self._shapes[artifacts]

    def _engine_span(self, cell: Cell, artifacts: Path) -> tuple[tuple[dict, ...], str | None]:
        """TensorRT: the input shapes of the rows of the case that share this cell's model, in the
        case's row order (the engine's optimisation profile spans them; opt is the first), and a
        name for their one engine; ((), None) where the cell's own inputs are all there is."""
        if len(cell.span) < 2:  # one row, or not TensorRT: no model to compare (nor to hash)
            return (), None
        own = self._model_digest(artifacts)
        shapes, keys = [], []
        for params, key in cell.span:
            row = self._artifacts_for(cell.case, params, key)
            if isinstance(row, Path) and self._model_digest(row) == own:
                shapes.append(self._input_shapes(row))
                keys.append(key)
        if len(keys) < 2:
            return (), None
        return tuple(shapes), hash_json([own, keys, cell.profile])[:24]

    def _skip_or_prepare(self, envdef: EnvDef, cells: list[Cell]) -> list[tuple[Cell, Path]]:
        """Cells that can run, with their artifacts; the others are recorded right away."""
        reason = env_skip_reason(envdef)
        runnable = []
        for cell in cells:
            if reason:
                self._record(cell, status="skipped", error=reason)
                continue
            artifacts = self._artifacts_for(cell.case, cell.params, cell.artifact_key)
            if isinstance(artifacts, NoReference):  # nothing to judge against: the case needs `expected`
                self._record(cell, status="no_reference", error=str(artifacts))
                continue
            if isinstance(artifacts, HeldElsewhere):
                self._record(cell, status="skipped", error=str(artifacts))
                continue
            if isinstance(artifacts, BaseException):
                error, tail = (artifacts.error, artifacts.tail) if isinstance(artifacts, PrepareFailed) else \
                    error_text(artifacts)
                self._record(cell, status="error", error=f"prepare failed: {error}", log_tail=tail)
                continue
            try:  # a cell its engine cannot run at all is skipped, whatever its reference (issue 41, sweep 9 B6)
                check_profile(envdef.engine, self.plan.profile(cell.profile).model_dump(mode="json"))
            except Unsupported as exc:
                self._record(cell, status="skipped", error=str(exc))
                continue
            check = self._case_meta(artifacts).get("reference_check") or {}
            # never judged against a value that is not checked: a step's elements are judged apart (_judge)
            if check.get("verdict") == DISPUTED and not (artifacts / STEP_DECIDES).is_file():
                self._record(cell, status="disputed", error=f"reference disputed: {check['text']}",
                             reference=self._case_meta(artifacts).get("reference"), reference_check=check["text"])
                continue
            runnable.append((cell, artifacts))
        return runnable

    def _unit(self, envdef: EnvDef, cells: list[tuple[Cell, Path]], worker_home: Path) -> EnvironmentUnit:
        config = self.plan.config
        pending = tuple(PendingCell(cell, artifacts, self.plan.profile(cell.profile),
                                    tuple(config.cases[cell.case].gpus or ()), config.timeout_s(cell.case),
                                    *self._engine_span(cell, artifacts)) for cell, artifacts in cells)
        return EnvironmentUnit(envdef.name, envdef, pending, self.cache, worker_home, self.run_id, self.reuse,
                               self.cell_jobs, self.command)

    def _done(self, unit: EnvironmentUnit, result: UnitResult) -> None:
        """A unit's outcomes, back from wherever it ran: recorded, or compared and recorded."""
        self.env_seconds[unit.name] = result.seconds
        if result.log is not None:
            self.env_logs[unit.name] = result.log
        cells = {p.cell.cell_id: p for p in unit.cells}
        for outcome in result.outcomes:
            pending = cells[outcome.cell_id]
            if outcome.key is None:
                self._record(pending.cell, **outcome.fields)
            else:
                self.result_dirs[outcome.cell_id] = outcome.result_dir
                self._held[outcome.cell_id] = outcome.held
                self._finish(pending.cell, outcome.fields, pending.artifacts, outcome.key, outcome.reused)

    def _finish(self, cell: Cell, raw: dict, artifacts: Path, key: str, reused: bool = False) -> None:
        directory = self._held[cell.cell_id]
        fields = {name: raw.get(name) for name in REPORTED}
        if isinstance(raw.get(DIGESTS), dict):  # checked against its files where the result was reused
            self._output_digests.update({directory / str(name): digest for name, digest in raw[DIGESTS].items()})
        info, meta, envdef = raw.get("info") or {}, self._case_meta(artifacts), self.plan.envs[cell.env]
        status = raw.get("status", "error")
        if status != "ok" and status not in ORDER:  # a result file no worker of this trtmatrix wrote
            status, fields["error"] = "error", f"its result says status {status!r}, which trtmatrix does not know"
        fields.update(status=status, log_tail=log_tail(directory / LOG),
                      content_key=key, reused=reused, artifact=artifacts.name, precision_check=info.get("precision_check"),
                      layer_precisions=json.dumps(info.get("layer_precisions") or []),
                      # each timed inference's milliseconds: the spread a change between versions must exceed
                      infer_ms_runs=json.dumps(raw["infer_ms_runs"]) if raw.get("infer_ms_runs") else None,
                      # a TensorRT build's own facts (worker/engines/tensorrt_engine.py)
                      engine_bytes=info.get("engine_bytes"),
                      network_layers=json.dumps(info["network_layers"]) if "network_layers" in info else None,
                      build_log="\n".join(info["build_log"]) if info.get("build_log") else None,
                      # A graph check's finding on the cells of the engine versions it concerns (the
                      # torch engine runs no ONNX export); the report says it once per case.
                      graph_warnings="\n".join(w["text"] for w in meta.get("graph_warnings", []) if applies(
                          w, envdef.engine, raw.get("engine_version") or envdef.version)) or None,
                      model_checks=json.dumps([w["text"] for w in meta["graph_warnings"]])
                      if meta.get("graph_warnings") else None,
                      operators=" ".join(meta.get("operators", [])) or None, faults=self._faults_in(cell, artifacts),
                      fp16_forecast=json.dumps(meta.get("fp16_forecast")), reference=meta.get("reference"),
                      reference_check=(meta.get("reference_check") or {}).get("text"),
                      # TensorRT: its optimisation profile, and the row that built the engine rows share
                      shape_profile=json.dumps({"inputs": info["shape_profile"], "built_by": info.get("built_by")})
                      if info.get("shape_profile") else None)
        ran = info.get("precision_ran")
        fields["precision_ran"] = precision_text(ran, meta.get("fp16_forecast"))
        if fields["status"] == "ok":
            try:
                early = self._judging.pop(cell.cell_id, None)
                verdict, judged = early.result() if early else \
                    self._judge(cell, directory, artifacts, self.result_dirs[cell.cell_id])
                fields.update(judged, status=verdict)
                made = self._copy_facts(cell, artifacts) or ({**info, "module": True} if "reduced_values" in info else None)
                if untested := not_converted(made, self.plan.profile(cell.profile).precision):
                    # measured, but not in the profile's precision: no number of it reads as a measurement (sweep 18 L9)
                    fields.update({k: None for k, v in judged.items() if isinstance(v, float)}, outputs="[]",
                                  status="skipped", error=untested)
                elif verdict == "pass" and (itself := judged_against_itself(meta.get("reference_check"), envdef.engine,
                                                                          raw.get("engine_version"))):
                    fields.update(status="no_reference", error=itself)
            except Exception as exc:
                fields.update(status="error", error=judging_error(exc, fields.get("reference")))
        self._record(cell, **fields)

    def _faults_in(self, cell: Cell, artifacts: Path) -> str | None:
        """The registry's fault patterns found in the model this cell ran (the FP16 copy where the
        engine runs one): known issues match a user's own model by what its fault is."""
        envdef, profile = self.plan.envs[cell.env], self.plan.profile(cell.profile)
        if envdef.engine == "torch" or not any(i.fault and i.engine == envdef.label for i in self.plan.known_issues):
            return None
        ran = model_for_profile(artifacts, profile, envdef.runs_fp16_copy(profile))
        key = (ran, profile.optimization, envdef.label)
        if key not in self._faults:  # a model's patterns read once per run, and kept across runs
            memo = faults_memo(self.cache, ran, self._patterns_key(*key[1:]))
            self._faults[key] = json.dumps(remembered(ran, memo, lambda: faults_found(
                onnx.load(str(ran), load_external_data=False), self.plan.known_issues, envdef.label,
                profile.optimization)))
        return self._faults[key]

    def _patterns_key(self, optimization, label: str) -> str:
        """What a remembered finding of fault patterns holds for: the registry's patterns for the
        engine, its settings and the code that looks (made once a run, not once per cell)."""
        if (optimization, label) not in self._pattern_keys:
            patterns = [(i.id, i.fault.model_dump(mode="json")) for i in self.plan.known_issues
                        if i.fault and i.engine == label]
            self._pattern_keys[(optimization, label)] = hash_json([patterns, optimization, label, _fault_code()])
        return self._pattern_keys[(optimization, label)]

    def _judge_early(self, event: dict) -> None:
        """A cell judged as soon as its worker says it ran (the event names its folder), on a
        thread of its own while the environment runs its other cells: comparing hundreds of cells
        one after another once the last one ran would keep every GPU idle meanwhile."""
        if event.get("event") == "done" and event.get("status") == "ok" and event.get("out_dir"):
            cell = self._cells.get(event["cell_id"])
            artifacts = cell and self._artifacts.get((cell.case, cell.params))
            if isinstance(artifacts, Path) and self._judges:
                directory = Path(event["out_dir"])
                self._judging[cell.cell_id] = self._judges.submit(self._judge, cell, directory, artifacts, directory)
        self.on_event(event)

    def _judge(self, cell: Cell, directory: Path, artifacts: Path, memo: Path) -> tuple[str, dict]:
        """compare_files of the outputs in `directory`, or its answer stored in the result's folder
        in the cache (`memo`) for the same outputs, tolerances, rule and code."""
        tol, accept = self.plan.tolerance(cell), self.plan.config.acceptance(cell.case, cell.profile)
        mask = self.plan.config.cases[cell.case].mask
        outputs = json.loads((directory / RESULT).read_text())[DIGESTS][OUTPUTS]
        check = self._case_meta(artifacts).get("reference_check") or {}
        key = hash_json([outputs, tol.atol, tol.rtol, accept.model_dump() if accept else None, mask, _compare_code(),
                         self._case_meta(artifacts).get("digests"), check])  # judged against what, checked how
        stored = stored_judgement(memo, key)
        if stored:
            return stored
        if check.get("verdict") == DISPUTED:  # a step decides some elements (_skip_or_prepare)
            verdict, judged = judged_beside_a_step(directory / OUTPUTS, artifacts / REFERENCE, artifacts / STEP_DECIDES,
                                                   tol.atol, tol.rtol, check["text"], accept,
                                                   mask=mask_array(artifacts / INPUTS, mask))
        else:
            verdict, judged = compare_files(directory / OUTPUTS, artifacts / REFERENCE, tol.atol, tol.rtol, accept,
                                            mask=mask_array(artifacts / INPUTS, mask))
        if verdict == "fail" and (artifacts / SECOND).is_file():  # the model's own evaluation may say whose it is
            verdict, judged = self._blame_expected(directory, artifacts, verdict, judged, (tol, accept, mask))
        elif verdict == "fail" and (decided := case_meta(artifacts).get("reference_check", {}).get("decided")) \
                and _only_where_decided(directory, artifacts, (tol, accept, mask)):
            judged = {**judged, "error": _against_a_step(decided)}
        profile = self.plan.profile(cell.profile)
        copy = copy_path(artifacts, profile, self.plan.envs[cell.env].runs_fp16_copy(profile))
        if copy is not None and copy_facts(copy)[0].is_file():
            judged = self._split_blame(directory, artifacts, copy, verdict, judged, (tol, accept, mask))
        elif verdict == "fail" and not judged.get("error") and \
                (unsplit := (self._copy_facts(cell, artifacts) or {}).get("unsplit")):
            judged = {**judged, "error": f"{unsplit}: how much of this error the conversion makes is not known"}
        beyond = verdict == "fail" and profile.precision == "fp16" and inputs_beyond_fp16(typed_tensors(artifacts / INPUTS))
        if beyond and (not judged.get("error") or judged.get("inf_count") or judged.get("nan_count")):
            # an input FP16 holds as inf is the cause before any constant's rounding (sweep 18 L24)
            judged = {**judged, "error": beyond + (f"; {judged['error']}" if judged.get("error") else "")}
        store_judgement(memo, key, verdict, judged)
        return verdict, judged

    def _copy_facts(self, cell: Cell, artifacts: Path) -> dict | None:
        """What the conversion did to the copy this cell ran (None: it ran the model itself)."""
        profile = self.plan.profile(cell.profile)
        copy = copy_path(artifacts, profile, self.plan.envs[cell.env].runs_fp16_copy(profile))
        facts = copy_facts(copy)[1] if copy is not None else None
        return json.loads(facts.read_text()) if facts is not None and facts.is_file() else None

    @staticmethod
    def _split_blame(directory: Path, artifacts: Path, copy: Path, verdict: str, judged: dict, rules) -> dict:
        """The conversion's error (the copy in float64 against the reference) beside the engine's
        (its outputs against the copy in float64); a failure the conversion alone explains says so."""
        (tol, accept, mask), (copy64, changes) = rules, copy_facts(copy)
        masked = mask_array(artifacts / INPUTS, mask)
        reference = artifacts / SECOND if (artifacts / SECOND).is_file() else artifacts / REFERENCE
        alone, conversion = compare_files(copy64, reference, tol.atol, tol.rtol, accept, mask=masked)
        engine = compare_files(directory / OUTPUTS, copy64, tol.atol, tol.rtol, accept, mask=masked)[1]
        split = {**judged, "conversion_max_abs": conversion["max_abs"], "copy_max_abs": engine["max_abs"]}
        if verdict == "fail" and alone == "fail":
            split["error"] = conversion_cause(json.loads(changes.read_text())["changes"], conversion["max_abs"],
                                              engine["max_abs"], wrong_shape=conversion.get("wrong_shape"))
        return split

    @staticmethod
    def _blame_expected(directory: Path, artifacts: Path, verdict: str, judged: dict, rules) -> tuple[str, dict]:
        """A cell that fails against a user's expected file, but passes against the model's own
        evaluation that the file disagrees with: it fails as the user asked, and its cause names the
        file, not the engine (repro and explain stop there). A file of another shape than the
        outputs: the cell keeps the numbers against the model's own evaluation, the file named."""
        found = _matches_the_model(directory, artifacts, rules)
        if found is None:
            return verdict, judged
        checked, source = found
        if isinstance(judged.get("wrong_shape"), str):
            return verdict, {**checked, "error": (
                f"{EXPECTED_CAUSE}{source} cannot be held against the outputs ({judged['wrong_shape']}), and the "
                f"engine matches the model's own evaluation, which onnxruntime agrees with (max_abs "
                f"{checked['max_abs']:.3g} against it)")}
        return verdict, {**judged, "error": (
            f"{EXPECTED_CAUSE}{source} disagree with the model's own evaluation, which onnxruntime agrees with and "
            f"the engine matches ({distance_text(checked)} against it, {distance_text(judged)} against the file)")}

    def execute(self) -> Path:
        """Run every cell and store the run; returns its folder. Holds the run's lock throughout,
        so a later run can tell this one's leftovers from a live run's; its file is removed however
        the run ends (a stop, a full disk)."""
        reports_dir = self.plan.path("reports_dir")
        lock = run_lock(reports_dir / RUNS, self.run_id)
        with removed_at_end(Path(lock.lock_file)), lock, cache_in_use(self.cache), holding(self.cache, self.run_id):
            remove_dead_partials(reports_dir)
            remove_dead_artifacts(self.cache)
            remove_dead_notes(self.cache)
            remove_left_behind(list(self.plan.envs.values()))
            judged = self._judge_all()
            tag_cache(self.cache)  # laid out as trtmatrix's by now, unless it holds the user's own files
            return self._store(reports_dir, judged)

    def judge(self) -> pd.DataFrame:
        """Run every cell (stored results reused) and return the judged records, known issues
        applied, without writing a run folder: what investigations such as bisect need."""
        # An investigation's trials too: no `cache --free` under them, their results held.
        with cache_in_use(self.cache), holding(self.cache, self.run_id):
            return self._judge_all()

    def _judge_all(self) -> pd.DataFrame:
        by_env: dict[str, list[Cell]] = defaultdict(list)
        for cell in self.plan.cells:
            by_env[cell.env].append(cell)
        running = [self.plan.envs[name] for name in by_env if not env_skip_reason(self.plan.envs[name])]
        return self._judged(by_env, running)

    def _judged(self, by_env: dict[str, list[Cell]], running: list[EnvDef]) -> pd.DataFrame:
        with resolved_together(running, self.cache):
            runnable = {name: self._skip_or_prepare(self.plan.envs[name], cells) for name, cells in by_env.items()}
            with cache_lock(self.cache, "worker"):
                worker_home = stage_worker(self.cache)
        self._judges = ThreadPoolExecutor(JUDGES, thread_name_prefix="judge")
        try:
            self.executor.run_all([self._unit(self.plan.envs[name], cells, worker_home)
                                   for name, cells in runnable.items() if cells], self._judge_early, self._done)
        finally:  # every early judgement was taken by _done, or the run is stopping
            self._judges.shutdown(wait=False, cancel_futures=True)
            self._judges = None
        if self.observe:
            self._observe_patterns()
        ordered = [self.records[cell.cell_id] for cell in self.plan.cells]
        return with_unchecked_patterns(apply_known_issues(to_frame(ordered), self.plan.known_issues),
                                       self.plan.known_issues)

    def _observe_patterns(self) -> None:
        """Each failing cell whose failure a known issue's pattern reaches beside another node gets
        the pattern's own output observed on its engine, in `fault_observed`: off, the issue is
        evidenced (xfail); right, the failure is something else (known_issues.to_observe). One trial
        run per environment, profile and tolerance, whatever the number of such cells."""
        groups = defaultdict(list)
        for cell_id, issue in to_observe(list(self.records.values()), self.plan.known_issues):
            cell = self._cells[cell_id]
            tol = self.plan.tolerance(cell)
            groups[(cell.env, cell.profile, tol.atol, tol.rtol)].append((cell, issue))
        if not groups:
            return
        _remove_dead_observations(self.cache)
        lock = cache_lock(self.cache, f"{PATTERN_COPIES}-{self.run_id}")
        with lock:  # while its copies are there: a run killed meanwhile leaves them to the next one
            for group in groups.values():
                for (cell, issue), seen in zip(group, self._observed_patterns(group)):
                    record = self.records[cell.cell_id]
                    record["fault_observed"] = json.dumps({**json.loads(record.get("fault_observed") or "{}"),
                                                           issue.id: seen})
        Path(lock.lock_file).unlink(missing_ok=True)

    def _explains(self, cell: Cell, tensors: list[str], seen: Path) -> bool | None:
        """pattern_copy.pattern_explains for the cell, with its tolerance, reference and mask."""
        artifacts, tol = self._artifacts[(cell.case, cell.params)], self.plan.tolerance(cell)
        return pattern_explains(onnx.load(str(artifacts / MODEL)), typed_tensors(artifacts / INPUTS), tensors, seen,
                                typed_tensors(artifacts / REFERENCE), tol.atol, tol.rtol,
                                mask_array(artifacts / INPUTS, self.plan.config.cases[cell.case].mask),
                                typed_tensors(self._held[cell.cell_id] / OUTPUTS),
                                typed_tensors(artifacts / STEP_DECIDES) if (artifacts / STEP_DECIDES).is_file() else None)

    def _observed_patterns(self, group: list[tuple[Cell, KnownIssue]]) -> list[dict]:
        """pattern_copy.observation of each (cell, entry): copies of the cells' models with the
        pattern's own outputs added, run as trials of the first cell (its environment, profile and
        tolerance) and judged like explain's; or why none was seen."""
        folder = self.cache / "investigations" / PATTERN_COPIES / self.run_id
        seen, copies, made, trial_artifacts = [], {}, [folder], []
        for index, (cell, issue) in enumerate(group):
            artifacts, profile = self._artifacts[(cell.case, cell.params)], self.plan.profile(cell.profile)
            seen.append({"tensors": []})
            try:
                model = onnx.load(str(artifacts / MODEL))
                ran = model_for_profile(artifacts, profile, self.plan.envs[cell.env].runs_fp16_copy(profile))
                ran_model = onnx.load(str(ran))
                seen[index].update(tensors=pattern_tensors(ran_model, model, issue.fault),
                                   inputs=pattern_inputs(ran_model, model, issue.fault))
                copies[index] = write_observed_copy(model, artifacts / INPUTS, seen[index]["tensors"], folder / str(index),
                                                    seen[index]["inputs"])
            except Exception as exc:  # noqa: BLE001 - the cell keeps its verdict, and says why nothing was seen
                seen[index]["error"] = f"{type(exc).__name__}: {exc}"
        try:
            if copies:
                trials = plan_of_trials(self.plan, group[0][0].cell_id,
                                        models={f"{group[i][0].case}.observed{i}": files for i, files in copies.items()})
                trial_artifacts += [artifact_dir(self.cache, trial.case, trial.artifact_key) for trial in trials.cells]
                run = MatrixRun(trials, executor=self.executor, observe=False)
                try:
                    frame = run.judge().set_index("case")
                finally:
                    made += run.result_dirs.values()
                tol = self.plan.tolerance(group[0][0])
                for i in copies:
                    row, (cell, _) = frame.loc[f"{group[i][0].case}.observed{i}"], group[i]
                    judged = row["verdict"] in ("pass", "fail")
                    changed = computed_otherwise(self._held[cell.cell_id] / OUTPUTS, run.result_dirs[row["cell_id"]] / OUTPUTS,
                                                 tol.atol, tol.rtol) if judged else None
                    explains = self._explains(cell, seen[i]["tensors"], run.result_dirs[row["cell_id"]] / OUTPUTS) \
                        if judged else None
                    seen[i] = observation(row, seen[i]["tensors"], seen[i]["inputs"], changed, explains)
        except Exception as exc:  # noqa: BLE001 - as above, for every cell of the trial run
            for i in copies:
                seen[i]["error"] = f"{type(exc).__name__}: {exc}"
        finally:  # the records keep the numbers; the observed copies and their trials are not kept
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
            for path in trial_artifacts:
                remove_artifact(self.cache, path)
        return seen

    def _model_files(self) -> dict[str, str]:
        """{artifact: the ONNX file of its model}: the user's own file, or the export trtmatrix made
        (in the cache); what the report's ready-to-paste trtexec and Polygraphy lines name. A
        suite's thousands of tests are left out (their forecasts name model.onnx)."""
        files = {}
        for (case, params), artifacts in self._artifacts.items():
            spec = self.plan.cases[case]
            if isinstance(artifacts, Path) and spec.suite is None:
                files[artifacts.name] = str(spec.onnx_paths(params)["onnx"] if spec.is_onnx_file else artifacts / MODEL)
        return files

    def _store(self, reports_dir: Path, frame: pd.DataFrame) -> Path:
        artifacts = [a for a in self._artifacts.values() if isinstance(a, Path)]
        references = [a / REFERENCE for a in artifacts]
        known = {**self._output_digests, **{a / name: digest for a in artifacts
                                              for name, digest in file_digests(a, self.cache).items()}}
        meta = {"run_id": self.run_id, SEQUENCE: next_sequence(reports_dir), "started": self.started,
                "finished": utc_now(), "host": HOST,
                "config": str(self.plan.config_path), "config_digest": self.config_digest, "environments": list(self.plan.envs),
                "environment_seconds": self.env_seconds, "plan_key": self.plan.plan_key,
                "left_out": self.plan.left_out, "models": self._model_files(),
                **({"shard": self.plan.shard, "empty_shards": list(self.plan.empty_shards)} if self.plan.shard else {}),
                "trtmatrix": trtmatrix_version()}
        return publish_staged(stage_run(reports_dir, meta, frame, self._held, self.env_logs, references, known), frame,
                              speed_tests(self.cache))
