"""Speed flags only where they are true: a change is flagged where a Mann-Whitney U test over the
timed inferences says the two samples differ AND the medians differ by more than a stated factor;
two environments that install the same onnxruntime, run one after the other on this loaded
machine, never differ by a flag; a plot line never joins two places (a venv and a container)."""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO, matrix_file
from matrix.report.html import case_plot
from matrix.report.timing import FACTOR, P_THRESHOLD, flag, place_names, significance

BASE = [1.00, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09]


def cell(times):
    return {"infer_ms_runs": json.dumps(times), "infer_ms": statistics.median(times)}


def test_a_flag_needs_the_u_test_and_a_change_beyond_the_factor():
    # Ranges that do not overlap (the old rule flagged this), by 10%: within the factor, no flag.
    assert flag(cell(BASE), cell([t + 0.1 for t in BASE])) is None
    assert significance(cell(BASE), cell([t + 0.1 for t in BASE])) < P_THRESHOLD  # the test alone would say so
    # Three times slower, every repeat: flagged; the same the other way is faster.
    assert flag(cell(BASE), cell([3 * t for t in BASE])) == "slower"
    assert flag(cell([3 * t for t in BASE]), cell(BASE)) == "faster"
    # Medians twice apart but samples that overlap (load bursts on both sides): the test says no.
    noisy_a = [1.0, 1.1, 1.0, 5.0, 1.2, 4.0, 1.1, 6.0, 1.0, 5.5]
    noisy_b = [2.0, 2.2, 6.0, 2.1, 5.0, 2.3, 7.0, 2.0, 1.0, 2.4]
    assert statistics.median(noisy_b) / statistics.median(noisy_a) > FACTOR
    assert flag(cell(noisy_a), cell(noisy_b)) is None
    # Most inferences slowed down twice, the fastest by 30%: load on most of them, not a slower engine.
    loaded = [2 * t for t in BASE[2:]] + [1.3, 1.35]
    assert significance(cell(BASE), cell(loaded)) < P_THRESHOLD and flag(cell(BASE), cell(loaded)) is None
    # Five repeats a side cannot reach p < 0.002 (2 / C(10, 5) = 0.008): not tested, never flagged.
    assert significance(cell(BASE[:5]), cell([3 * t for t in BASE[:5]])) is None
    assert flag(cell(BASE[:5]), cell([3 * t for t in BASE[:5]])) is None
    # Microseconds three times apart, every repeat (CI saw 0.006 against 0.016 ms for one Clip in two
    # definitions of one onnxruntime): the call's overhead and the scheduler, not the engine.
    micro = [t / 200 for t in BASE]
    assert significance(cell(micro), cell([3 * t for t in micro])) < P_THRESHOLD
    assert flag(cell(micro), cell([3 * t for t in micro])) is None


def test_a_speed_plot_draws_a_line_per_place():
    """A venv and a container of the same versions are two lines, not one zigzag between them."""
    envs = [("ort-1.17", None, 2.0), ("ort-1.17-docker", "img", 1.0), ("ort-1.20", None, 3.0), ("ort-1.20-docker", "img", 1.5)]
    frame = pd.DataFrame([{"row_id": "case/fp32", "case": "case", "profile": "fp32", "env": env, "engine": "onnxruntime",
                           "engine_version": env.split("-")[1], "image": image, "gpu": None, "infer_ms": ms}
                          for env, image, ms in envs])
    plot = case_plot(frame, "case", [e for e, _, _ in envs], "infer_ms", "median", None, place_names(frame))
    lines = {s["profile"]: len(s["points"]) for s in plot["series"]}
    assert lines == {"fp32 · onnxruntime, venv or host, CPU": 2, "fp32 · onnxruntime, container, CPU": 2}


def test_two_environments_of_one_onnxruntime_never_differ_by_a_flag(tmp_path, cache_dir):
    """The null experiment: ort-1.32 and a second definition installing the very same onnxruntime,
    run three times with nothing reused, on this shared 2-core machine; B against A flags nothing.
    A pair of different places (a venv against a container) is refused, saying why."""
    images = tmp_path / "images"
    shutil.copytree(REPO / "images", images)
    (images / "ort-1.32-again.toml").write_text((images / "ort-1.32.toml").read_text())
    body = '[profiles.fp32]\nprecision = "fp32"\n' + "".join(
        f'[cases.{case}]\nprofiles = ["fp32"]\n' for case in ("ort_pad_avgpool_fusion", "ort_pad_maxpool_fusion",
                                                              "ort_clip_fp16_min_only", "layernorm_block"))
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32", "ort-1.32-again"), images_dir=images)
    env = {**os.environ, "COLUMNS": "250"}
    for _ in range(3):
        done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"], cwd=REPO,
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        shown = subprocess.run([sys.executable, "-m", "matrix.cli", "diff", "-c", str(config), "--timing",
                                "--from", "ort-1.32", "--to", "ort-1.32-again"], cwd=REPO, capture_output=True,
                               text=True, env=env)
        assert shown.returncode == 0, shown.stderr
        header = shown.stdout.splitlines()[0]
        assert re.match(r"\d+ rows timed; latency changes flagged: 0 slower, 0 faster", header), shown.stdout
        assert "%" in shown.stdout  # B was compared with A, row by row


def test_timings_of_two_places_are_not_compared_even_when_asked(tmp_path):
    from matrix.store import to_frame, write_tables
    from matrix.store.records import empty_record

    frame = to_frame([empty_record(cell_id=f"r/fp32/{env}", row_id="r/fp32", case="r", params={}, profile="fp32",
                                   env=env, engine="onnxruntime", engine_version="1.32.0", status="pass", verdict="pass", image=image,
                                   infer_ms=statistics.median(BASE), infer_ms_runs=json.dumps(BASE))
                      for env, image in (("ort-1.32", None), ("ort-1.32-docker", "sha256:0123"))])
    run_dir = tmp_path / "runs" / "20260101T000000.000Z-0000"
    run_dir.mkdir(parents=True)
    write_tables(run_dir, frame)
    refused = subprocess.run([sys.executable, "-m", "matrix.cli", "diff", str(run_dir), "--timing", "--from", "ort-1.32",
                              "--to", "ort-1.32-docker"], cwd=REPO, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        "error: ort-1.32 runs on onnxruntime, venv or host, CPU, ort-1.32-docker on onnxruntime, container, CPU: "
        "timings of different places are not compared")


RENDER = """
import json, sys
from pathlib import Path
from matrix.report.html import render_report
from matrix.store import read_run
from matrix.store.cache import speed_tests
report = render_report(read_run(Path(sys.argv[1])), {"run_id": "speed"}, speed_tests=speed_tests(Path(sys.argv[2])))
print(json.dumps({"timing": report.timing, "scipy": "scipy.stats" in sys.modules}))
"""


def test_a_u_test_is_remembered_by_its_samples_and_a_report_of_remembered_pairs_imports_no_scipy(tmp_path):
    """issue 44, remaining point 1 (an unchanged re-run's report imported scipy.stats, 0.75 s, to
    test again the same pairs of reused cells): a p-value is kept in the cache by the two samples.
    The remembered answer is scipy's; it is what decides while kept (here marked: no flag); a
    report in a fresh process whose pairs are all remembered does not import scipy.stats and flags
    the same cells."""
    from scipy.stats import mannwhitneyu

    from matrix.store import to_frame, write_tables
    from matrix.store.cache import speed_tests
    from matrix.store.records import empty_record

    slower, folder = [3 * t for t in BASE], speed_tests(tmp_path / "cache")
    p = significance(cell(BASE), cell(slower), folder)
    assert p == mannwhitneyu(BASE, slower, alternative="two-sided").pvalue < P_THRESHOLD
    [memo] = folder.iterdir()
    assert flag(cell(BASE), cell(slower), remembered=folder) == "slower"
    memo.write_text("0.5")
    assert significance(cell(BASE), cell(slower), folder) == 0.5 and flag(cell(BASE), cell(slower), remembered=folder) is None
    memo.unlink()

    frame = to_frame([empty_record(cell_id=f"r/fp32/{env}", row_id="r/fp32", case="r", params={}, profile="fp32",
                                   env=env, engine="onnxruntime", env_version=version, engine_version=version,
                                   status="pass", verdict="pass", infer_ms=statistics.median(times),
                                   infer_ms_runs=json.dumps(times))
                      for env, version, times in (("ort-1.17", "1.17.3", BASE), ("ort-1.20", "1.20.1", slower))])
    run_dir = tmp_path / "runs" / "20260101T000000.000Z-0000"
    run_dir.mkdir(parents=True)
    write_tables(run_dir, frame)

    def render() -> dict:
        done = subprocess.run([sys.executable, "-c", RENDER, str(run_dir), str(tmp_path / "cache")], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first, again = render(), render()
    assert first["scipy"] and not again["scipy"]
    assert '"slower"' in first["timing"] and again["timing"] == first["timing"]
