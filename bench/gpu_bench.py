"""trtmatrix's torch cells on a GPU against their in-process floor, measured in one call on the GPU
host (issue 27's goal: within 2x of the floor, compile cells included).

1. Prepares the artifacts of matrices/gpu-torch.toml's cases and runs the matrix once, untimed:
   torch.export once per case, and inductor's and Triton's on-disk caches filled, as they are on
   a GPU host that runs the matrix every night (the first run on a fresh host pays them once).
2. Times `trtmatrix run` on the CUDA column (--no-reuse: every cell runs), as a user runs it:
   the cells in one warm worker (supervisor.run_warm), and, with --fork (timed first), a process
   per cell (TRTMATRIX_CELL_START=fork: how every GPU cell ran before). Both the command's wall
   time and the seconds inside the environment (run.json: the worker and its cells, without the
   command's own start, planning, comparison and report).
3. Times the floor: the same cells (those the run did not skip) in this one process through the
   same engine code (torch_engine.run: programs loaded once, CUDA started once, six inferences,
   outputs to the host) and the same float64 comparison (compare_runs) — no worker, no files.

4. Times `python -c "import torch"` (the second of two), which a run pays twice outside the floor:
   in the command (planning imports the case files) and in the environment's worker. A host whose
   environment sets PYTHONDONTWRITEBYTECODE=1 (the H100 host lent to us does) compiles torch from
   source in every process: 6 s there against 2.4 s with its bytecode cached.

Prints a table (seconds, seconds per cell, ratio to the floor) and one JSON line.

    python bench/gpu_bench.py [--config matrices/gpu-torch.toml] [--skip-case bge_reranker] [--fork]
                              [--env torch-host-cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matrix.compare import compare_runs  # noqa: E402
from matrix.plan import build_plan  # noqa: E402
from matrix.prepare import INPUTS, REFERENCE, prepare  # noqa: E402
from matrix.store import list_runs, read_run  # noqa: E402

def trtmatrix_run(config: Path, env_name: str, selection: list[str], environ: dict[str, str]) -> tuple[float, float, Path]:
    """(wall seconds of `trtmatrix run --no-reuse`, seconds inside the environment (run.json), the
    run's folder). `selection`: its --case / --cell arguments; `environ`: set for the command."""
    args = [sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--env", env_name, "--no-reuse", *selection]
    begin = time.perf_counter()
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, env={**os.environ, **environ})
    seconds = time.perf_counter() - begin
    if done.returncode not in (0, 1):
        sys.exit(f"trtmatrix run {environ or ''} failed ({done.returncode}): {done.stderr[-2000:]}")
    run_dir = list_runs(build_plan(config).path("reports_dir"))[-1]
    inside = json.loads((run_dir / "run.json").read_text())["environment_seconds"][env_name]
    return seconds, inside, run_dir


def floor(plan, ran) -> tuple[float, int]:
    """The cells `ran` holds, in this process, through the engine's own code."""
    import numpy as np
    import torch

    from matrix.worker.engines import torch_engine

    wanted = set(ran["cell_id"])
    begin = time.perf_counter()
    count = 0
    for cell in plan.cells:
        if cell.cell_id not in wanted:
            continue
        artifacts = prepare(plan.cases[cell.case], cell.params, cell.artifact_key, plan.path("cache_dir"))
        profile = plan.profile(cell.profile).model_dump(mode="json")
        spec = {"inputs": str(artifacts / INPUTS), "profile": profile}
        with np.load(artifacts / INPUTS) as data:
            inputs = dict(data)
        with np.load(artifacts / REFERENCE) as data:
            reference = dict(data)
        try:
            result = torch_engine.run(spec, inputs, lambda message: None)
            tol = plan.tolerance(cell)
            compare_runs(result["runs"], reference, tol.atol, tol.rtol)
        except Exception as exc:  # noqa: BLE001 - what the cell's status would say; the floor times it all the same
            print(f"floor: {cell.cell_id}: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
        torch_engine.reset()
        count += 1
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - begin, count


def import_torch_s() -> float:
    """Seconds a new interpreter of this environment takes to import torch (the second try)."""
    for _ in range(2):
        begin = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        seconds = time.perf_counter() - begin
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=REPO / "matrices" / "gpu-torch.toml")
    parser.add_argument("--skip-case", action="append", default=["bge_reranker"])
    parser.add_argument("--env", default="torch-host-cuda", help="the environment (torch-host-cpu: a dry run here)")
    parser.add_argument("--fork", action="store_true", help="also time a process per cell (the old way)")
    args = parser.parse_args()
    plan = build_plan(args.config, only_envs=[args.env])
    cases = [name for name in plan.cases if name not in args.skip_case]
    plan = build_plan(args.config, only_cases=cases, only_envs=[args.env])
    selection = [a for case in cases for a in ("--case", case)]
    begin = time.perf_counter()
    first, _, _ = trtmatrix_run(args.config, args.env, selection, {})
    print(f"prepared {len({c.artifact_key for c in plan.cells})} artifacts and ran once (untimed) in "
          f"{time.perf_counter() - begin:.1f} s (that run: {first:.1f} s)", file=sys.stderr)
    rows = []
    if args.fork:
        fork_s, fork_in, _ = trtmatrix_run(args.config, args.env, selection, {"TRTMATRIX_CELL_START": "fork"})
    warm_s, warm_in, run_dir = trtmatrix_run(args.config, args.env, selection, {})
    frame = read_run(run_dir)
    ran = frame[frame["status"] != "skipped"]
    rows.append(("trtmatrix run (a warm worker)", warm_s, warm_in, len(ran)))
    if args.fork:
        rows.append(("trtmatrix run (a process per cell)", fork_s, fork_in, len(ran)))
    floor_s, count = floor(plan, ran)
    torch_s = import_torch_s()
    no_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    rows.append(("in-process floor (same engine code)", floor_s, floor_s, count))
    print(f"{'':<38} {'seconds':>8} {'in env':>7} {'cells':>6} {'s/cell':>7} {'vs floor':>9} {'in env vs floor':>16}")
    for name, seconds, inside, cells in rows:
        print(f"{name:<38} {seconds:>8.1f} {inside:>7.1f} {cells:>6} {seconds / max(cells, 1):>7.2f} "
              f"{seconds / floor_s:>9.2f} {inside / floor_s:>16.2f}")
    print(f"importing torch in a new interpreter: {torch_s:.1f} s (twice per run: the command and the worker); "
          f"PYTHONDONTWRITEBYTECODE {'is set: no bytecode cached' if no_bytecode else 'is not set'}")
    statuses = ran["status"].value_counts().to_dict()
    print(json.dumps({"cells": len(ran), "statuses": statuses, "warm_s": round(warm_s, 2), "warm_in_env_s": warm_in,
                      "floor_s": round(floor_s, 2), "ratio": round(warm_s / floor_s, 2),
                      **({"fork_s": round(fork_s, 2), "fork_in_env_s": fork_in} if args.fork else {}),
                      "import_torch_s": round(torch_s, 2), "pythondontwritebytecode": no_bytecode,
                      "gpu": str(ran["gpu"].dropna().iloc[0]) if ran["gpu"].notna().any() else None,
                      "goal_met": warm_s <= 2 * floor_s}))


if __name__ == "__main__":
    main()
