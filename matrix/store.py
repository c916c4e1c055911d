"""Records → pandas → `reports/runs/<run-id>/`, and reading runs back.

A run folder holds the results (parquet, JSON lines, CSV, JSON), per-cell files, per-environment
logs, the float64 references (so `trtmatrix report` can re-apply tolerances later) and
report.html. It is assembled under a temporary name and renamed at the end, so an interrupted
run leaves nothing that looks like a finished run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from .records import COLUMNS

RUNS = "runs"
PARQUET, JSONL, CSV, JSON, REPORT = "results.parquet", "results.jsonl", "results.csv", "results.json", "report.html"
REFS = "refs"
RUN_META = "run.json"
EXPORTS = {"parquet": PARQUET, "jsonl": JSONL, "csv": CSV, "json": JSON}


def to_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    frame["params"] = frame["params"].map(lambda p: json.dumps(p or {}, sort_keys=True))
    frame = frame.astype({"nan_count": "Int64", "inf_count": "Int64", "reused": bool})
    return frame


def export(frame: pd.DataFrame, path: Path, kind: str) -> None:
    if kind == "parquet":
        frame.to_parquet(path, index=False)
    elif kind == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif kind == "csv":
        frame.to_csv(path, index=False)
    elif kind == "json":
        frame.to_json(path, orient="records", indent=1)
    else:
        raise ValueError(f"unknown export format {kind!r}; one of {', '.join(EXPORTS)}")


def write_tables(run_dir: Path, frame: pd.DataFrame) -> None:
    for kind, name in EXPORTS.items():
        export(frame, run_dir / name, kind)


def write_run(reports_dir: Path, meta: dict, frame: pd.DataFrame, result_dirs: dict[str, Path],
              env_logs: dict[str, Path], references: list[Path]) -> Path:
    from .publish import render_run

    run_id = meta["run_id"]
    final = reports_dir / RUNS / run_id
    tmp = final.with_name(run_id + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "cells").mkdir(parents=True)
    (tmp / "envs").mkdir()
    for directory in result_dirs.values():
        if directory.is_dir():
            shutil.copytree(directory, tmp / "cells" / directory.name, dirs_exist_ok=True)
    for env, log in env_logs.items():  # the worker's / container's own output, per environment
        if log.is_file():
            shutil.copy2(log, tmp / "envs" / f"{env}.log")
    for reference in references:
        (tmp / REFS / reference.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(reference, tmp / REFS / reference.parent.name / reference.name)
    write_tables(tmp, frame)
    (tmp / RUN_META).write_text(json.dumps(meta, indent=1))
    tmp.rename(final)
    render_run(final)
    return final


def read_run(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / PARQUET)


def list_runs(reports_dir: Path) -> list[Path]:
    """Finished runs, oldest first (run ids start with a UTC timestamp)."""
    runs = reports_dir / RUNS
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.endswith(".partial")
                  and (p / PARQUET).is_file())


def find_run(reports_dir: Path, run: str | None) -> Path:
    """A run by id, id prefix or path; the newest when None."""
    runs = list_runs(reports_dir)
    if run is None:
        if not runs:
            raise FileNotFoundError(f"no runs under {reports_dir / RUNS}")
        return runs[-1]
    if Path(run).is_dir() and (Path(run) / PARQUET).is_file():
        return Path(run)
    matches = [p for p in runs if p.name.startswith(run)]
    if len(matches) != 1:
        raise FileNotFoundError(f"{len(matches)} runs under {reports_dir / RUNS} match {run!r}")
    return matches[0]


def previous_run(reports_dir: Path, run_dir: Path) -> Path | None:
    earlier = [p for p in list_runs(reports_dir) if p.name < run_dir.name]
    return earlier[-1] if earlier else None
