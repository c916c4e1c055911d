"""trtmatrix's torch cells on a GPU against their floor, measured in one call on the GPU host
(issue 43: the floor is the least work the cells need, and `trtmatrix run` within 1.5x of it).

1. Prepares the artifacts of matrices/gpu-torch.toml's cases and runs the matrix once, untimed:
   the modules saved, and inductor's and Triton's on-disk caches filled, as they are on a GPU host
   that runs the matrix every night (the first run on a fresh host pays them once).
2. Times `trtmatrix run` on the CUDA column (--no-reuse: every cell runs), as a user runs it: the
   command's wall time and the seconds inside the environment (run.json: the worker and its cells,
   without the command's own start, planning, comparison and report); with --fork also a process
   per cell (TRTMATRIX_CELL_START=fork: how every GPU cell ran before).
3. Times the floor: the least work those cells (the ones the run did not skip) need, in this one
   process, torch imported and CUDA started beforehand: each artifact's inputs and reference read
   once and its inputs put on the device once per dtype, each module loaded once per dtype (the
   engine's own loader), then per cell only its inferences (per build, the warm-up and the timed
   ones, each waited for, as the engine times them) and one comparison of its outputs with the
   float64 reference, on JUDGES threads while the GPU runs the next cells (as trtmatrix overlaps
   judging). No worker, no files written, no second copy of identical outputs.
4. Beside it: the sum of the cells' own timed inferences (their infer_ms_runs), the part of the
   floor no harness can remove.

Checks that the floor is never slower than the run it bounds (exit 1 if it is: then it is no
floor), for every repeat. Prints a table and one JSON line.

    python bench/gpu_bench.py [--repeats 3] [--config matrices/gpu-torch.toml] [--skip-case bge_reranker]
                              [--env torch-host-cuda] [--fork]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matrix.compare import compare_runs  # noqa: E402
from matrix.plan import build_plan  # noqa: E402
from matrix.prepare import INPUTS, REFERENCE, prepared  # noqa: E402
from matrix.run import JUDGES  # noqa: E402
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


def _inferences(torch, torch_engine, module, args, profile, sync) -> tuple[object, float]:
    """A cell's inferences as the engine runs them (each waited for); its first outputs on the
    host and the seconds of the timed ones."""
    from matrix.worker.engines import REPEATS, WARMUP

    sdpa, first, timed = profile.get("sdpa_backend"), None, 0.0
    for _ in range(profile.get("builds", 1)):
        for index in range(WARMUP + REPEATS):
            begin = time.perf_counter()
            with torch.no_grad(), torch_engine._sdpa_kernel(sdpa) if sdpa else contextlib.nullcontext():
                outputs = module(*args)
            sync()
            if index >= WARMUP:
                timed += time.perf_counter() - begin
            if first is None:
                first = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return first, timed


def floor(plan, ran) -> dict:
    """The least work the cells of `ran` need, in this process (see the module's docstring)."""
    import numpy as np
    import torch

    from matrix.worker.engines import torch_engine

    place = "cuda:0" if torch.cuda.is_available() else "cpu"  # the CPU: a dry run of the bench's logic
    sync = torch.cuda.synchronize if place != "cpu" else (lambda: None)
    torch.zeros(1, device=place).sum().item()  # CUDA started before the clock, as in a warm worker
    wanted = set(ran["cell_id"])
    cells = [cell for cell in plan.cells if cell.cell_id in wanted]
    judges, judged, timed, failed = ThreadPoolExecutor(JUDGES), [], 0.0, []
    begin = time.perf_counter()
    for (case, params), group in groupby(cells, key=lambda cell: (cell.case, cell.params)):
        group = list(group)
        artifacts = prepared(plan.path("cache_dir"), case, group[0].artifact_key)
        with np.load(artifacts / INPUTS) as data:
            inputs = dict(data)
        with np.load(artifacts / REFERENCE) as data:
            reference = dict(data)
        on_device = {}
        for cell in group:
            profile = plan.profile(cell.profile).model_dump(mode="json")
            precision, tol = profile["precision"], plan.tolerance(cell)
            try:
                module, meta = torch_engine._module({"inputs": str(artifacts / INPUTS)}, precision, place,
                                                    lambda message: None)
                dtype = torch_engine.DTYPES[precision]
                if dtype not in on_device:
                    args = [torch.from_numpy(inputs[name]).to(place) for name in meta["inputs"]]
                    on_device[dtype] = [a.to(dtype) if a.is_floating_point() else a for a in args]
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
                if profile.get("compile"):
                    torch_engine._compiled.append(True)
                    module = torch.compile(module)
                first, seconds = _inferences(torch, torch_engine, module, on_device[dtype], profile, sync)
                timed += seconds
                outputs = {name: torch_engine._numpy(value) for name, value in zip(meta["outputs"], first)}
                judged.append(judges.submit(compare_runs, [outputs], reference, tol.atol, tol.rtol))
            except Exception as exc:  # noqa: BLE001 - the run's cell says the same; the floor times it all the same
                failed.append(f"{cell.cell_id}: {type(exc).__name__}: {str(exc)[:120]}")
            torch_engine.reset()
    verdicts = [future.result()[0] for future in judged]
    seconds = time.perf_counter() - begin
    judges.shutdown()
    return {"seconds": seconds, "cells": len(cells), "timed_inferences_s": timed, "verdicts": verdicts,
            "failed": failed}


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
                        "floor_timed_inferences_s": round(least["timed_inferences_s"], 2),
                        "cells_infer_ms_runs_s": round(own_inferences_s(ran), 2), "cells": len(ran),
                        "floor_cells": least["cells"], "statuses": ran["status"].value_counts().to_dict(),
                        "floor_verdicts": {v: least["verdicts"].count(v) for v in set(least["verdicts"])},
                        "floor_failed": least["failed"], "floor_not_slower": least["seconds"] <= warm_s})
        print(f"repeat {len(repeats)}: run {warm_s:.1f} s, floor {least['seconds']:.1f} s", file=sys.stderr)
    fork = trtmatrix_run(args.config, args.env, selection, {"TRTMATRIX_CELL_START": "fork"}) if args.fork else None
    torch_s = import_torch_s()
    no_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    print(f"{'repeat':>6} {'run':>7} {'in env':>7} {'floor':>7} {'run/floor':>10} {'in env/floor':>13} "
          f"{'floor infer':>12} {'cells infer':>12} {'cells':>6}")
    for index, r in enumerate(repeats, start=1):
        print(f"{index:>6} {r['run_s']:>7.1f} {r['run_in_env_s']:>7.1f} {r['floor_s']:>7.1f} {r['ratio']:>10.2f} "
              f"{r['ratio_in_env']:>13.2f} {r['floor_timed_inferences_s']:>12.2f} {r['cells_infer_ms_runs_s']:>12.2f} "
              f"{r['cells']:>6}")
    print("run: `trtmatrix run --no-reuse` (wall); in env: its workers and cells (run.json); floor: the least work "
          "the same cells need in one process; floor infer: its timed inferences; cells infer: the cells' own "
          "timed inferences (infer_ms_runs)")
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
