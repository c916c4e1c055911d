"""What spreading one environment's cells over a host's GPUs buys (issue 37): the same torch cells on
CUDA (bench/gpu-scaling.toml: 448 cells of eight builds each) run by `trtmatrix run --no-reuse` held to 1 GPU, then to
every GPU of the host (CUDA_VISIBLE_DEVICES, which trtmatrix honours: docs/gpu-hosts.md, "Several GPUs"), in
one call.

1. Runs the matrix once, untimed, on every GPU: its artifacts prepared (the modules and the
   float64 references) and PyTorch's on-disk caches filled, as on a host that runs it nightly.
2. Times each run as a user sees it (the command's wall time) and inside the environment
   (run.json: its workers and their cells, without the command's start, planning, comparison
   and report), counts the cells each GPU ran (each cell's gpu_index), and says where the time
   went: before the first cell, in cells per GPU (from each cell's cell.json to its result.json),
   a GPU idle at the end while another finished, after the last cell; and per GPU from its
   worker's own clock (each cell's result.json "clock", issue 43): the host before it launched
   the worker, its interpreter and imports, CUDA's start, inputs, module, timed inferences, the
   rest of the engine, saving, hand-over and between cells, after its last cell.
3. Checks that every run gave the same verdict for every cell: exit 1 if not, naming them.

Prints a table (GPUs, seconds, cells per second, speed-up, efficiency = speed-up / GPUs, the same
inside the environment, the split of cells per GPU) and one JSON line. --out DIR keeps each timed
run's results.jsonl, run.json and environment log there.

--builds N: the same cells, each profile built N times (a copy of the config beside it; the
warm-up keeps the config's own builds: it only prepares and fills caches).

--dry N: N GPUs faked (the tests' fake nvidia-smi: N H100s) and the cells run on this machine's
CPU. It exercises the holding, the spread, the table and the verdict check; it measures nothing
about GPUs (here every worker shares the same CPU cores).

    python bench/gpu_scaling.py [--gpus 1,2] [--case NAME]... [--batch N]... [--builds N] [--out DIR] [--dry N]
    # the GPU host (shared/docs/gpu-host.md): bench/README.md has the exact command
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_bench import trtmatrix_run  # noqa: E402
from matrix.environments.gpus import VISIBLE, host_gpus  # noqa: E402
from matrix.plan import build_plan  # noqa: E402
from matrix.store import RUN_META, read_run  # noqa: E402
from matrix.store.cache import result_dir  # noqa: E402
from matrix.worker.files import CELL_SPEC, RESULT  # noqa: E402

CONFIG = REPO / "bench" / "gpu-scaling.toml"
ENV = "torch-host-cuda"
GOAL = 0.9  # efficiency on every GPU count of the host (issues 37 and 43)


def fake_gpus(count: int) -> None:
    """--dry: this process and every trtmatrix it starts see `count` H100s (tests/conftest.py's fake)."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import fake_nvidia_smi

    folder = Path(tempfile.mkdtemp(prefix="gpu-scaling-")) / "bin"
    os.environ.update(fake_nvidia_smi(folder, ["NVIDIA H100 80GB HBM3"] * count))


def counts_wanted(text: str | None, available: int) -> list[int]:
    """1, then each power of two below the host's GPU count, then all of them (1,2 on two GPUs;
    1,2,4,8 on eight); or the counts asked for."""
    if text is None:
        return sorted({1, available, *(2 ** n for n in range(1, available.bit_length()) if 2 ** n < available)})
    counts = sorted({int(part) for part in text.split(",") if part.strip().isdigit()})
    if not counts or counts[0] < 1 or counts[-1] > available or len(counts) != len(text.split(",")):
        sys.exit(f"--gpus {text}: GPU counts from 1 to {available} (this host's), comma-separated")
    return counts


def with_builds(config: Path, builds: int) -> Path:
    """A copy of the config beside it (its relative paths mean the same) whose profiles build each
    cell `builds` times: the same cells, more work a cell."""
    text = re.sub(r"(?m)^builds = \d+$", f"builds = {builds}", config.read_text())
    copy = config.with_name(f".{config.stem}-builds-{builds}.toml")
    copy.write_text(text)
    return copy


def held_run(plan, cell_ids: list[str], gpus: list[int]) -> dict:
    """`trtmatrix run --no-reuse` held to `gpus` (host indices): its wall seconds, seconds inside
    the environment, run folder, cells, and where its time went (read now: the next run rewrites
    the cells' folders)."""
    begin = time.time()
    seconds, inside, run_dir = trtmatrix_run(plan.config_path, ENV, [a for cell in cell_ids for a in ("--cell", cell)],
                                             {VISIBLE: ",".join(map(str, gpus))})
    frame = read_run(run_dir).set_index("cell_id")
    return {"gpus": gpus, "seconds": seconds, "in_env": inside, "run_dir": run_dir, "frame": frame,
            "time": timeline(frame, plan.path("cache_dir"), begin, begin + seconds),
            "workers": worker_clocks(frame, plan.path("cache_dir"), begin, begin + seconds)}


def timeline(frame, cache_dir: Path, begin: float, end: float) -> dict:
    """Seconds from the command's start to the first cell's, each GPU's seconds in cells (from
    each cell's cell.json, written as it starts, to its result.json), the idle time at the end
    (the last GPU to finish against the first), and from the last cell's end to the command's."""
    spans: dict[str, list[tuple[float, float]]] = {}
    ran = frame[frame["gpu_index"].notna() & frame["content_key"].notna()]
    for gpu, key in zip(ran["gpu_index"].astype(int), ran["content_key"]):
        folder = result_dir(cache_dir, ENV, key)
        if (folder / CELL_SPEC).is_file() and (folder / RESULT).is_file():
            spans.setdefault(str(gpu), []).append(((folder / CELL_SPEC).stat().st_mtime, (folder / RESULT).stat().st_mtime))
    if not spans:
        return {}
    firsts = [start for gpu in spans.values() for start, _ in gpu]
    lasts = {gpu: max(stop for _, stop in cells) for gpu, cells in spans.items()}
    return {"before_first_cell_s": round(min(firsts) - begin, 2),
            "in_cells_s": {gpu: round(sum(stop - start for start, stop in cells), 2) for gpu, cells in spans.items()},
            "idle_at_end_s": round(max(lasts.values()) - min(lasts.values()), 2),
            "after_last_cell_s": round(end - max(lasts.values()), 2)}


def _clocks(frame, cache_dir: Path) -> dict[str, list[dict]]:
    """Each GPU's cells' clocks (result.json "clock": the worker's own epoch seconds), by claim."""
    by_gpu: dict[str, list[dict]] = {}
    ran = frame[frame["gpu_index"].notna() & frame["content_key"].notna()]
    for gpu, key in zip(ran["gpu_index"].astype(int), ran["content_key"]):
        path = result_dir(cache_dir, ENV, key) / RESULT
        clock = json.loads(path.read_text()).get("clock") if path.is_file() else None
        if clock and clock.get("claimed") and clock.get("end"):
            by_gpu.setdefault(str(gpu), []).append(clock)
    return {gpu: sorted(cells, key=lambda c: c["claimed"]) for gpu, cells in sorted(by_gpu.items())}


def worker_clocks(frame, cache_dir: Path, begin: float, end: float) -> dict:
    """Where each GPU's worker spent the run, from its own clock (issue 43): the host before it
    started it; its start (interpreter, imports) up to its first claim; CUDA's start (its first
    cell's describe); in cells: loading inputs, the module (build), the timed inferences, the rest
    of the engine's work (warm-up, copies), saving outputs; between cells (the supervisor's claim,
    the hand-over and reset); and after its last cell to the command's end."""
    workers = {}
    for gpu, cells in _clocks(frame, cache_dir).items():
        first, last = cells[0], cells[-1]
        total = lambda name: sum(c.get(name) or 0.0 for c in cells)  # noqa: E731
        engine = total("engine_s")
        workers[gpu] = {
            "cells": len(cells),
            "host_before_s": round((first.get("launched") or begin) - begin, 2),
            "interpreter_s": round(first["supervisor_loaded"] - first["launched"], 2) if first.get("launched") else None,
            "imports_s": round(first["engine_imported"] - first["supervisor_loaded"], 2)
            if first.get("engine_imported") else None,
            "to_first_claim_s": round(first["claimed"] - (first.get("engine_imported") or first["claimed"]), 2),
            "cuda_start_s": round(first.get("describe_s") or 0.0, 2),
            "in_cells_s": round(sum(c["end"] - c["begin"] for c in cells), 2),
            "describe_s": round(total("describe_s") - (first.get("describe_s") or 0.0), 2),
            "inputs_s": round(total("inputs_s"), 2), "module_s": round(total("build_s"), 2),
            "infer_s": round(total("infer_s"), 2),
            "engine_rest_s": round(engine - total("build_s") - total("infer_s"), 2),
            "save_s": round(total("save_s"), 2),
            "handover_s": round(sum(c["begin"] - c["claimed"] for c in cells), 2),
            "between_s": round(sum(b["claimed"] - a["end"] for a, b in zip(cells, cells[1:])), 2),
            "after_last_s": round(end - last["end"], 2)}
    return workers


def split(frame) -> dict[str, int]:
    """Cells per GPU (host index), from each cell's own gpu_index."""
    ran = frame["gpu_index"].dropna().astype(int)
    return {str(index): int(count) for index, count in sorted(ran.value_counts().items())}


def verdict_differences(runs: list[dict]) -> list[str]:
    """Cells whose verdict differs between runs (or that one run lacks), as lines."""
    first = runs[0]["frame"]["verdict"]
    lines = []
    for other in runs[1:]:
        verdicts = other["frame"]["verdict"]
        for cell in sorted(set(first.index) | set(verdicts.index)):
            one, two = first.get(cell), verdicts.get(cell)
            if one != two:
                lines.append(f"{cell}: {one} on {len(runs[0]['gpus'])} GPU(s), {two} on {len(other['gpus'])}")
    return lines


def rows(runs: list[dict], cells: int) -> list[dict]:
    base = runs[0]
    table = []
    for run in runs:
        count = len(run["gpus"])
        speedup, inside = base["seconds"] / run["seconds"], base["in_env"] / max(run["in_env"], 1e-9)
        table.append({"gpus": count, "seconds": round(run["seconds"], 2), "cells_per_s": round(cells / run["seconds"], 2),
                      "speedup": round(speedup, 3), "efficiency": round(speedup / count, 3),
                      "in_env_s": run["in_env"], "in_env_efficiency": round(inside / count, 3),
                      "outside_env_s": round(run["seconds"] - run["in_env"], 2), "split": split(run["frame"]),
                      "time": run["time"], "workers": run["workers"]})
    return table


def keep(runs: list[dict], out: Path) -> None:
    """Each timed run's tables, run.json and environment log (its workers' logs joined) under out/."""
    for run in runs:
        target = out / f"{len(run['gpus'])}-gpu"
        target.mkdir(parents=True, exist_ok=True)
        for name in ("results.jsonl", RUN_META, f"envs/{ENV}.log"):
            if (run["run_dir"] / name).is_file():
                shutil.copy(run["run_dir"] / name, target / Path(name).name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--gpus", help="GPU counts to time, comma-separated (default: 1, powers of two, all)")
    parser.add_argument("--case", action="append", help="only this case (repeatable)")
    parser.add_argument("--batch", action="append", type=int, help="only this batch size (repeatable)")
    parser.add_argument("--no-warm-up", action="store_true", help="skip the untimed first run")
    parser.add_argument("--out", type=Path, help="keep each timed run's results.jsonl, run.json and env log here")
    parser.add_argument("--dry", type=int, metavar="N", help="fake N GPUs; the cells run on the CPU (measures nothing)")
    parser.add_argument("--builds", type=int, help="each profile built this many times a cell (default: the config's)")
    args = parser.parse_args()
    warm_config = args.config  # the warm-up prepares the same artifacts with the config's own builds
    if args.builds:
        args.config = with_builds(args.config, args.builds)
    if args.dry:
        fake_gpus(args.dry)
    available = sorted(host_gpus())
    if not available:
        sys.exit("no NVIDIA GPU here (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES holds none): "
                 "--dry N runs the bench's logic on the CPU")
    counts = counts_wanted(args.gpus, len(available))
    plan = build_plan(args.config, only_cases=args.case, only_envs=[ENV])
    cells = [c.cell_id for c in plan.cells if args.batch is None or dict(c.params).get("batch") in args.batch]
    selected = cells if (args.case or args.batch) else []  # all of them: no --cell needed
    if not args.no_warm_up:
        begin = time.perf_counter()
        held_run(build_plan(warm_config, only_cases=args.case, only_envs=[ENV]), selected, available)
        print(f"warm-up: {len(cells)} cells, {len({c.artifact_key for c in plan.cells if c.cell_id in cells})} "
              f"artifacts, on GPUs {available} in {time.perf_counter() - begin:.1f} s (untimed)", file=sys.stderr)
    runs = []
    for count in counts:
        runs.append(held_run(plan, selected, available[:count]))
        print(f"{count} GPU(s): {runs[-1]['seconds']:.1f} s ({runs[-1]['run_dir']})", file=sys.stderr)
    table = rows(runs, len(cells))
    differences = verdict_differences(runs)
    if args.out:
        keep(runs, args.out)
    print(f"{'GPUs':>4} {'seconds':>8} {'cells/s':>8} {'speed-up':>9} {'efficiency':>10} {'in env':>7} "
          f"{'in-env eff.':>11} {'outside':>8}  cells per GPU")
    for row in table:
        print(f"{row['gpus']:>4} {row['seconds']:>8.1f} {row['cells_per_s']:>8.2f} {row['speedup']:>9.2f} "
              f"{row['efficiency']:>10.2f} {row['in_env_s']:>7.1f} {row['in_env_efficiency']:>11.2f} "
              f"{row['outside_env_s']:>8.1f}  " + " ".join(f"GPU {g}: {n}" for g, n in row["split"].items()))
    print(f"{len(cells)} cells; seconds: the command's wall time; in env: its workers and cells (run.json); outside: "
          "the command's start, planning, comparison and report")
    print("where the time went: before the first cell (the command's start, planning, the supervisor's start), in "
          "cells per GPU (a worker's first cell includes its import of torch and CUDA's start), a GPU idle at the end "
          "while another finished, after the last cell (judging what is left, the report)")
    for row in table:
        spent = row["time"]
        if spent:
            print(f"{row['gpus']:>4} GPU(s): {spent['before_first_cell_s']:.1f} s before, "
                  + ", ".join(f"GPU {g} {s:.1f} s" for g, s in spent["in_cells_s"].items())
                  + f" in cells, {spent['idle_at_end_s']:.1f} s idle at the end, {spent['after_last_cell_s']:.1f} s after")
    print("each GPU's worker, from its own clock (s): host before its start | interpreter, imports, to its first "
          "claim | CUDA's start | in cells: inputs, module, timed inferences, rest of the engine, save | hand-over "
          "and between cells | after its last cell")
    for row in table:
        for gpu, w in row["workers"].items():
            print(f"{row['gpus']:>4} GPU(s), GPU {gpu} ({w['cells']} cells): {w['host_before_s']:.1f} | "
                  f"{w['interpreter_s'] or 0:.1f}, {w['imports_s'] or 0:.1f}, {w['to_first_claim_s']:.1f} | "
                  f"{w['cuda_start_s']:.1f} | {w['in_cells_s']:.1f}: {w['inputs_s']:.1f}, {w['module_s']:.1f}, "
                  f"{w['infer_s']:.1f}, {w['engine_rest_s']:.1f}, {w['save_s']:.1f} | {w['handover_s']:.1f}, "
                  f"{w['between_s']:.1f} | {w['after_last_s']:.1f}")
    print("verdicts " + ("equal cell for cell in every run" if not differences else f"DIFFER in {len(differences)} cells:"))
    for line in differences[:20]:
        print(f"  {line}")
    if args.dry:
        print(f"DRY RUN: {args.dry} GPUs faked, every cell ran on this machine's CPU: these numbers measure nothing "
              "about GPUs")
    frame = runs[-1]["frame"]
    print(json.dumps({"cells": len(cells), "statuses": frame["status"].value_counts().to_dict(),
                      "devices": frame["device"].value_counts().to_dict(),  # cuda: the cells really ran on GPUs
                      "gpu": str(frame["gpu"].dropna().iloc[0]) if frame["gpu"].notna().any() else None,
                      "runs": table, "verdicts_equal": not differences, "dry": bool(args.dry),
                      "pythondontwritebytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
                      "goal_met": table[-1]["efficiency"] >= GOAL if len(table) > 1 else None,
                      "goal_met_in_env": table[-1]["in_env_efficiency"] >= GOAL if len(table) > 1 else None}))
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
