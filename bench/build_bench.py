"""Build-only TensorRT-RTX cells: trtmatrix against a plain in-process loop over the same models,
in one run.

Cells: every ONNX backend node test the installed onnx package generates (with plain tensors),
on TensorRT-RTX 1.7 (the `trt-rtx-1.7` venv), profile fp32, on this CPU: each cell parses its
model, builds an engine (or is refused by the parser) and ends `built` / `unsupported`.

- trtmatrix_s: `trtmatrix run --no-reuse` (the venv and the prepared artifacts exist from an
  unmeasured first run); build-only cells fork from a supervisor that imported TensorRT-RTX once;
- loop_s: one Python process in the same venv that imports TensorRT-RTX and Polygraphy once and
  parses and builds every model trtmatrix prepared, with the same builder settings (TF32 off, one
  optimisation profile of the inputs: shapes, and a shape tensor's values), catching refusals: the floor for this work;
- build_s: the builds alone, summed from trtmatrix's records.
Goal: trtmatrix within 3x of the loop. Prints a table, then one JSON object as the last line.

    .venv/bin/python bench/build_bench.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matrix.store import list_runs, read_run  # noqa: E402
from matrix.store.cache import user_cache  # noqa: E402

ENV = "trt-rtx-1.7"
MATRIX = """\
[run]
environments = ["{env}"]
timeout_s = 300
cases_dir = "{repo}/cases"
images_dir = "{repo}/images"
reports_dir = "{home}/reports"

[profiles.fp32]
precision = "fp32"

[tolerances.fp32]
atol = 1e-7
rtol = 1e-3

[cases.onnx_node]
suite = "onnx-backend-node"
profiles = ["fp32"]
"""

LOOP = """\
import json, sys, numpy as np
from polygraphy.backend.trt import CreateConfig, Profile, engine_bytes_from_network, network_from_onnx_path
from polygraphy.logger import G_LOGGER
G_LOGGER.module_severity = G_LOGGER.CRITICAL
counts = {"built": 0, "refused": 0}
for folder in json.load(open(sys.argv[1])):
    with np.load(folder + "/inputs.npz") as data:
        arrays = {name: data[name] for name in data.files}
    try:
        builder, network, parser = network_from_onnx_path(folder + "/model.onnx")
        profile = Profile()  # as trtmatrix's: shapes, a shape tensor's values, network inputs only
        for tensor in (network.get_input(i) for i in range(network.num_inputs)):
            if tensor.name in arrays:
                array = arrays[tensor.name]
                bounds = [int(v) for v in array.ravel()] if tensor.is_shape_tensor else array.shape
                profile.add(tensor.name, min=bounds, opt=bounds, max=bounds)
        engine_bytes_from_network((builder, network, parser), config=CreateConfig(tf32=False, profiles=[profile]))
        counts["built"] += 1
    except Exception:
        counts["refused"] += 1
print(json.dumps(counts))
"""


def timed(command: list[str], **kwargs) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True, **kwargs)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    cache = user_cache()  # the matrix names no cache_dir
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = home / "matrix.toml"
        config.write_text(MATRIX.format(env=ENV, repo=REPO, home=home))
        run = [sys.executable, "-m", "matrix.cli", "run", "-c", str(config)]
        timed(run)  # the venv and the prepared artifacts, as after a first night: not measured
        cold, _ = timed([*run, "--no-reuse"])
        frame = read_run(list_runs(home / "reports")[-1])
        folders = sorted({str(cache / "artifacts" / a) for a in frame["artifact"].dropna()})
        (home / "folders.json").write_text(json.dumps(folders))
        (home / "loop.py").write_text(LOOP)
        python = max((cache / "venvs").glob(f"{ENV}-*/bin/python"), key=os.path.getmtime)
        fallback = max((cache / "worker").glob("*/_fallback"), key=os.path.getmtime)  # Polygraphy, as the worker has it
        loop, out = timed([str(python), str(home / "loop.py"), str(home / "folders.json")],
                          env={**os.environ, "PYTHONPATH": str(fallback), "POLYGRAPHY_USE_TENSORRT_RTX": "1",
                               "CUDA_VISIBLE_DEVICES": ""})
    counts = json.loads(out.splitlines()[-1])
    statuses = frame["status"].value_counts().to_dict()
    figures = {"cells": len(frame), "models": len(folders), "trtmatrix_s": round(cold, 2), "loop_s": round(loop, 2),
               "build_s": round(float(frame["build_s"].fillna(0).sum()), 2),
               "trtmatrix_over_loop": round(cold / loop, 2),
               "trtmatrix_cells_per_s": round(len(frame) / cold, 1), "loop_models_per_s": round(len(folders) / loop, 1),
               "trtmatrix_statuses": statuses, "loop_counts": counts}
    print(f"{'':16}{'seconds':>10}{'x loop':>10}")
    for name in ("trtmatrix_s", "loop_s", "build_s"):
        print(f"{name:16}{figures[name]:>10.2f}{figures[name] / loop:>10.2f}")
    print(f"{len(frame)} cells ({statuses}); the loop: {counts}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
