"""trtmatrix against the loops people write by hand, on the same cells, in one run.

Cells: every ONNX backend node test the installed onnx package generates that is a row (1,692
with onnx 1.23.2: numeric tensors, string tensors and sequences), plus the onnx package's shipped
models: `pytorch-converted` (a folder in the ONNX test layout) and the nine `light` networks
(resnet50, vgg19, densenet121, ...: real shapes, generated weights), on onnxruntime 1.32 (the
`ort-1.32` venv), profile fp32, in the user's cache (the matrix names no `cache_dir`).

- trtmatrix_s: `trtmatrix run --no-reuse` (every cell runs; the venv and the prepared artifacts
  exist from an unmeasured first run, as on any machine after its first night);
- trtmatrix_cached_s: the same command with reuse (nothing changed), right after it;
  both as a user's Python runs them, writing bytecode (PYTHONDONTWRITEBYTECODE unset for them);
- naive_loop_s: a fresh Python per cell that imports onnxruntime and numpy, reads the cell's files
  with trtmatrix's own value loader (matrix/worker/values.py: string tensors and sequences are
  kept in a layout onnxruntime cannot take from `np.load`), runs the model as often as a
  cell does (one warm-up, ten timed) and compares with np.allclose (strings exactly);
- polygraphy_loop_s: `polygraphy run model.onnx --onnxrt --load-inputs … --load-outputs …` per cell,
  on the kinds of cells its CLI takes (neither string tensors nor sequences: said in the output);
- engine_s: session creation plus the inferences, summed from trtmatrix's own records.
The two loops run on a sample of the judged (pass/fail) cells — at least one of every kind (the
case and the kinds of its values), the rest spread over the list — and are scaled to all cells:
the output says so, and the bench stops, naming the cell, if a loop cannot measure one, so it
never measures fewer kinds of cells than the suite holds. Prints a table, then one JSON object as
the last line.

    .venv/bin/python bench/matrix_bench.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matrix.store import list_runs, read_run  # noqa: E402
from matrix.store.cache import artifacts_folder, user_cache  # noqa: E402
from matrix.worker.engines import REPEATS, WARMUP  # noqa: E402
from matrix.worker.files import INPUTS  # noqa: E402
from matrix.worker.values import SEQUENCE, STRING, load_values  # noqa: E402

SAMPLE = 60
POLYGRAPHY_SAMPLE = 20  # of those: its CLI takes seconds a cell to start
RUNS = WARMUP + REPEATS  # inferences a cell runs, which the naive loop runs too
MIN_CELLS = 1000  # the cached re-run's goal is per 1,000 cells: measured on at least that many
# Goals (bench/README.md): naive loop ≥ 3×, Polygraphy's loop ≥ 20×, overhead ≤ 30 ms a cell,
# the cached re-run ≤ 6 % of the cold run and within 2 s per 1,000 cells plus 1.5 s of start-up.
GOALS = {"naive_over_trtmatrix": (">=", 3), "polygraphy_over_trtmatrix": (">=", 20),
         "overhead_ms_per_cell": ("<=", 30), "cached_over_cold": ("<=", 0.06), "cached_over_goal": ("<=", 1)}
POLYGRAPHY_CANNOT = {STRING: "its JSON inputs hold no object arrays", SEQUENCE: "its runner feeds tensors only"}
MATRIX = """\
[run]
environments = ["ort-1.32"]
timeout_s = 120
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

[cases.torch_models]
suite_dir = "{converted}"
profiles = ["fp32"]

[cases.light_models]
suite = "onnx-backend-light"
profiles = ["fp32"]
"""

NAIVE = """\
import sys, numpy as np, onnxruntime as ort
from matrix.worker.values import load_values
model, inputs, reference, runs = sys.argv[1:]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
feeds = load_values(inputs)[0]
for _ in range(int(runs)):
    outputs = session.run(None, feeds)
expected = np.load(reference)

def same(got, name):
    if isinstance(got, list):  # a sequence: its length, then item by item
        return len(got) == int(expected[name + "[]"]) and all(same(g, f"{name}[{i}]") for i, g in enumerate(got))
    want = expected[name]
    if want.dtype.kind in "OUS":
        return np.array_equal(np.asarray(got).astype(str), want.astype(str))
    return np.allclose(got, want, rtol=1e-3, atol=1e-7, equal_nan=True)

names = [o.name for o in session.get_outputs()]
print(all(same(o, n) for n, o in zip(names, outputs)))
"""


def timed(command: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, **kwargs)
    return time.perf_counter() - start, done


# trtmatrix's commands and the naive loop's scripts run as a user's Python runs them, writing
# bytecode: where this variable is set (these development machines set it), every command compiled
# trtmatrix's source again, 0.2 to 0.3 s each. The output says whether it was set.
BYTECODE_OFF = "PYTHONDONTWRITEBYTECODE"


def user_env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != BYTECODE_OFF}


def trtmatrix(config: Path, *flags: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and what it started): on a loaded machine the
    second says what the command itself cost."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, done = timed([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), *flags], env=user_env())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: the run found regressions, a result like any other
        raise SystemExit(f"trtmatrix run exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def kind(row, cache: Path) -> str:
    """A cell's kind: its case and what its values are beyond numeric tensors (the manifest of its
    inputs file names those of every value of the test, outputs too)."""
    kinds = load_values(artifacts_folder(cache) / row["artifact"] / INPUTS)[2]
    return f"{row['case']}: {', '.join(sorted(kinds)) or 'numeric tensors'}"


def sample(frame, count: int):
    """`count` judged cells: the first of every kind, the rest spread evenly over the list."""
    ran = frame[frame["status"].isin(["pass", "fail"])]
    first = ran.drop_duplicates("kind")
    step = max(len(ran) // max(count - len(first), 1), 1)
    spread = ran.iloc[::step].drop(first.index, errors="ignore")
    return ran.loc[sorted([*first.index, *spread.index[:max(count - len(first), 0)]])]


def naive_loop(cells, work: Path, cache: Path) -> float:
    """Seconds for every cell; stops, naming the cell, where the loop gave no verdict."""
    script = work / "naive.py"
    script.write_text(NAIVE)
    env = {**user_env(), "PYTHONPATH": str(REPO)}  # the value loader, as a user of trtmatrix's files imports it
    total = 0.0
    for _, row in cells.iterrows():
        folder = artifacts_folder(cache) / row["artifact"]
        seconds, done = timed([sys.executable, str(script), str(folder / "model.onnx"), str(folder / INPUTS),
                               str(folder / "reference.npz"), str(RUNS)], env=env)
        if done.returncode or done.stdout.strip() not in ("True", "False"):
            raise SystemExit(f"the naive loop gave no verdict on {row['cell_id']} ({row['kind']}):\n{done.stderr[-2000:]}")
        total += seconds
    return total


def polygraphy_loop(cells, work: Path, cache: Path) -> float:
    """Seconds for every cell; a cell Polygraphy's CLI could not run (not a mismatch) stops the bench."""
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # not one "Saving inference results" line per cell

    total = 0.0
    for index, (_, row) in enumerate(cells.iterrows()):
        folder = artifacts_folder(cache) / row["artifact"]
        inputs, outputs = work / f"in{index}.json", work / f"out{index}.json"
        save_json([load_values(folder / INPUTS)[0]], str(inputs))
        reference = dict(np.load(folder / "reference.npz"))
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        expected = {o.name: reference[o.name].astype(np.float32) for o in model.graph.output}
        results = RunResults()
        results.append(("expected", [IterationResult(expected, runner_name="expected")]))
        results.save(str(outputs))
        command = [str(Path(sys.executable).with_name("polygraphy")), "run", str(folder / "model.onnx"), "--onnxrt",
                   "--load-inputs", str(inputs), "--load-outputs", str(outputs), "--rtol", "1e-3", "--atol", "1e-7"]
        seconds, done = timed(command)
        if done.returncode and "Accuracy Summary" not in done.stdout + done.stderr:  # a mismatch exits 1: timed like a pass
            raise SystemExit(f"polygraphy could not run {row['cell_id']} ({row['kind']}):\n{done.stderr[-2000:]}")
        total += seconds
    return total


def polygraphy_takes(kind_name: str) -> bool:
    return not any(value in kind_name for value in POLYGRAPHY_CANNOT)


def main() -> None:
    converted = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"
    cache = user_cache()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = home / "matrix.toml"
        config.write_text(MATRIX.format(repo=REPO, home=home, converted=converted))
        trtmatrix(config)  # the venv and the prepared artifacts, as after a first night: not measured
        cold, cold_cpu = trtmatrix(config, "--no-reuse")
        cached, cached_cpu = trtmatrix(config)  # nothing changed: every result reused, right after the cold run
        frame = read_run(list_runs(home / "reports")[-2])  # the cold run's
        cells = len(frame)
        if cells < MIN_CELLS:
            raise SystemExit(f"{cells} cells: the cached re-run's goal is per {MIN_CELLS:,}; this onnx holds too few")
        ran = frame[frame["engine_version"].notna()]
        engine_s = float((ran["build_s"].fillna(0) + ran["infer_ms"].fillna(0) * RUNS / 1000).sum())
        judged = frame["status"].isin(["pass", "fail"])
        frame.loc[judged, "kind"] = [kind(row, cache) for _, row in frame[judged].iterrows()]
        picked = sample(frame, SAMPLE)
        kinds = frame.loc[judged, "kind"].value_counts()
        missing = set(kinds.index) - set(picked["kind"])
        if missing:
            raise SystemExit(f"the sample leaves out kinds of cells the suite holds: {sorted(missing)}")
        naive = naive_loop(picked, home, cache) * cells / len(picked)
        taken = sample(picked[picked["kind"].map(polygraphy_takes)], POLYGRAPHY_SAMPLE)
        polygraphy = polygraphy_loop(taken, home, cache) * cells / len(taken)
    goal_s = 2 * cells / 1000 + 1.5
    figures = {"cells": cells, "trtmatrix_s": round(cold, 2), "trtmatrix_cached_s": round(cached, 2),
               "trtmatrix_cpu_s": round(cold_cpu, 2), "trtmatrix_cached_cpu_s": round(cached_cpu, 2),
               "naive_loop_s": round(naive, 2), "polygraphy_loop_s": round(polygraphy, 2), "engine_s": round(engine_s, 2),
               "naive_over_trtmatrix": round(naive / cold, 2), "polygraphy_over_trtmatrix": round(polygraphy / cold, 2),
               "overhead_ms_per_cell": round((cold - engine_s) / cells * 1000, 1),
               "cached_over_cold": round(cached / cold, 3), "cached_s_per_1000": round(cached / cells * 1000, 2),
               "cached_goal_s": round(goal_s, 2), "cached_over_goal": round(cached / goal_s, 2),
               "loops_sampled": f"{len(picked)} cells of {len(kinds)} kinds, scaled x{cells / len(picked):.1f}; "
                                f"polygraphy {len(taken)} of them, scaled x{cells / len(taken):.1f}",
               "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
               "bytecode_off_here": os.environ.get(BYTECODE_OFF) is not None}
    print(f"{'':28}{'seconds':>10}{'x trtmatrix':>14}")
    for name in ("trtmatrix_s", "trtmatrix_cached_s", "naive_loop_s", "polygraphy_loop_s", "engine_s"):
        print(f"{name:28}{figures[name]:>10.2f}{figures[name] / cold:>14.2f}")
    print(f"{cells} cells; overhead {figures['overhead_ms_per_cell']} ms per cell; cached re-run "
          f"{figures['cached_s_per_1000']} s per 1,000 cells (goal {goal_s:.2f} s for these); loops: {figures['loops_sampled']}")
    print("kinds of judged cells (in the suite / in the sample): " + "; ".join(
        f"{name} {count}/{int((picked['kind'] == name).sum())}" for name, count in kinds.items()))
    left = {value: why for value, why in POLYGRAPHY_CANNOT.items() if any(value in k for k in kinds.index)}
    if left:
        print("polygraphy's CLI cannot take " + "; ".join(f"a {value} ({why})" for value, why in left.items())
              + ": its loop is timed on the other kinds and scaled to all cells")
    for name, (sense, goal) in GOALS.items():
        met = figures[name] >= goal if sense == ">=" else figures[name] <= goal
        print(f"goal {name} {sense} {goal}: {figures[name]} {'met' if met else 'NOT MET'}")
    print(f"CPU seconds (the command and its children): cold {figures['trtmatrix_cpu_s']}, cached "
          f"{figures['trtmatrix_cached_cpu_s']}; load average {figures['load_average']} on {figures['cpus']} CPUs")
    if figures["bytecode_off_here"]:
        print(f"{BYTECODE_OFF} was set here: unset for trtmatrix's commands, which write and read bytecode as a "
              "user's Python does")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
