"""A case file's artifacts prepared in a child process of their own: its build function is the
user's code, and run in trtmatrix's own process it could take that process hostage (a build that
never returns, a segfault that ends the run with exit 139, a signal disposition it changes, a
warnings filter that turns trtmatrix's own warnings into errors). In a child it has a deadline
(the case's `timeout_s`, else the matrix's), a signal ends it, and a crash is that case's `error`; the parent removes
the half-made artifacts a killed child leaves. ONNX-file and suite cases run no user code and are
prepared in the process itself, but for an ONNX file that holds a Loop or a Scan: its float64
reference iterates as often as its inputs say (a trip count of three million took three minutes
with timeout_s 20), so it gets the child and its deadline too; so does one that holds a
NonMaxSuppression, which onnx.reference runs in quadratic Python.

Run as `python -m matrix.executors.prepare_apart '<json>'` by prepare_apart()."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import traceback
from pathlib import Path

import onnx

from ..graph_walk import slow_in_float64
from ..prepare import artifact_dir, prepare, prepared
from ..reference import NoReference
from ..reference.referee import referee_label
from ..reference.referee_process import RefereeTimedOut, referee_deadline
from ..sources import CaseSpec, Params, case_specs
from ..stops import end_with_parent, run_apart
from ..worker.oom import oom_kills, oom_note


LOW_DISK = 2 << 30  # bytes: less left than a large model's artifacts take
# The phases of prepare (prepare/__init__.py) that make or check the reference: a deadline there is
# no engine's error and no fault of the case, only no reference to judge against (no_reference).
FLOAT64_PHASES = ("the model's float64 evaluation", "its PyTorch reference")
CHECK_PHASE = "its reference check against "


class PrepareFailed(Exception):
    """The child's own words: its error line and the end of its traceback."""

    def __init__(self, error: str, tail: str = ""):
        self.error, self.tail = error, tail
        super().__init__(error)


Row = tuple[Params, str]  # (the row's parameters, its artifact key)


def prepare_apart(config_path: Path, spec: CaseSpec, rows: list[Row], cache_dir: Path,
                  timeout_s: float, fresh: bool = False) -> dict[str, Path | Exception]:
    """{artifact key: the artifacts, or why they could not be made} of `rows` of one case. A case
    file's rows are prepared in one child process (the file imported once for all of them), with
    `timeout_s` for each row; other cases' in this process. `fresh`: made again though ready."""
    if spec.torch_case is None and not _iterates(spec):
        return {key: _here(spec, params, key, cache_dir, timeout_s) for params, key in rows}
    job = {"config": str(config_path), "case": spec.name, "cache": str(cache_dir), "fresh": fresh, "unchecked": {}}
    if spec.is_onnx_file:  # its files say it all: an investigation's trial case is in no matrix file
        job.update(entry=spec.entry.model_dump(mode="json"), root=str(spec.root))
    oom_before = oom_kills()
    said: dict[str, dict] = {}
    pending = rows
    while True:
        ended, told = _child(spec, pending, cache_dir, timeout_s, job)
        said.update(told)
        cut = next((key for key, item in told.items() if "phase" in item), None)
        # A user's expected outputs are the reference: a deadline in their extra check (the model's
        # own evaluation against the referee) drops that extra only, and the row is made again
        # without it, so its cells run and are judged against the file (issue 41, sweep 8 A12).
        # So does a deadline in the float64 evaluation itself, which only that check reads (a Loop that
        # onnx.reference runs trip by trip: issue 41, sweep 12 E12 made such loops run).
        cut_in = told[cut]["phase"] if cut is not None else ""
        if ended.returncode is not None or cut is None or cut in job["unchecked"] or not spec.entry.expected \
                or not cut_in.startswith((CHECK_PHASE, FLOAT64_PHASES[0])):
            break
        job["unchecked"][cut] = _unchecked(cut_in, timeout_s)
        pending = [row for row in pending if row[1] == cut or row[1] not in told]
    unmade: NoReference | None = None  # a deadline that cut the reference off
    if ended.returncode is None:
        never = next((item["phase"] for item in reversed(said.values()) if "phase" in item), "the case file's import")
        why = f"not prepared within {timeout_s:g} s (timeout_s, for each row): {never} never returned"
        unmade = _reference_cut_off(never, timeout_s, spec)
    elif ended.returncode < 0:
        killed = signal.Signals(-ended.returncode)
        why = (f"the process preparing it was killed by {killed.name} (the case's build or export crashed)"
               + (oom_note(oom_before) if killed == signal.SIGKILL else "") + _disk_note(cache_dir))
    else:
        why = f"the process preparing it ended (exit {ended.returncode}) without a word"
    made: dict[str, Path | Exception] = {}
    for _, key in rows:
        item = said.get(key)
        if item is not None and "phase" in item and unmade is not None:
            made[key] = unmade
        elif item is None or "phase" in item:  # none, or what it had begun
            made[key] = PrepareFailed(why)
        elif "no_reference" in item:
            made[key] = NoReference(item["no_reference"])
        elif "error" in item:
            made[key] = PrepareFailed(item["error"], item.get("tail", ""))
        else:
            made[key] = prepared(cache_dir, spec.name, key) or PrepareFailed("its artifacts are not in the cache")
    return made


def _child(spec: CaseSpec, rows: list[Row], cache_dir: Path, timeout_s: float, job: dict):
    """One child preparing `rows` (timeout_s each): how it ended, and {key: its last JSON line}."""
    try:
        ended = run_apart(__name__, [json.dumps({**job, "rows": [[list(p), k] for p, k in rows]})],
                          timeout_s * len(rows))
    finally:  # a deadline, a stop, or the end: no half-made artifacts of the child stay
        for _, key in rows:
            folder = artifact_dir(cache_dir, spec.name, key)
            shutil.rmtree(folder.with_name(folder.name + ".tmp"), ignore_errors=True)
    sys.stderr.write(ended.err)  # what the case file printed, as it would have in this process
    said = {}
    for line in ended.out.splitlines():
        try:
            said.update({(item := json.loads(line))["key"]: item})
        except (ValueError, TypeError, KeyError):
            continue  # the case's own print
    return ended, said


def _unchecked(phase: str, timeout_s: float) -> str:
    """Why a user's expected outputs are judged against without their extra check: a deadline in it."""
    return (f"the model's own evaluation was not checked against {phase[len(CHECK_PHASE):]} within "
            f"timeout_s = {timeout_s:g} s: its check was stopped" if phase.startswith(CHECK_PHASE) else
            f"the model's own float64 evaluation did not end within timeout_s = {timeout_s:g} s, so "
            f"your file is not checked against {referee_label()}: it was stopped") + \
        ", and the cells are judged against your file alone"


def _reference_cut_off(phase: str, timeout_s: float, spec: CaseSpec) -> NoReference | None:
    """The row's status where the deadline ended a reference phase: the engines never ran, and a
    slow float64 evaluation (a Loop of two million trips onnxruntime runs in 2 s) is no error.
    (A stopped check of `expected` outputs never comes here: prepare_apart prepares the row again
    without it.)"""
    table = f"its [cases.{spec.name}] table" if spec.entry.timeout_s else "the [run] table"
    limit = f"within timeout_s = {timeout_s:g} s (for each row): {phase} was stopped, before any engine ran; " \
            f"raise timeout_s ({table})"
    if phase.startswith(FLOAT64_PHASES):
        return NoReference(f"not evaluated in float64 {limit}")
    if phase.startswith(CHECK_PHASE):
        return NoReference(f"the reference was not checked against {phase[len(CHECK_PHASE):]} {limit}")
    return None


def _disk_note(cache_dir: Path) -> str:
    """'; the cache's disk has 120 MiB free: full?' where little is left: PyTorch's writer aborts
    ("unexpected pos") when the disk fills under a gigabyte model, and says nothing of the disk."""
    try:
        free = shutil.disk_usage(cache_dir).free
    except OSError:
        return ""
    return f"; the disk holding {cache_dir} has {free >> 20} MiB free: full?" if free < LOW_DISK else ""


def _iterates(spec: CaseSpec) -> bool:
    """An ONNX-file case whose float64 evaluation may run for long (graph_walk.slow_in_float64)."""
    if spec.suite is not None or not spec.entry.onnx:
        return False
    try:
        model = onnx.load(str(spec.onnx_paths(spec.param_grid()[0])["onnx"]), load_external_data=False)
    except Exception:  # noqa: BLE001 - prepare itself then says what is wrong with the file
        return False
    return slow_in_float64(model) is not None


def _here(spec: CaseSpec, params: Params, key: str, cache_dir: Path, timeout_s: float,
          unchecked: str | None = None) -> Path | Exception:
    """A row prepared in this process, the referee's answers waited for `timeout_s` at most: a deadline
    there as in a child (issue 41, sweep 12 E9: a stopped referee held the run for good)."""
    try:
        with referee_deadline(timeout_s):
            return prepare(spec, params, key, cache_dir, unchecked=unchecked)
    except RefereeTimedOut as exc:
        phase = CHECK_PHASE + referee_label()
        if spec.entry.expected and unchecked is None:  # prepared again, judged against the user's file alone
            return _here(spec, params, key, cache_dir, timeout_s, _unchecked(phase, timeout_s))
        return _reference_cut_off(phase, timeout_s, spec) or exc
    except Exception as exc:  # a broken case must not stop the others
        return exc


def main(job: dict) -> int:
    """Each row prepared in turn, a JSON line each: {"key", "phase"} as it begins one, then {"key"},
    {"key", "no_reference"} or {"key", "error", "tail"}."""
    from ..config import CaseEntry, load_config

    config_path = Path(job["config"])
    spec = None
    for params, key in job["rows"]:
        try:
            if spec is None and "entry" in job:
                spec = CaseSpec(job["case"], CaseEntry.model_validate(job["entry"]), Path(job["root"]))
            if spec is None:
                spec = case_specs(load_config(config_path), config_path, set(), only=[job["case"]])[job["case"]]
            prepare(spec, tuple(tuple(pair) for pair in params), key, Path(job["cache"]),
                    lambda phase: print(json.dumps({"key": key, "phase": phase}), flush=True), job.get("fresh", False),
                    job.get("unchecked", {}).get(key))
            print(json.dumps({"key": key}), flush=True)
        except NoReference as exc:  # a status of its own, not a failure of the case's code
            print(json.dumps({"key": key, "no_reference": str(exc)}), flush=True)
        except BaseException as exc:  # noqa: BLE001 - whatever the case's code raised, SystemExit included
            print(json.dumps({"key": key, "error": f"{type(exc).__name__}: {exc}",
                              "tail": "".join(traceback.format_exception(exc)[-6:])}), flush=True)
    return 0


if __name__ == "__main__":
    end_with_parent()
    code = main(json.loads(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # not waiting for threads the case's code started (prepare_apart ends what it left)
