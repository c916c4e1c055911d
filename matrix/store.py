"""Records → pandas → `reports/runs/<run-id>/` (parquet, JSON lines, cell files, report.html).

The run folder is assembled under a temporary name and renamed at the end, so a run that was
interrupted leaves nothing that looks like a finished run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from .records import COLUMNS

RUNS = "runs"
PARQUET, JSONL, REPORT = "results.parquet", "results.jsonl", "report.html"


def to_frame(records: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    frame["params"] = frame["params"].map(lambda p: json.dumps(p or {}, sort_keys=True))
    frame = frame.astype({"nan_count": "Int64", "inf_count": "Int64", "reused": bool})
    return frame


def write_run(reports_dir: Path, run_id: str, frame: pd.DataFrame, result_dirs: dict[str, Path],
              env_logs: dict[str, Path]) -> Path:
    from .report import render_report

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
    frame.to_parquet(tmp / PARQUET, index=False)
    frame.to_json(tmp / JSONL, orient="records", lines=True)
    (tmp / REPORT).write_text(render_report(frame, run_id))
    tmp.rename(final)
    return final


def read_run(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / PARQUET)
