"""trtmatrix's torch cells on a GPU against their floor, measured in one call on the GPU host
(issue 43: the floor is the least work the cells need, and `trtmatrix run` within 1.5x of it).

1. Prepares the artifacts of matrices/gpu-torch.toml's cases and runs the matrix once, untimed:
   the modules saved, and inductor's and Triton's on-disk caches filled, as they are on a GPU host
   that runs the matrix every night (the first run on a fresh host pays them once).
2. Times `trtmatrix run` on the CUDA column (--no-reuse: every cell runs), as a user runs it: the
   command's wall time and the seconds inside the environment (run.json: the worker and its cells,
   without the command's own start, planning, comparison and report); with --fork also a process
   per cell (TRTMATRIX_CELL_START=fork: how every GPU cell ran before).
3. Times the floor: the least work those cells (the ones the run did not skip) need, in one fresh
   process (bench/gpu_floor.py) from its launch to its last verdict (its exit, CUDA's and
   inductor's teardown, is no work the cells need), with the bytecode the workers use: its start
   (interpreter, torch, CUDA), then each artifact's inputs and reference read once and its inputs
   put on the device once per dtype, each module loaded once per dtype (the engine's own loader),
   and per cell only its inferences (per build, the warm-up and the timed ones, each waited for,
   as the engine times them) and one comparison of its outputs with the float64 reference, on
   threads while the GPU runs the next cells (as trtmatrix overlaps judging). No worker, no files
   written, no second copy of identical outputs, no in-process cache of an earlier repeat.
4. Beside it: the sum of the cells' own timed inferences (their infer_ms_runs), the part of the
   floor no harness can remove.

Checks that the floor is never slower than the run it bounds (exit 1 if it is: then it is no
floor), for every repeat. Prints a table and one JSON line.

    python bench/gpu_bench.py [--repeats 3] [--config matrices/gpu-torch.toml] [--skip-case bge_reranker]
                              [--env torch-host-cuda] [--fork]
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

from matrix.plan import build_plan  # noqa: E402
from matrix.prepare import INPUTS, REFERENCE, prepared  # noqa: E402
from matrix.store import list_runs, read_run  # noqa: E402

GOAL = 1.5  # `trtmatrix run` within this many times the floor (issue 43)


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


def floor(plan, ran) -> dict:
    """The least work the cells of `ran` need (bench/gpu_floor.py), in a fresh process, from its
    launch to its last verdict: its interpreter, imports and CUDA's start are work those cells need
    too, its exit (CUDA's and inductor's teardown) is not. It keeps its bytecode where the workers
    keep theirs on a host that writes none beside its packages."""
    wanted = set(ran["cell_id"])
    cells = []
    for cell in plan.cells:
        if cell.cell_id in wanted:
            artifacts = prepared(plan.path("cache_dir"), cell.case, cell.artifact_key)
            tol = plan.tolerance(cell)
            cells.append({"cell_id": cell.cell_id, "inputs": str(artifacts / INPUTS),
                          "reference": str(artifacts / REFERENCE), "atol": tol.atol, "rtol": tol.rtol,
                          "profile": plan.profile(cell.profile).model_dump(mode="json")})
    listing = plan.path("cache_dir") / "gpu-floor-cells.json"
    listing.write_text(json.dumps(cells))
    environ = dict(os.environ)
    if environ.pop("PYTHONDONTWRITEBYTECODE", None):
        environ["PYTHONPYCACHEPREFIX"] = str(plan.path("cache_dir") / "worker" / "pycache")
    launched = time.time()
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_floor.py"), str(listing)], capture_output=True,
                          text=True, env=environ)
    if done.returncode:
        sys.exit(f"the floor failed ({done.returncode}): {done.stderr[-2000:]}")
    least = json.loads(done.stdout.splitlines()[-1])
    return {**least, "seconds": least["done"] - launched}  # to its last verdict: its exit is no work the cells need


def own_inferences_s(frame) -> float:
    """The sum of the cells' own timed inferences (infer_ms_runs), in seconds."""
    return sum(sum(json.loads(runs)) for runs in frame["infer_ms_runs"].dropna()) / 1000


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
    parser.add_argument("--env", default="torch-host-cuda")
    parser.add_argument("--repeats", type=int, default=1, help="timed run and floor pairs, one after another")
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
    repeats = []
    for _ in range(args.repeats):
        warm_s, warm_in, run_dir = trtmatrix_run(args.config, args.env, selection, {})
        frame = read_run(run_dir)
        ran = frame[frame["status"] != "skipped"]
        least = floor(plan, ran)
        repeats.append({"run_s": round(warm_s, 2), "run_in_env_s": warm_in, "floor_s": round(least["seconds"], 2),
                        "ratio": round(warm_s / least["seconds"], 2),
                        "ratio_in_env": round(warm_in / least["seconds"], 2),
                        "floor_start_s": least["start_s"], "floor_cells_s": least["cells_s"],
                        "floor_timed_inferences_s": round(least["timed_inferences_s"], 2),
                        "cells_infer_ms_runs_s": round(own_inferences_s(ran), 2), "cells": len(ran),
                        "floor_cells": least["cells"], "statuses": ran["status"].value_counts().to_dict(),
                        "floor_verdicts": least["verdicts"],
                        "floor_failed": least["failed"], "floor_not_slower": least["seconds"] <= warm_s})
        print(f"repeat {len(repeats)}: run {warm_s:.1f} s, floor {least['seconds']:.1f} s", file=sys.stderr)
    fork = trtmatrix_run(args.config, args.env, selection, {"TRTMATRIX_CELL_START": "fork"}) if args.fork else None
    torch_s = import_torch_s()
    no_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    print(f"{'repeat':>6} {'run':>7} {'in env':>7} {'floor':>7} {'its start':>10} {'its cells':>10} "
          f"{'run/floor':>10} {'in env/floor':>13} {'floor infer':>12} {'cells infer':>12} {'cells':>6}")
    for index, r in enumerate(repeats, start=1):
        print(f"{index:>6} {r['run_s']:>7.1f} {r['run_in_env_s']:>7.1f} {r['floor_s']:>7.1f} {r['floor_start_s']:>10.1f} "
              f"{r['floor_cells_s']:>10.1f} {r['ratio']:>10.2f} {r['ratio_in_env']:>13.2f} "
              f"{r['floor_timed_inferences_s']:>12.2f} {r['cells_infer_ms_runs_s']:>12.2f} {r['cells']:>6}")
    print("run: `trtmatrix run --no-reuse` (wall); in env: its workers and cells (run.json); floor: the least work "
          "the same cells need, a fresh process (bench/gpu_floor.py) from its launch to its last verdict; its start: its interpreter, "
          "imports and CUDA's start; its cells: the rest; floor infer: its timed inferences; cells infer: the cells' "
          "own timed inferences (infer_ms_runs), the part no harness removes")
    if fork:
        print(f"a process per cell (TRTMATRIX_CELL_START=fork): {fork[0]:.1f} s, {fork[1]:.1f} s in the environment")
    print(f"importing torch in a new interpreter: {torch_s:.1f} s; PYTHONDONTWRITEBYTECODE "
          f"{'is set' if no_bytecode else 'is not set'}")
    slower = [i for i, r in enumerate(repeats, start=1) if not r["floor_not_slower"]]
    for index in slower:
        print(f"repeat {index}: THE FLOOR WAS SLOWER THAN THE RUN: it is no floor")
    gpu = frame["gpu"].dropna()
    print(json.dumps({"repeats": repeats, "goal": GOAL, "goal_met": all(r["ratio"] <= GOAL for r in repeats),
                      "floor_never_slower": not slower, "import_torch_s": round(torch_s, 2),
                      **({"fork_s": round(fork[0], 2), "fork_in_env_s": fork[1]} if fork else {}),
                      "pythondontwritebytecode": no_bytecode, "gpu": str(gpu.iloc[0]) if len(gpu) else None}))
    sys.exit(1 if slower else 0)


if __name__ == "__main__":
    main()
