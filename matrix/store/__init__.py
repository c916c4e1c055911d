"""Records → pandas → `reports/runs/<run-id>/`, and reading runs back.

A run folder holds the results (parquet, JSON lines, CSV, JSON), per-cell files, per-environment
logs, the float64 references (so `trtmatrix report` can re-apply tolerances later) and
report.html (rendered afterwards by matrix.report: storing never renders). It is assembled under
a temporary name and renamed at the end, so an interrupted run leaves nothing that looks like a
finished run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import ConfigError
from ..worker.files import INPUTS, LOG, OUTPUTS, REPEATS, file_digest
from .hashing import hash_json
from .locks import is_free, run_lock
from .records import COLUMNS
from .swap import settle
from .table_check import foreign_rows, table_problem

RUNS = "runs"
PARQUET, JSONL, CSV, JSON, REPORT = "results.parquet", "results.jsonl", "results.csv", "results.json", "report.html"
REFS, CELLS = "refs", "cells"
# Where a step decides elements of a float64 reference that no expected file stands beside: those
# elements (the others are judged: compare.judged_beside_a_step), beside the artifact and in refs/.
STEP_DECIDES = "step-decides.npz"
STEP_SIDE = "step-side.npz"  # and the referee's float32 side of those outputs
# What a run folder keeps of each cell's result folder, as cells/<key><suffix>.
CELL_FILES = {OUTPUTS: ".npz", REPEATS: ".repeats.npz", LOG: ".log"}
RUN_META = "run.json"
# {path in the run folder: digest} of the arrays a run judged from (cells/, refs/): `report` re-judges
# only from the files the run stored.
DIGESTS = "digests.json"
SEQUENCE = "sequence"  # run.json: the run's place among its folder's runs (next_sequence)
EXPORTS = {"parquet": PARQUET, "jsonl": JSONL, "csv": CSV, "json": JSON}


def folder_problem(path: Path) -> str | None:
    """Why `path` cannot take a run's output, or None: checked before a run, not after it."""
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{path} cannot be created: {exc.strerror}"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    return None


def to_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    frame["params"] = frame["params"].map(lambda p: json.dumps(p or {}, sort_keys=True))
    frame = frame.astype({"nan_count": "Int64", "inf_count": "Int64", "ref_nonfinite": "Int64", "left_out": "Int64", "drift_run": "Int64", "runs": "Int64",
                          "engine_bytes": "Int64",
                          "drift_max_abs": float, "conversion_max_abs": float, "copy_max_abs": float, "reused": bool})
    return frame


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file beside `path`, then rename it over `path`: a reader, a crash
    or a full disk never leaves a truncated file under the real name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    replace_atomically(path, lambda tmp: tmp.write_text(text))


def _write_text(target, text: str) -> None:
    """To a path, or to an open text stream (export's stdout)."""
    if hasattr(target, "write"):
        target.write(text)
    else:
        Path(target).write_text(text)


def _json_records(frame: pd.DataFrame) -> list[dict]:
    """The rows with every digit a float64 has (pandas' to_json keeps 10 decimals: a max_abs of
    7e-13 became 0); a missing value, NaN or ±inf is null, as pandas writes them. Made through
    Arrow, whose rows are plain Python values already (pandas' to_dict boxes each value: twice as
    long)."""
    def plain(value):
        return None if isinstance(value, float) and not math.isfinite(value) else value
    return [{key: plain(value) for key, value in row.items()}
            for row in pa.Table.from_pandas(frame, preserve_index=False).to_pylist()]


def export(frame: pd.DataFrame, path, kind: str, records: list[dict] | None = None) -> None:
    """`records`: _json_records(frame), where the caller has them already."""
    if kind in ("jsonl", "json") and records is None:
        records = _json_records(frame)
    if kind == "parquet":
        frame.to_parquet(path, index=False)
    elif kind in ("jsonl", "json"):
        _write_text(path, _json_text(kind, [json.dumps(record) for record in records]))
    elif kind == "csv":
        frame.to_csv(path, index=False)
    else:
        raise ValueError(f"unknown export format {kind!r}; one of {', '.join(EXPORTS)}")


def _json_text(kind: str, lines: list[str]) -> str:
    """JSON lines, or one JSON array with a record a line (json's own C encoder: with an indent it
    encodes in Python, a third of an unchanged re-run's writing)."""
    return "".join(line + "\n" for line in lines) if kind == "jsonl" else "[\n" + ",\n".join(lines) + "\n]\n"


def write_tables(run_dir: Path, frame: pd.DataFrame) -> None:
    lines = [json.dumps(record) for record in _json_records(frame)]  # the two JSON files hold the same records
    for kind, name in EXPORTS.items():
        if kind in ("jsonl", "json"):
            replace_atomically(run_dir / name, lambda tmp: _write_text(tmp, _json_text(kind, lines)))
        else:
            replace_atomically(run_dir / name, lambda tmp: export(frame, tmp, kind))


def stage_run(reports_dir: Path, meta: dict, frame: pd.DataFrame, result_dirs: dict[str, Path],
              env_logs: dict[str, str], references: list[Path], known: dict[Path, str] | None = None) -> Path:
    """Write a run folder under its temporary name `<run-id>.partial`; finish_run gives it its name.
    `references`: each artifact's reference file; its inputs file beside it is kept too (a case's
    mask input, when `report` re-judges). `known`: {file: its file_digest} of files linked here
    whose digests this run has checked already (a cell's outputs, an artifact's files): not read
    again for DIGESTS."""
    tmp = reports_dir / RUNS / f"{meta['run_id']}.partial"
    try:
        _write_run_files(tmp, meta, frame, result_dirs, env_logs, references, known or {})
    except BaseException:  # a full disk, say: nothing half-written stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _write_run_files(tmp: Path, meta: dict, frame: pd.DataFrame, result_dirs: dict[str, Path],
                     env_logs: dict[str, str], references: list[Path], known: dict[Path, str]) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    for folder in (tmp / CELLS, tmp / REFS, tmp / "envs"):
        folder.mkdir(parents=True)
    # Flat folders, a link per file: a run of thousands of cells is written in a few thousand
    # file-system operations, not tens of thousands (a folder per cell cost 0.4-1.5 s per 1,500).
    linked = {}  # {file in the run folder: the file it links}
    for directory in set(result_dirs.values()):
        for name, suffix in CELL_FILES.items():
            if (directory / name).is_file():
                linked[tmp / CELLS / f"{directory.name}{suffix}"] = directory / name
    for env, log in env_logs.items():  # the worker's / container's own output, per environment
        (tmp / "envs" / f"{env}.log").write_text(log)
    for reference in references:
        linked[tmp / REFS / f"{reference.parent.name}.npz"] = reference
        if (inputs := reference.with_name(INPUTS)).is_file():
            linked[run_inputs(tmp, reference.parent.name)] = inputs
            if mask_sidecar(inputs).is_file():
                linked[mask_sidecar(run_inputs(tmp, reference.parent.name))] = mask_sidecar(inputs)
        if (decides := reference.with_name(STEP_DECIDES)).is_file():
            linked[run_step_decides(tmp, reference.parent.name)] = decides
            if (side := reference.with_name(STEP_SIDE)).is_file():
                linked[run_step_side(tmp, reference.parent.name)] = side
    for link, source in linked.items():
        _link_or_copy(source, link)
    write_tables(tmp, frame)
    write_digests(tmp, {link: known[source] for link, source in linked.items() if source in known})
    (tmp / RUN_META).write_text(json.dumps(meta, indent=1))


def write_digests(run_dir: Path, known: dict[Path, str] | None = None) -> None:
    """DIGESTS of the arrays under cells/ and refs/ (logs are not judged from); `known`: {file: its
    digest} where it was checked already."""
    known = known or {}
    digests = {str(path.relative_to(run_dir)): known.get(path) or file_digest(path) for kind in (CELLS, REFS)
               for path in sorted((run_dir / kind).rglob("*.npz")) if path.is_file()}
    (run_dir / DIGESTS).write_text(json.dumps(digests, indent=0))


def stored_digests(run_dir: Path) -> dict[str, str]:
    """The run's DIGESTS; {} for a run of an older trtmatrix, which kept none (nor a sequence: both came
    in one change). DamagedRun where the file is there and is not what trtmatrix writes, or gone from a
    run that kept one: its outputs were re-judged unchecked, a replaced one turning fail to pass
    (issue 41, sweep 16 J21)."""
    path = run_dir / DIGESTS
    if not path.exists():
        if not path.is_symlink() and _run_json(run_dir).get(SEQUENCE) is None:
            return {}
        raise DamagedRun(path, "", "is missing, so the run's stored outputs cannot be checked, a damaged run?")
    try:
        digests = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DamagedRun.of(path, exc) from None
    if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
        raise DamagedRun(path, "", "not a JSON object of digests, a damaged run?")
    return digests


def cell_file(run_dir: Path, content_key: str, name: str) -> Path:
    """A file of a cell's result (OUTPUTS, REPEATS, LOG) in a run folder; runs written before the
    flat layout kept a folder per cell, cells/<key>/<name>."""
    flat, legacy = run_dir / CELLS / f"{content_key[:24]}{CELL_FILES[name]}", run_dir / CELLS / content_key[:24] / name
    return legacy if legacy.is_file() and not flat.is_file() else flat


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    if not zipfile.is_zipfile(path):  # numpy would take it for a pickle and advise loading it unsafely
        raise ValueError("not an .npz archive")
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def npz_problem(path: Path) -> str | None:
    """Why a stored .npz (a cell's outputs, a reference) cannot be read, or None: every array is
    read, so a file damaged anywhere is found."""
    try:
        _npz_arrays(path)
    except Exception as exc:  # noqa: BLE001 - whatever a damaged file raises (zip, zlib, numpy's format)
        return " ".join(str(exc).split())[:200] or type(exc).__name__
    return None


def stored_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of a stored .npz; DamagedRun saying why (as npz_problem) where it cannot be read."""
    try:
        return _npz_arrays(path)
    except Exception:  # noqa: BLE001 - whatever a damaged file raises (zip, zlib, numpy's format)
        raise DamagedRun(path, "", f"cannot be read, a damaged run? ({npz_problem(path)})") from None


def run_reference(run_dir: Path, artifact: str) -> Path:
    """An artifact's float64 reference in a run folder; older runs kept refs/<artifact>/."""
    flat, legacy = run_dir / REFS / f"{artifact}.npz", run_dir / REFS / artifact / "reference.npz"
    return legacy if legacy.is_file() and not flat.is_file() else flat


def only_reference_changed(earlier: Path, then: tuple[str, str], run_dir: Path, now: tuple[str, str]) -> bool:
    """Whether a cell was judged in two runs against other reference values for the very outputs of
    the engine ((artifact, content key) then and now): a trtmatrix of other reference code evaluated
    the model otherwise, and nothing of the engine's changed (issue 41, sweep 12 E5: a sequence op's
    float64 evaluation, new, read as the engine's regression; sweep 14 G1: not where the engine's
    outputs moved too, a real regression the same night). False where a file is missing."""
    if then[0] == now[0]:
        return False
    try:
        return not _same_arrays(stored_arrays(run_reference(earlier, then[0])), stored_arrays(run_reference(run_dir, now[0]))) \
            and _same_arrays(stored_arrays(cell_file(earlier, then[1], OUTPUTS)), stored_arrays(cell_file(run_dir, now[1], OUTPUTS)))
    except (DamagedRun, OSError):
        return False


def _same_arrays(one: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> bool:
    return one.keys() == other.keys() and all(
        one[name].shape == other[name].shape and np.array_equal(one[name], other[name], equal_nan=one[name].dtype.kind in "fc")
        for name in one)


def run_step_decides(run_dir: Path, artifact: str) -> Path:
    """The elements a step decides in an artifact's float64 reference (prepare's STEP_DECIDES)."""
    return run_dir / REFS / f"{artifact}.{STEP_DECIDES}"


def run_step_side(run_dir: Path, artifact: str) -> Path:
    """The referee's float32 side of those outputs (prepare's STEP_SIDE)."""
    return run_dir / REFS / f"{artifact}.{STEP_SIDE}"


def mask_sidecar(inputs: Path) -> Path:
    """Beside an inputs file (an artifact's, a run folder's refs/<artifact>.inputs.npz): the outputs
    the mask leaves alone, where there are any (prepare.mask_left_alone)."""
    return inputs.with_suffix(".mask.json")


def run_inputs(run_dir: Path, artifact: str) -> Path:
    """An artifact's inputs in a run folder (runs before input sets and masks kept none)."""
    return run_dir / REFS / f"{artifact}.inputs.npz"


def _link_or_copy(source, destination) -> None:
    """Cached results and artifacts are never rewritten in place (a re-run cell gets a new folder),
    so a run folder may share their files: a hard link where the file system allows, else a copy."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def remove_dead_partials(reports_dir: Path) -> list[str]:
    """`<run id>.partial` folders of runs that died before finishing (their run lock is free):
    removed, since nothing in them is lost — the cells they finished are in the result cache, and
    the next run reuses them. Returns the run ids."""
    runs = reports_dir / RUNS
    if not runs.is_dir():
        return []
    # A run killed outright (SIGKILL, SIGQUIT, an exit 3) may leave its lock file with or without
    # a partial folder: both are looked at.
    run_ids = {p.name.removesuffix(".partial") for p in runs.glob("*.partial")}
    run_ids |= {p.name[1:].removesuffix(".lock") for p in runs.glob(".*.lock")}
    removed = []
    for run_id in sorted(run_ids):
        lock = run_lock(runs, run_id)
        if is_free(lock):
            shutil.rmtree(runs / f"{run_id}.partial", ignore_errors=True)
            Path(lock.lock_file).unlink(missing_ok=True)
            removed.append(run_id)
    return removed


def finish_run(staged: Path) -> Path:
    final = staged.with_name(staged.name.removesuffix(".partial"))
    staged.rename(final)
    return final


class DamagedRun(ConfigError):
    """A stored run whose files cannot be read (truncated, corrupt): named, never a traceback."""

    @classmethod
    def of(cls, path: Path, exc: Exception) -> DamagedRun:
        return cls(path, "", f"cannot be read, a damaged run? ({' '.join(str(exc).split())[:200]})")


def read_run(run_dir: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A stored run's results (all columns, or those asked for); columns that a run of an older
    trtmatrix did not have are empty. DamagedRun where its results file cannot be read or holds
    another run's rows."""
    path = run_dir / PARQUET
    try:
        stored = pq.read_schema(path).names
        reading = list(dict.fromkeys(c for c in [*columns, "run_id"] if c in stored)) if columns else None
        frame = pd.read_parquet(path, columns=reading)  # run_id too: whose rows they are is checked
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise DamagedRun.of(path, exc) from None
    if problem := table_problem(frame, stored, columns):
        raise DamagedRun(path, "", f"{problem}, a damaged run?")
    if problem := foreign_rows(frame, _run_json(run_dir).get("run_id")):
        raise DamagedRun(path, "", problem)
    if columns and "run_id" not in columns and "run_id" in frame:
        frame = frame.drop(columns="run_id")
    missing = [column for column in columns or COLUMNS if column not in frame.columns]
    return frame.assign(**dict.fromkeys(missing)) if missing else frame


def _recorded_order(run_dir: Path) -> tuple:
    """(sequence, start, id) as the run recorded them: a folder's name says nothing (a copy named
    `keep-good`, a host whose clock said 2099). Runs of an older trtmatrix have no sequence: before
    every run that has one. DamagedRun where run.json cannot be read."""
    meta = read_run_meta(run_dir)
    sequence = meta.get(SEQUENCE)
    return (sequence if type(sequence) is int else 0, str(meta.get("started", "")), run_dir.name)


def _runs_and_damaged(reports_dir: Path) -> tuple[list[Path], list[tuple[Path, DamagedRun]]]:
    """(the finished runs, oldest first; each run folder that lost or broke its run.json or results
    file, with what is wrong). A run writes both before its folder gets its name: one missing was
    removed since."""
    runs, damaged = [], []
    runs_dir = reports_dir / RUNS
    for run_dir in sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []:
        if not run_dir.is_dir() or run_dir.name.startswith(".") or run_dir.name.endswith(".partial"):
            continue
        settle(run_dir)  # a re-judging a kill cut off: finished or rolled back before the run is read
        if missing := [name for name in (RUN_META, PARQUET) if not (run_dir / name).is_file()]:
            damaged.append((run_dir, DamagedRun(run_dir, "", f"{' and '.join(missing)} missing, a damaged run?")))
            continue
        try:
            runs.append((_recorded_order(run_dir), run_dir))
        except DamagedRun as exc:
            damaged.append((run_dir, exc))
    return [run_dir for _, run_dir in sorted(runs, key=lambda pair: pair[0])], damaged


def list_runs(reports_dir: Path, warn: bool = False) -> list[Path]:
    """Finished runs, oldest first, in the order they recorded (_recorded_order). A run folder that
    lost or broke its run.json or results is none; `warn`: each is named in a warning line (a
    command reading the runs of a folder, whose newest it might have been)."""
    runs, damaged = _runs_and_damaged(reports_dir)
    for _, exc in damaged if warn else ():
        left_out(exc)
    return runs


def next_sequence(reports_dir: Path) -> int:
    """A new run's place among the runs of its reports folder: after every one stored there, whatever
    the clock says."""
    return max((_recorded_order(run)[0] for run in list_runs(reports_dir)), default=0) + 1


def find_run(reports_dir: Path, run: str | None) -> Path:
    """A run by id, id prefix or path; the newest when None."""
    if run is None:
        if not (runs := list_runs(reports_dir, warn=True)):
            raise FileNotFoundError(f"no runs under {reports_dir / RUNS}")
        return runs[-1]
    if Path(run).is_dir() and (Path(run) / PARQUET).is_file():
        return settle(Path(run))
    runs, damaged = _runs_and_damaged(reports_dir)
    matches = [p for p in runs if p.name.startswith(run)]
    if not matches and (named := [exc for run_dir, exc in damaged if run_dir.name.startswith(run)]):
        raise FileNotFoundError(str(named[0]))  # asked for by name: refused, saying why
    if len(matches) != 1:
        raise FileNotFoundError(f"{len(matches)} runs under {reports_dir / RUNS} match {run!r}")
    return matches[0]


def newest_holding(reports_dir: Path, item: str) -> Path | None:
    """The newest readable run that holds `item` (a cell id, or a row id: a bisect's), or None: an
    investigation's finding goes into a run that ran what it speaks of, never into a newer one of
    other cases (an ISSUE.md would say "no older release tried" of a run that tried none)."""
    for run_dir in reversed(list_runs(reports_dir, warn=True)):
        try:
            if holds(run_dir, item):
                return run_dir
        except DamagedRun as exc:
            left_out(exc)
    return None


def holds(run_dir: Path, item: str) -> bool:
    """Whether the run holds `item`, a cell id or a row id. DamagedRun where it cannot be read."""
    frame = read_run(run_dir, ["cell_id", "row_id"])
    return bool((frame["cell_id"] == item).any() or (frame["row_id"] == item).any())


def note_rejudged(run_dir: Path, how: dict, into: Path) -> None:
    """run.json keeps each re-judging (`trtmatrix report`): its verdicts are no longer the run's own.
    Written `into` the re-judging's staging folder (swap.py), with the run id, which its name is not."""
    meta = read_run_meta(run_dir)
    meta["rejudged"] = [*meta.get("rejudged", []), how]
    (into / RUN_META).write_text(json.dumps(meta, indent=1))


def read_run_meta(run_dir: Path) -> dict:
    """run.json (with the run id: its folder's name where it records none); DamagedRun where it is
    there and cannot be read."""
    return {"run_id": run_dir.name, **_run_json(run_dir)}


def _run_json(run_dir: Path) -> dict:
    """run.json as stored ({} where there is none); DamagedRun where it cannot be read."""
    path = run_dir / RUN_META
    try:
        meta = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise DamagedRun.of(path, exc) from None
    if not isinstance(meta, dict):
        raise DamagedRun(path, "", "not a JSON object, a damaged run?")
    return meta


_SAID: set[str] = set()  # the warnings left_out gave in this process: one command reads a folder's runs more than once


def left_out(exc: DamagedRun) -> None:
    """One warning line for a damaged run that a command over many runs leaves out (once per command)."""
    if str(exc) not in _SAID:
        _SAID.add(str(exc))
        print(f"warning: {exc}; left out", file=sys.stderr, flush=True)


def matrix_digest(config: Path) -> str:
    """The matrix file's content as judged ("sha256:<hex>" of its tables, as TOML reads them; of its
    bytes where it cannot be read so): run.json keeps it for the run and each re-judging, since one path
    may hold other tolerances by the next run (sweep 10 C6). A comment or a blank line changes nothing
    judged: a checkout moved and commented in one commit was "another matrix file", and its real
    regression went uncounted (issue 41, sweep 16 J12)."""
    try:
        return "sha256:" + hash_json(tomllib.loads(config.read_text()))
    except (OSError, ValueError, UnicodeDecodeError):
        return file_digest(config)


def last_rejudging(meta: dict) -> dict:
    """run.json's record of the run's last re-judging (`trtmatrix report`), or {} where none was."""
    return (meta.get("rejudged") or [{}])[-1] or {}


def judged_otherwise(meta: dict, now: dict) -> str | None:
    """The file a run's verdicts were last re-judged with (`trtmatrix report`) where they are not the
    matrix file of run.json `now` as it stands: a tolerance file, another matrix file, or this one with
    another content then (its digest; runs that record none are compared by path); None where they are
    (never re-judged, or re-judged with this very content). Such verdicts are a what-if, not the matrix's."""
    last = last_rejudging(meta)
    if not last:
        return None
    if last.get("tolerances"):
        return last["tolerances"]
    config = now.get("config")
    if not (config and last.get("config")):
        return None
    if Path(last["config"]).resolve() != Path(config).resolve():
        return last["config"]
    then, current = last.get("config_digest"), now.get("config_digest")
    if then and current and then != current:
        return f"{last['config']} as it was then (its content differs from now)"
    return None


def rejudged_note(meta: dict) -> str | None:
    """'re-judged with FILE (trtmatrix report): …' where a run's verdicts are no longer those it was made
    with (judged_otherwise against its own matrix file as it was): what `diff`, `summary` and `history`
    say before showing them (issue 41, sweep 16 J14, J16: a what-if read as the night's pass)."""
    other = judged_otherwise(meta, {"config": meta.get("config"), "config_digest": meta.get("config_digest")})
    return other and f"run {meta.get('run_id')} was re-judged with {other} (trtmatrix report): its verdicts are that " \
        "file's, not those the run was made with"


def made_otherwise(meta: dict, now: dict) -> str | None:
    """The matrix file a run (never re-judged) was made from, where it is another file than `now`'s,
    of another content: a copy of the matrix with other tolerances beside it, whose verdicts are not
    this file's (issue 41, sweep 11 D9). One file edited between two runs is compared (a tightened
    tolerance going red is the point), and so is one content at two paths (CI runners' checkouts)."""
    if meta.get("rejudged") or not (meta.get("config") and now.get("config")):
        return None
    other_path = Path(meta["config"]).resolve() != Path(now["config"]).resolve()
    then, current = meta.get("config_digest"), now.get("config_digest")
    return meta["config"] if other_path and then and current and then != current else None


def previous_results(reports_dir: Path, run_dir: Path, cell_ids, now: dict | None = None, most: int = 30
                     ) -> tuple[list[tuple[Path, pd.DataFrame]], list[tuple[Path, str, set]]]:
    """Each cell of `cell_ids` with its newest earlier result: (run folder, its rows of the cells no
    newer run holds), newest first, from the whole runs before `run_dir` that can be read (damaged
    ones: left out; at most `most` runs read). A partial run in between (`--case`, `--env`) holds
    only some cells: the others are compared with the run before it, never taken as new. A shard is
    part of a run, not one: a night's second shard is compared with the night before (or its merge).
    A run re-judged with another file than the matrix file of run.json `now` (judged_otherwise), or made
    from another (made_otherwise), is passed over the same way (issue 41, sweep 9 B4: its what-if
    verdicts made false regressions; sweep 11 D9), and returned second: (run folder, how it was
    judged otherwise, the cells it would have given)."""
    runs = list_runs(reports_dir)
    names = [p.name for p in runs]
    before = runs[:names.index(run_dir.name)] if run_dir.name in names else runs
    wanted, found, passed_over = set(cell_ids), [], []
    for earlier in list(reversed(before))[:most]:
        if not wanted:
            break
        try:
            if (meta := read_run_meta(earlier)).get("shard"):
                continue
            rows = read_run(earlier)
        except DamagedRun as exc:
            left_out(exc)
            continue
        rows = rows[rows["cell_id"].isin(wanted)]
        if not len(rows):
            continue
        if other := judged_otherwise(meta, now or {}):
            passed_over.append((earlier, f"was re-judged with {other} (trtmatrix report)", set(rows["cell_id"])))
            continue
        if other := made_otherwise(meta, now or {}):
            passed_over.append((earlier, f"was made from another matrix file, {other}", set(rows["cell_id"])))
            continue
        found.append((earlier, rows))
        wanted -= set(rows["cell_id"])
    return found, passed_over
