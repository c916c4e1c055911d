"""The floor of bench/gpu_bench.py: the least work a list of torch cells needs, in one fresh process
(issue 43). Started by gpu_bench.py, which times it from outside; it imports only what the work
needs (torch, numpy, the torch engine's module loader, the comparison), starts CUDA, then per
artifact reads its inputs and reference once and puts the inputs on the device once per dtype,
loads each module once per dtype, and per cell runs only its inferences (per build, the warm-up
and the timed ones, each waited for, as the engine times them) and one comparison of its first
outputs with the float64 reference, on JUDGES threads while the GPU runs the next cells.

    python bench/gpu_floor.py CELLS.json    # [{"cell_id", "inputs", "reference", "profile", "atol", "rtol"}, ...]
"""

import contextlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from pathlib import Path

BEGIN = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from matrix.compare import compare_runs  # noqa: E402
from matrix.worker.engines import REPEATS, WARMUP, torch_engine  # noqa: E402

JUDGES = max(2, min(16, (os.cpu_count() or 1) // 4))  # as matrix/run.py judges


def inferences(module, args, profile, sync):
    """A cell's inferences as the engine runs them: its first outputs and the timed seconds."""
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


def main():
    cells = json.loads(Path(sys.argv[1]).read_text())
    place = "cuda:0" if torch.cuda.is_available() else "cpu"  # the CPU: a dry run of the bench's logic
    sync = torch.cuda.synchronize if place != "cpu" else (lambda: None)
    torch.zeros(1, device=place).sum().item()  # CUDA started
    started = time.perf_counter()
    judges, judged, timed, failed = ThreadPoolExecutor(JUDGES), [], 0.0, []
    for inputs_path, group in groupby(cells, key=lambda cell: cell["inputs"]):
        group = list(group)
        with np.load(inputs_path) as data:
            inputs = dict(data)
        with np.load(group[0]["reference"]) as data:
            reference = dict(data)
        on_device = {}
        for cell in group:
            profile, precision = cell["profile"], cell["profile"]["precision"]
            try:
                module, meta = torch_engine._module({"inputs": inputs_path}, precision, place, lambda message: None)
                dtype = torch_engine.DTYPES[precision]
                if dtype not in on_device:
                    args = [torch.from_numpy(inputs[name]).to(place) for name in meta["inputs"]]
                    on_device[dtype] = [a.to(dtype) if a.is_floating_point() else a for a in args]
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
                if profile.get("compile"):
                    torch_engine._compiled.append(True)
                    module = torch.compile(module)
                first, seconds = inferences(module, on_device[dtype], profile, sync)
                timed += seconds
                outputs = {name: torch_engine._numpy(value) for name, value in zip(meta["outputs"], first)}
                judged.append(judges.submit(compare_runs, [outputs], reference, cell["atol"], cell["rtol"]))
            except Exception as exc:  # noqa: BLE001 - the run's cell says the same; timed all the same
                failed.append("{}: {}: {}".format(cell["cell_id"], type(exc).__name__, str(exc)[:120]))
            torch_engine.reset()
    verdicts = [future.result()[0] for future in judged]
    now = time.perf_counter()
    print(json.dumps({"done": time.time(), "start_s": round(started - BEGIN, 2), "cells_s": round(now - started, 2),
                      "timed_inferences_s": round(timed, 3), "verdicts": {v: verdicts.count(v) for v in set(verdicts)},
                      "failed": failed, "cells": len(cells)}))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # the verdicts are in: CUDA's and inductor's teardown is no work the cells need
