"""trtmatrix against the loops people write by hand, on the same cells, in one run.

Cells: every ONNX backend node test the installed onnx package generates that has plain tensors
(1,460 with onnx 1.23.2), plus the onnx package's shipped models: `pytorch-converted` (a folder in
the ONNX test layout) and the nine `light` networks (resnet50, vgg19, densenet121, ...: real
shapes, generated weights), on onnxruntime 1.32 (the `ort-1.32` venv), profile fp32.

- trtmatrix_s: `trtmatrix run --no-reuse` (every cell runs; the venv and the prepared artifacts
  exist from an unmeasured first run, as on any machine after its first night);
- trtmatrix_cached_s: the same command with reuse (nothing changed);
- naive_loop_s: a fresh Python per cell that imports onnxruntime and numpy, runs the model six
  times (as trtmatrix does: one warm-up, five timed) and compares with np.allclose;
- polygraphy_loop_s: `polygraphy run model.onnx --onnxrt --load-inputs … --load-outputs …` per cell;
- engine_s: session creation plus the six inferences, summed from trtmatrix's own records.
The two loops run on a sample of cells (SAMPLE, spread over the list) and are scaled to all cells:
the output says so. Prints a table, then one JSON object as the last line.

    .venv/bin/python bench/matrix_bench.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matrix.store import list_runs, read_run  # noqa: E402

SAMPLE = 60
MATRIX = """\
[run]
environments = ["ort-1.32"]
timeout_s = 120
cases_dir = "{repo}/cases"
images_dir = "{repo}/images"
cache_dir = "{repo}/.trtmatrix-cache"
reports_dir = "{home}/reports"

[profiles.fp32]
precision = "fp32"

[tolerances.fp32]
atol = 1e-7
rtol = 1e-3

[cases.onnx_node]
suite = "onnx-backend-node"
profiles = ["fp32"]

[cases.torch_models]
suite_dir = "{converted}"
profiles = ["fp32"]

[cases.light_models]
suite = "onnx-backend-light"
profiles = ["fp32"]
"""

NAIVE = """\
import sys, numpy as np, onnxruntime as ort
model, inputs, reference = sys.argv[1:]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
feeds = dict(np.load(inputs))
for _ in range(6):
    outputs = session.run(None, feeds)
expected = np.load(reference)
names = [o.name for o in session.get_outputs()]
print(all(np.allclose(o, expected[n], rtol=1e-3, atol=1e-7) for n, o in zip(names, outputs)))
"""


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def trtmatrix(config: Path, *flags: str) -> float:
    return timed([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), *flags])


def sample(frame, count: int):
    ran = frame[frame["status"].isin(["pass", "fail"])]
    step = max(len(ran) // count, 1)
    return ran.iloc[::step].head(count)


def artifacts(row) -> Path:
    return REPO / ".trtmatrix-cache" / "artifacts" / row["artifact"]


def naive_loop(cells, work: Path) -> float:
    script = work / "naive.py"
    script.write_text(NAIVE)
    return sum(timed([sys.executable, str(script), str(artifacts(r) / "model.onnx"), str(artifacts(r) / "inputs.npz"),
                      str(artifacts(r) / "reference.npz")]) for _, r in cells.iterrows())


def polygraphy_loop(cells, work: Path) -> float:
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # not one "Saving inference results" line per cell

    import numpy as np

    total = 0.0
    for index, (_, row) in enumerate(cells.iterrows()):
        folder = artifacts(row)
        inputs, outputs = work / f"in{index}.json", work / f"out{index}.json"
        save_json([dict(np.load(folder / "inputs.npz"))], str(inputs))
        reference = dict(np.load(folder / "reference.npz"))
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        expected = {o.name: reference[o.name].astype(np.float32) for o in model.graph.output}
        results = RunResults()
        results.append(("expected", [IterationResult(expected, runner_name="expected")]))
        results.save(str(outputs))
        command = [str(Path(sys.executable).with_name("polygraphy")), "run", str(folder / "model.onnx"), "--onnxrt",
                   "--load-inputs", str(inputs), "--load-outputs", str(outputs), "--rtol", "1e-3", "--atol", "1e-7"]
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO, capture_output=True)  # a mismatch exits 1: still a timed cell
        total += time.perf_counter() - start
    return total


def main() -> None:
    converted = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = home / "matrix.toml"
        config.write_text(MATRIX.format(repo=REPO, home=home, converted=converted))
        trtmatrix(config)  # the venv and the prepared artifacts, as after a first night: not measured
        cold = trtmatrix(config, "--no-reuse")
        frame = read_run(list_runs(home / "reports")[-1])
        cached = trtmatrix(config)
        cells = len(frame)
        ran = frame[frame["engine_version"].notna()]
        engine_s = float((ran["build_s"].fillna(0) + ran["infer_ms"].fillna(0) * 6 / 1000).sum())
        picked = sample(frame, SAMPLE)
        scale = cells / len(picked)
        naive = naive_loop(picked, home) * scale
        polygraphy = polygraphy_loop(picked, home) * scale
    figures = {"cells": cells, "trtmatrix_s": round(cold, 2), "trtmatrix_cached_s": round(cached, 2),
               "naive_loop_s": round(naive, 2), "polygraphy_loop_s": round(polygraphy, 2), "engine_s": round(engine_s, 2),
               "naive_over_trtmatrix": round(naive / cold, 2), "polygraphy_over_trtmatrix": round(polygraphy / cold, 2),
               "overhead_ms_per_cell": round((cold - engine_s) / cells * 1000, 1),
               "loops_sampled": f"{len(picked)} cells, scaled x{scale:.1f}"}
    print(f"{'':28}{'seconds':>10}{'x trtmatrix':>14}")
    for name in ("trtmatrix_s", "trtmatrix_cached_s", "naive_loop_s", "polygraphy_loop_s", "engine_s"):
        print(f"{name:28}{figures[name]:>10.2f}{figures[name] / cold:>14.2f}")
    print(f"{cells} cells; overhead {figures['overhead_ms_per_cell']} ms per cell; loops: {figures['loops_sampled']}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
