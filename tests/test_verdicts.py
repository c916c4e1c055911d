"""Verdicts a person can trust, read where people read them: a NaN is never shown as a small
number, a cell right once and wrong later shows its drift, and an 80-column log stays readable.
Real runs of real onnxruntime versions through the real command line."""

import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from conftest import PROFILES, REPO, report_details, tiny_case
from matrix.store.records import empty_record
from matrix.store import REPORT, list_runs, read_run, to_frame
from matrix.report.upgrade import default_pair
from matrix.worker.engines import REPEATS, WARMUP

SKIPPED_ENVS = ("trt-8.6", "trt-9.3", "trt-10.0.1.6", "trt-10.8")  # skipped here: they only widen the table


def cli(*args, columns=80):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": str(columns)})


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory, cache_dir):
    """tiny in FP32 (passes), with NaN outputs, and right on its first inference only, on two
    onnxruntime versions; the CLI run at 80 columns with JUnit XML."""
    from conftest import make_tiny_model, matrix_file

    home = tmp_path_factory.mktemp("verdicts")
    model, inputs = make_tiny_model(home)
    body = PROFILES + '[profiles.nan]\ninject = "nan"\n[profiles.drift]\ninject = "drift"\n'
    config = matrix_file(home, cache_dir, body + tiny_case(model, inputs, ("fp32", "nan", "drift")),
                         environments=("ort-1.17", "ort-1.32", *SKIPPED_ENVS))
    result = cli("run", "-c", str(config), "--junit-xml", str(home / "junit.xml"))
    assert result.returncode == 0, result.stderr
    run_dir = list_runs(home / "reports")[-1]
    return config, run_dir, read_run(run_dir).set_index("cell_id"), result


def test_a_nan_cell_has_no_finite_max_abs_and_shows_nan_first(faulty_run):
    _, _, frame, _ = faulty_run
    cell = frame.loc["tiny/nan/ort-1.32"]
    assert cell["status"] == "fail" and cell["nan_count"] == 32
    assert math.isinf(cell["max_abs"])
    outputs = json.loads(cell["outputs"])
    assert outputs[0]["nan_count"] == 32 and math.isinf(outputs[0]["max_abs"])
    assert frame.loc["tiny/fp32/ort-1.32", "nan_count"] == 0 and frame.loc["tiny/fp32/ort-1.32", "max_abs"] < 1e-4


def test_a_cell_right_once_then_wrong_is_judged_on_its_worst_run_with_its_drift(faulty_run):
    _, _, frame, _ = faulty_run
    for env in ("ort-1.17", "ort-1.32"):
        drifted, steady = frame.loc[f"tiny/drift/{env}"], frame.loc[f"tiny/fp32/{env}"]
        assert drifted["status"] == "fail"
        assert drifted["drift_max_abs"] == pytest.approx(1.0, abs=1e-6)
        assert (drifted["drift_run"], drifted["runs"]) == (2, WARMUP + REPEATS)  # run 1 is the warm-up, and it was right
        assert drifted["max_abs"] == pytest.approx(1.0, abs=1e-6)
        assert (steady["drift_max_abs"], steady["runs"]) == (0.0, WARMUP + REPEATS) and pd.isna(steady["drift_run"])


def test_an_80_column_log_names_every_failing_cell_in_full(faulty_run):
    _, _, frame, result = faulty_run
    log = result.stdout + result.stderr
    assert "…" not in log
    for cell_id in ("tiny/nan/ort-1.17", "tiny/nan/ort-1.32", "tiny/drift/ort-1.17", "tiny/drift/ort-1.32"):
        line = next(line for line in log.splitlines() if line.startswith(f"  FAIL {cell_id} "))
        assert ("NaN×32" if "/nan/" in cell_id else "max_abs 1.0e+00, drift 1.0e+00 from inference 2") in line
    assert "ort-1.32: 2 fail, 1 pass" in log.splitlines()  # counts per environment
    for env in SKIPPED_ENVS:
        assert f"{env}: 3 skipped (no NVIDIA GPU" in log
    wide = cli("run", "-c", str(faulty_run[0]), columns=250)  # reused cells; wide enough for the matrix
    header = next(line for line in wide.stderr.splitlines() if "ort-1.17" in line and "trt-10.8" in line)
    assert "…" not in wide.stderr and "case / profile" in header
    assert "FAIL NaN×32" in wide.stderr


def test_diff_history_junit_and_report_show_nan_not_a_number(faulty_run):
    config, run_dir, _, _ = faulty_run
    diff = cli("diff", "-c", str(config))
    assert diff.returncode == 0 and "…" not in diff.stdout
    assert "ort-1.17 → ort-1.32" in diff.stdout
    assert any("tiny/nan" in line and "NaN×32 → NaN×32" in line for line in diff.stdout.splitlines())
    wide_diff = cli("diff", "-c", str(config), columns=250)
    assert "NaN×32" in wide_diff.stdout and not re.search(r"\binf\b", wide_diff.stdout.lower())  # no number "inf"

    history = cli("history", "-c", str(config), "--cell", "tiny/nan/*", columns=250)
    assert history.returncode == 0 and "NaN×32" in history.stdout

    junit = ET.parse(run_dir.parent.parent.parent / "junit.xml").getroot()
    failure = junit.find("testsuite[@name='ort-1.32']/testcase[@name='tiny/nan']/failure")
    assert "NaN×32" in failure.get("message")

    html = (run_dir / REPORT).read_text()
    data = html.split('<script type="application/json" id="data">')[1].split("</script>")[0]
    inline = json.loads(data, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    row, env = inline["rows"].index("tiny/nan"), inline["envs"].index("ort-1.32")
    # The page's cell: its row's cells in column order (the page's script gives each its id from the data).
    cell_html = html.split('<tr id="row-tiny/nan"')[1].split("</tr>")[0].split("<td")[env + 1].split("</td>")[0]
    assert cell_html.startswith(' class="c fail">') and "NaN×32" in cell_html and "e-" not in cell_html
    # [row, column, status, max_abs, worst where it is not max_abs's own] (html.cell_line)
    assert [line[2:] for line in inline["cells"] if line[:2] == [row, env]] == [[inline["order"].index("fail"), "inf", "NaN×32"]]
    details = report_details(run_dir, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    nan_cell = next(c for c in details if c["cell_id"] == "tiny/nan/ort-1.32")
    assert (nan_cell["worst"], nan_cell["max_abs"]) == ("NaN×32", "inf")


def _frame(*envs):
    return to_frame([empty_record(cell_id=f"r/{env}", row_id="r", case="r", params={}, profile="fp32", env=env,
                                  engine=engine, env_version=version, engine_version=version, status=status)
                     for env, engine, version, status in envs])


def test_the_default_upgrade_pair_is_two_distinct_versions_of_one_engine():
    frame = _frame(("ort-1.17", "onnxruntime", "1.17.3", "pass"), ("ort-1.32", "onnxruntime", "1.32.0", "pass"),
                   ("ort-1.32-docker", "onnxruntime", "1.32.0", "pass"), ("trt-10.8", "tensorrt", "10.8.0.43", "skipped"))
    assert default_pair(frame) == ("ort-1.17", "ort-1.32")
    assert default_pair(_frame(("a", "onnxruntime", "1.32.0", "pass"), ("b", "onnxruntime", "1.32.0", "pass"))) is None


def test_a_reports_dir_that_is_a_file_stops_the_run_before_anything_runs(write_matrix, tiny_model, tmp_path, cache_dir):
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs))
    (tmp_path / "reports").write_text("not a folder")
    results_before = sorted((cache_dir / "results").rglob("*")) if (cache_dir / "results").exists() else []
    result = cli("run", "-c", str(config))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "run.reports_dir" in result.stderr
    assert "is a file, not a folder" in result.stderr
    assert (sorted((cache_dir / "results").rglob("*")) if (cache_dir / "results").exists() else []) == results_before


def test_fp16_tolerance_is_needed_only_when_a_case_runs_fp16(tmp_path, tiny_model):
    model, inputs = tiny_model
    head = f'[run]\nenvironments = ["ort-1.32"]\nimages_dir = "{REPO / "images"}"\n[tolerances.fp32]\natol = 1e-4\nrtol = 1e-3\n'
    config = tmp_path / "matrix.toml"
    config.write_text(head + PROFILES + tiny_case(model, inputs, ("fp32",)))
    assert cli("plan", "-c", str(config)).returncode == 0
    config.write_text(head + PROFILES + tiny_case(model, inputs, ("fp32", "fp16")))
    result = cli("plan", "-c", str(config))
    assert result.returncode == 2 and "tolerances.fp16: missing default tolerance" in result.stderr
