"""bench/gpu_scaling.py's own logic, in its dry mode (two GPUs faked, the cells on this CPU): the
runs held to 1 and 2 GPUs, its table and JSON line, each GPU's time from its worker's clock
(issue 43), and the verdict check that must fail the bench when two runs disagree. What it measures on GPUs has not run here."""

import json
import subprocess
import sys

import pandas as pd

from conftest import NO_REAL_GPU, REPO

sys.path.insert(0, str(REPO / "bench"))
from gpu_scaling import verdict_differences  # noqa: E402


@NO_REAL_GPU
def test_the_dry_bench_holds_each_run_to_its_gpus_and_says_it_measures_nothing():
    done = subprocess.run([sys.executable, "bench/gpu_scaling.py", "--dry", "2", "--case", "explicit_attention",
                           "--batch", "1", "--no-warm-up", "--builds", "2"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    one, two = result["runs"]
    assert result["dry"] and result["verdicts_equal"] and (one["gpus"], two["gpus"]) == (1, 2)
    assert list(one["split"]) == ["0"] and set(two["split"]) <= {"0", "1"}
    assert sum(one["split"].values()) == sum(two["split"].values()) == result["cells"]
    assert abs(two["efficiency"] - one["seconds"] / two["seconds"] / 2) < 0.01  # speed-up / GPUs
    assert "DRY RUN" in done.stdout and "measure nothing" in done.stdout
    # Issue 43: each GPU's time split from its worker's own clock (each cell's result.json keeps it).
    for run in (one, two):
        workers = run["workers"]
        assert set(workers) == set(run["split"]) and {g: w["cells"] for g, w in workers.items()} == run["split"]
        for w in workers.values():
            assert w["imports_s"] > 0 and w["host_before_s"] >= 0 and w["after_last_s"] >= 0
            parts = w["inputs_s"] + w["module_s"] + w["infer_s"] + w["engine_rest_s"] + w["save_s"]
            assert 0 < w["infer_s"] and parts <= w["in_cells_s"] + 0.01
    timed = (REPO / "bench" / ".gpu-scaling-builds-2.toml").read_text()  # --builds: the same cells, 2 builds
    assert {line for line in timed.splitlines() if line.startswith("builds")} == {"builds = 2"}


def test_a_cell_whose_verdict_differs_between_runs_is_named():
    runs = [{"gpus": [0], "frame": pd.DataFrame({"verdict": ["pass", "fail"]}, index=["a", "b"])},
            {"gpus": [0, 1], "frame": pd.DataFrame({"verdict": ["pass", "pass", "pass"]}, index=["a", "b", "c"])}]
    assert verdict_differences(runs) == ["b: fail on 1 GPU(s), pass on 2", "c: None on 1 GPU(s), pass on 2"]
    assert verdict_differences([runs[1], runs[1]]) == []
