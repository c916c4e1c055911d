"""How long does a new run's reports/index.html and history.html take after a year of nightly runs?

Writes RUNS synthetic runs of CELLS cells (results.parquet and run.json, the shape of a nightly
suite: bench/report_bench.py's synthetic frame), then times render_index three ways in one run:

- cold: no run has its summaries yet (a reports folder from an older trtmatrix; what every run
  cost before the summaries: each run's results re-read), which writes them;
- new run: one more run, published as `trtmatrix run` publishes it (its report and summaries),
  then the index: the cost every nightly run pays now;
- warm: the index again, nothing new.

The ratio column is against the cold render measured here. Goal: the new run's index ≤ 1 s at
365 × 5,000.

    .venv/bin/python bench/index_bench.py [--runs 365] [--cells 5000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_bench import synthetic_frame  # noqa: E402
from matrix.report.publish import render_index, write_report  # noqa: E402
from matrix.store import PARQUET, RUN_META, RUNS  # noqa: E402


def write_run(reports: Path, index: int, frame) -> Path:
    run_id = f"2026{index:04d}T000000.000Z-b{index:03d}"
    folder = reports / RUNS / run_id
    folder.mkdir(parents=True)
    frame.assign(run_id=run_id).to_parquet(folder / PARQUET, index=False)
    (folder / RUN_META).write_text(json.dumps({"run_id": run_id, "started": run_id, "host": "bench",
                                               "config": "matrix.toml", "environments": sorted(set(frame["env"]))}))
    return folder


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=365)
    parser.add_argument("--cells", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reports = Path(tmp)
        frames = [synthetic_frame(args.cells, seed) for seed in range(3)]  # a few variants, reused
        start = time.perf_counter()
        for index in range(args.runs):
            write_run(reports, index, frames[index % len(frames)])
        print(f"wrote {args.runs} runs of {len(frames[0])} cells in {time.perf_counter() - start:.0f} s")
        cold = timed(lambda: render_index(reports))
        newest = write_run(reports, args.runs, frames[0])
        report = timed(lambda: write_report(newest, frames[0].assign(run_id=newest.name)))
        new_run = timed(lambda: render_index(reports))
        warm = timed(lambda: render_index(reports))
        history_mb = (reports / "history.html").stat().st_size / 1e6
    print(f"{'render_index':<28} {'s':>7} {'ratio to cold':>14}")
    for name, seconds in (("cold (every run re-read)", cold), ("after a new run", new_run), ("warm, nothing new", warm)):
        print(f"{name:<28} {seconds:>7.2f} {seconds / cold:>14.3f}")
    print(f"(the new run's own report and summaries: {report:.2f} s; history.html {history_mb:.1f} MB)")
    print(json.dumps({"runs": args.runs + 1, "cells": len(frames[0]), "cold_s": round(cold, 3),
                      "new_run_s": round(new_run, 3), "warm_s": round(warm, 3), "goal_met": new_run <= 1.0}))


if __name__ == "__main__":
    main()
