"""A real run through real onnxruntime virtualenvs: failures stay in their cells, numbers are right.

The venvs are created by the code under test (uv), once per test session.
"""

import json

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import numpy_helper

from conftest import PROFILES, report_details
from matrix.environments.gpus import host_gpus
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import JSONL, PARQUET, REPORT, cell_file
from matrix.store.cache import result_dir
from matrix.worker.files import OUTPUTS, RESULT

REQUIRED_COLUMNS = {
    "run_id", "cell_id", "case", "params", "profile", "env", "engine", "engine_version", "status",
    "max_abs", "max_rel", "mean_abs", "rmse", "cosine", "mismatch_frac", "atol", "rtol", "build_s",
    "infer_ms", "error", "log_tail", "host", "gpu",
}

FAULTS = PROFILES + """
[profiles.crash]
inject = "crash"
[profiles.hang]
inject = "hang"
[profiles.nan]
inject = "nan"
[profiles.raise]
inject = "raise"

[cases.tiny]
onnx = "{model}"
inputs = "{inputs}"
expected = "{expected}"
profiles = ["crash", "fp32", "hang", "nan", "raise", "fp16"]
timeout_s = 6

[cases.tiny.tolerances.fp16]
atol = 1e-7
rtol = 0.0
"""


@pytest.fixture(scope="module", params=["fork", "spawn", "warm"])
def fault_run(request, tmp_path_factory, cache_dir):
    """The same faults with cells forked from a warm supervisor (onnxruntime's default), started
    as new interpreters (TensorRT's way, forced here), and run one after another in a warm worker
    that a crash or a hang ends and a fresh one replaces (torch on a GPU's way, forced here),
    nothing reused between the three. Both onnxruntime environments at once (jobs = 2), two cells
    each, as on a 2-core machine: their 6 s hangs overlap, not one after the other (the suite's time).
    The 6 s are the case's own timeout_s under the run's 600 s (issue 41p: a case's own timeout_s),
    in each of the three ways a cell starts."""
    from conftest import make_tiny_model, matrix_file

    home = tmp_path_factory.mktemp(f"faults-{request.param}")
    model, inputs = make_tiny_model(home)
    expected = home / "expected.npz"
    np.savez(expected, y=independent_reference(model, inputs))  # the float64 truth, given as outputs
    config = matrix_file(home, cache_dir, FAULTS.format(model=model, inputs=inputs, expected=expected),
                         environments=("ort-1.17", "ort-1.32", "trt-8.6"), timeout_s=600,
                         run="jobs = 2\ncell_jobs = 2\n")
    events = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRTMATRIX_CELL_START", request.param)
        run_dir = MatrixRun(build_plan(config), reuse=False, on_event=events.append).execute()
    frame = pd.read_parquet(run_dir / PARQUET)
    ran = frame[frame.engine_version.notna()]
    started = {json.loads((result_dir(cache_dir, env, key) / RESULT).read_text()).get("cell_start")
               for env, key in zip(ran.env, ran.content_key)}
    assert started == {request.param}
    return config, model, inputs, run_dir, frame, events


def cell(frame, profile, env):
    rows = frame[(frame.profile == profile) & (frame.env == env)]
    assert len(rows) == 1
    return rows.iloc[0]


def independent_reference(model_path, inputs_path):
    model = onnx.load(model_path)
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    x = np.load(inputs_path)["x"].astype(np.float64)
    return np.tanh(x @ weights["W"] + weights["b"])


@pytest.mark.parametrize("env,version", [("ort-1.17", "1.17.3"), ("ort-1.32", "1.32.0")])
def test_every_failure_stays_in_its_cell(fault_run, env, version):
    _, _, _, _, frame, _ = fault_run
    ok = cell(frame, "fp32", env)
    assert ok.status == "pass" and ok.engine_version == version  # reported from inside the venv
    crash = cell(frame, "crash", env)
    assert crash.status == "crash" and "SIGSEGV" in crash.error
    assert "Fatal Python error" in crash.log_tail  # faulthandler's dump is kept with the cell
    hang = cell(frame, "hang", env)
    assert hang.status == "timeout" and "6s" in hang.error
    nan = cell(frame, "nan", env)
    assert nan.status == "fail" and nan.nan_count == 32
    raised = cell(frame, "raise", env)
    assert raised.status == "error" and "injected failure" in raised.error
    assert "Traceback" in raised.log_tail


@pytest.mark.parametrize("env", ["ort-1.17", "ort-1.32"])
def test_metrics_match_an_independent_computation(fault_run, env):
    _, model, inputs, run_dir, frame, _ = fault_run
    expected = independent_reference(model, inputs)
    for profile in ("fp32", "fp16"):
        row = cell(frame, profile, env)
        with np.load(cell_file(run_dir, row.content_key, OUTPUTS)) as out:
            diff = np.abs(out["y"].astype(np.float64) - expected)
        assert row.max_abs == pytest.approx(diff.max(), rel=1e-9, abs=1e-15)
        assert row.mismatch_frac == pytest.approx(np.mean(diff > row.atol + row.rtol * np.abs(expected)))
    # FP16 weights really are FP16 on the engine side: the error grows, and 1e-7 rejects it.
    assert cell(frame, "fp16", env).max_abs > 10 * cell(frame, "fp32", env).max_abs
    assert cell(frame, "fp16", env).status == "fail"


@pytest.mark.skipif(bool(host_gpus()), reason="this host has a GPU: TensorRT cells would run")
def test_tensorrt_environment_is_skipped_with_the_reason(fault_run):
    frame = fault_run[4]
    trt = frame[frame.env == "trt-8.6"]
    assert len(trt) == 6 and set(trt.status) == {"skipped"}
    assert trt.error.str.contains("no NVIDIA GPU").all()
    assert trt.engine_version.isna().all()  # nothing ran there, so nothing was reported


def test_run_directory_contents(fault_run):
    _, _, _, run_dir, frame, events = fault_run
    assert REQUIRED_COLUMNS <= set(frame.columns)
    assert len(frame) == 18 and frame.cell_id.is_unique
    lines = (run_dir / JSONL).read_text().splitlines()
    assert [json.loads(line)["cell_id"] for line in lines] == list(frame.cell_id)
    html = (run_dir / REPORT).read_text()
    assert '<tr id="row-tiny/fp32"' in html
    assert "<script>alert" not in html  # the injected error is in the cell's details, not the page
    raised = next(c for c in report_details(run_dir) if c["status"] == "error" and "injected" in (c["error"] or ""))
    assert "RuntimeError: injected failure <script>alert('x')</script> & more" == raised["error"]  # data, shown as text
    assert sum(e["event"] == "recorded" for e in events) == 18


def test_second_run_reuses_results_but_not_crashes(fault_run):
    config = fault_run[0]
    frame = pd.read_parquet(MatrixRun(build_plan(config)).execute() / PARQUET)
    by = {(r.profile, r.env): r for r in frame.itertuples()}
    assert by[("fp32", "ort-1.17")].reused and by[("fp32", "ort-1.17")].status == "pass"
    assert by[("raise", "ort-1.32")].reused
    assert not by[("crash", "ort-1.17")].reused and by[("crash", "ort-1.17")].status == "crash"
    assert not by[("hang", "ort-1.32")].reused
