"""Runs accumulate and are re-read: re-judging stored results, regressions and the exit status,
JUnit XML, diff, history, exports and the pages across runs — through the real command line."""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from conftest import PROFILES, REPO, tiny_case
from matrix.store import CELL_FILES, CSV, JSON, list_runs, read_run

# A known issue of the tiny model's FP16 cells on onnxruntime from 1.30 (test_ci_gate uses it too).
KNOWN_FP16 = """
[[issue]]
id = "ort-fp16-tiny"
title = "FP16 is coarse"
case = "tiny"
profiles = ["fp16"]
engine = "onnxruntime"
versions = ">=1.30"
reported = "max abs 1e-3 somewhere"
source = "this test"
"""
CELL = "tiny/fp16/ort-1.32"


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


@pytest.fixture
def project(write_matrix, tiny_model, tmp_path):
    """A matrix whose FP16 tolerance can be tightened: the same outputs pass or fail."""
    model, inputs = tiny_model

    def write(fp16_atol: float, registry: str = ""):
        cases = tmp_path / "cases"
        cases.mkdir(exist_ok=True)
        (cases / "known_issues.toml").write_text(registry)
        tolerance = f"[cases.tiny.tolerances.fp16]\natol = {fp16_atol}\nrtol = 0.0\n"
        return write_matrix(PROFILES + tiny_case(model, inputs, ("fp32", "fp16")) + tolerance,
                            environments=("ort-1.32",), cases_dir=cases)

    return write


def status(run_dir, cell_id=CELL):
    return read_run(run_dir).set_index("cell_id").loc[cell_id, "status"]


def test_a_newly_failing_cell_is_a_regression_exit_1_and_an_old_failure_is_not(project, tmp_path):
    config = project(fp16_atol=1e-2)
    first = cli("run", "-c", str(config))
    assert first.returncode == 0, first.stderr
    config = project(fp16_atol=1e-9)  # same stored outputs (reused), tighter tolerance: now fails
    second = cli("run", "-c", str(config), "--junit-xml", str(tmp_path / "junit.xml"))
    assert second.returncode == 1
    assert f"{CELL}: pass → fail" in second.stderr
    third = cli("run", "-c", str(config))
    assert third.returncode == 0, "fail → fail is not a new failure"
    runs = list_runs(tmp_path / "reports")
    assert [status(r) for r in runs] == ["pass", "fail", "fail"]
    assert bool(read_run(runs[1]).set_index("cell_id").loc[CELL, "reused"])  # nothing was re-run

    suites = ET.parse(tmp_path / "junit.xml").getroot()
    suite = suites.find("testsuite[@name='ort-1.32']")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    failure = suite.find("testcase[@name='tiny/fp16']/failure")
    assert failure is not None and "max_abs" in failure.get("message")
    assert suite.find("testcase[@name='tiny/fp32']/failure") is None


def test_report_re_applies_tolerances_and_known_issues_without_running(project, tmp_path):
    config = project(fp16_atol=1e-9)
    assert cli("run", "-c", str(config)).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    before = read_run(run_dir).set_index("cell_id").loc[CELL]
    assert before["status"] == "fail"
    cell_files = sorted((run_dir / "cells").rglob("*"))

    loosened = project(fp16_atol=1e-2)
    assert cli("report", run_dir.name, "-c", str(loosened)).returncode == 0
    after = read_run(run_dir).set_index("cell_id").loc[CELL]
    assert (after["status"], after["atol"], after["max_abs"]) == ("pass", 1e-2, before["max_abs"])
    assert sorted((run_dir / "cells").rglob("*")) == cell_files
    assert len(list_runs(tmp_path / "reports")) == 1

    registry = project(fp16_atol=1e-9, registry=KNOWN_FP16)
    assert cli("report", run_dir.name, "-c", str(registry)).returncode == 0
    known = read_run(run_dir).set_index("cell_id").loc[CELL]
    assert (known["status"], known["verdict"], known["known_issue"]) == ("xfail", "fail", "ort-fp16-tiny")
    assert "max abs 1e-3 somewhere" in known["reported"]
    assert "xfail" in (run_dir / "report.html").read_text()


def test_report_re_judges_a_run_written_in_the_older_folder_per_cell_layout(project, tmp_path):
    """Nightly history from before the flat layout (cells/<key>/outputs.npz, refs/<artifact>/
    reference.npz) is re-judged from its own outputs, not left with its old verdicts."""
    config = project(fp16_atol=1e-9)
    assert cli("run", "-c", str(config)).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    names = {suffix: name for name, suffix in CELL_FILES.items()}
    for flat in list((run_dir / "cells").iterdir()):
        key, _, suffix = flat.name.partition(".")
        (run_dir / "cells" / key).mkdir(exist_ok=True)
        flat.rename(run_dir / "cells" / key / names["." + suffix])
    for flat in (run_dir / "refs").glob("*.npz"):
        (run_dir / "refs" / flat.stem).mkdir()
        flat.rename(run_dir / "refs" / flat.stem / "reference.npz")
    assert status(run_dir) == "fail"
    assert cli("report", run_dir.name, "-c", str(project(fp16_atol=1e-2))).returncode == 0
    assert status(run_dir) == "pass"


def test_exports_index_history_and_diff(project, tmp_path):
    config = project(fp16_atol=1e-2)
    for _ in range(2):
        assert cli("run", "-c", str(config)).returncode == 0
    runs = list_runs(tmp_path / "reports")
    frame = read_run(runs[-1])
    assert len(pd.read_csv(runs[-1] / CSV)) == len(json.loads((runs[-1] / JSON).read_text())) == len(frame)
    exported = cli("export", "-c", str(config), "--format", "json")
    assert [r["cell_id"] for r in json.loads(exported.stdout)] == list(frame["cell_id"])

    index = (tmp_path / "reports" / "index.html").read_text()
    assert all(f"runs/{r.name}/report.html" in index for r in runs)
    history = (tmp_path / "reports" / "history.html").read_text()  # the page builds its rows from this JSON
    data = json.loads(history.split('<script type="application/json" id="data">')[1].split("</script>")[0])
    assert data["run_ids"] == [runs[1].name, runs[0].name]  # newest first
    assert [status for status, _ in dict(data["cells"])[CELL]] == ["pass", "pass"]

    shown = cli("history", "-c", str(config), "--cell", "tiny/fp16/*")
    assert shown.returncode == 0 and CELL in shown.stdout and "tiny/fp32" not in shown.stdout
    # Where the table would cut the ids (a narrow log): one line per cell instead, ids whole.
    narrow = subprocess.run([sys.executable, "-m", "matrix.cli", "history", "-c", str(config)], cwd=REPO,
                            capture_output=True, text=True, env={**os.environ, "COLUMNS": "30"})
    assert narrow.returncode == 0 and "…" not in narrow.stdout
    line = next(line for line in narrow.stdout.splitlines() if line.startswith(f"{CELL}: "))
    assert line.count(" | ") == 1 and line.count("pass") == 2  # two runs, newest first
    assert cli("diff", "-c", str(config), "--from", "ort-1.32", "--to", "nowhere").returncode == 2
    # A reader that stops reading (`| head -1`) is no failure: exit 0, nothing on stderr.
    for command in ("history", "export --format csv"):
        piped = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m matrix.cli {command} -c {config} | head -1"],
                               cwd=REPO, capture_output=True, text=True)
        assert (piped.returncode, piped.stderr, len(piped.stdout.splitlines())) == (0, "", 1), command


def test_the_index_reads_each_runs_summary_and_makes_it_again_when_the_run_changed(project, tmp_path):
    """A new run's index costs its own summary, not a re-read of every stored run (bench/index_bench.py);
    a summary that no longer matches its run (results re-judged, run.json rewritten) is made again."""
    config = project(fp16_atol=1e-2)
    for _ in range(2):
        assert cli("run", "-c", str(config)).returncode == 0
    first = list_runs(tmp_path / "reports")[0]
    summary = json.loads((first / "summary.json").read_text())
    assert summary["content"]["counts"]["pass"] == 2 and summary["content"]["cells"] == 2
    summary["content"]["counts"]["pass"] = 1234  # what only the summary says, with the run unchanged
    (first / "summary.json").write_text(json.dumps(summary))
    assert cli("run", "-c", str(config)).returncode == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    assert ">1234<" in index.split(f'id="run-{first.name}"')[1].split("</tr>")[0]
    (first / "run.json").write_text((first / "run.json").read_text() + "\n")  # the run changed: made again
    assert cli("run", "-c", str(config)).returncode == 0
    row = (tmp_path / "reports" / "index.html").read_text().split(f'id="run-{first.name}"')[1].split("</tr>")[0]
    assert ">1234<" not in row and ">2<" in row


def test_the_atol_a_failing_cell_needs_passes_it_and_diff_says_so(project, tmp_path, write_matrix, tiny_model):
    config = project(fp16_atol=1e-9)
    assert cli("run", "-c", str(config)).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    needed = read_run(run_dir).set_index("cell_id").loc[CELL, "atol_needed"]
    assert 1e-9 < needed < 1  # FP16 noise: far above 1e-9, far below 1
    # Re-judged at exactly the atol it needs (rtol 0 here) the cell passes; at 1% less it fails.
    assert cli("report", run_dir.name, "-c", str(project(fp16_atol=needed))).returncode == 0
    assert status(run_dir) == "pass"
    assert cli("report", run_dir.name, "-c", str(project(fp16_atol=needed * 0.99))).returncode == 0
    assert status(run_dir) == "fail"
    assert pd.read_parquet(run_dir / "results.parquet").set_index("cell_id").loc[CELL, "atol_needed"] == needed

    model, inputs = tiny_model
    two = write_matrix(PROFILES + tiny_case(model, inputs, ("fp16",)) + "[cases.tiny.tolerances.fp16]\natol = 1e-9\nrtol = 0.0\n",
                       environments=("ort-1.20", "ort-1.32"), name="two.toml")
    assert cli("run", "-c", str(two)).returncode == 0
    shown = cli("diff", "-c", str(two), "--from", "ort-1.20", "--to", "ort-1.32")
    assert f"needs atol ≥ {needed:.1e}" in shown.stdout, shown.stdout


def test_a_run_folder_that_lost_its_run_json_or_results_is_named_and_left_out_by_every_command(project, tmp_path):
    """issue 41, second sweep, finding 11: the newest run without run.json, results.parquet or both
    was passed over without a word (`report` re-judged the run before it) while `history` still
    showed it: each command names it in one warning line and none shows it."""
    config = project(fp16_atol=1e-2)
    for _ in range(2):
        assert cli("run", "-c", str(config)).returncode == 0
    older, newest = list_runs(tmp_path / "reports")
    kept = shutil.copytree(newest, tmp_path / "kept")
    for removed, said in ((["run.json"], "run.json missing"), (["results.parquet"], "results.parquet missing"),
                          (["run.json", "results.parquet"], "run.json and results.parquet missing")):
        for name in removed:
            (newest / name).unlink()
        warning = f"warning: {newest}: {said}, a damaged run?; left out"
        report = cli("report", "-c", str(config))
        assert report.returncode == 0 and report.stdout.strip() == str(older / "report.html"), report.stderr
        assert report.stderr.count(warning) == 1, report.stderr  # once, though the index reads the runs too
        history = cli("history", "-c", str(config))
        assert history.returncode == 0 and warning in history.stderr
        assert newest.name[:15] not in history.stdout.replace(older.name[:15], "") and older.name[:15] in history.stdout
        for command in (["diff"], ["export"]):
            assert warning in cli(*command, "-c", str(config)).stderr, command
        asked = cli("report", newest.name, "-c", str(config))  # asked for by name: refused, saying why
        assert asked.returncode == 2 and asked.stderr.strip() == f"error: {newest}: {said}, a damaged run?"
        shutil.rmtree(newest)
        shutil.copytree(kept, newest)
    (newest / "run.json").write_text("{not json")  # as for a run.json that is there and cannot be read
    said = f"{newest / 'run.json'}: cannot be read, a damaged run?"
    report = cli("report", "-c", str(config))
    assert report.stdout.strip() == str(older / "report.html") and report.stderr.count(f"warning: {said}") == 1
    history = cli("history", "-c", str(config))
    assert f"warning: {said}" in history.stderr and newest.name[:15] not in history.stdout.replace(older.name[:15], "")
    assert cli("report", newest.name, "-c", str(config)).stderr.startswith(f"error: {said}")


def test_history_tells_apart_two_runs_of_the_same_second(project, tmp_path):
    """issue 41, second sweep, finding 13: two runs started in the same second had the same column
    header (the id to the second): where two would be the same, each is the whole run id."""
    config = project(fp16_atol=1e-2)
    assert cli("run", "-c", str(config)).returncode == 0
    first = list_runs(tmp_path / "reports")[0]
    twin = shutil.copytree(first, first.with_name(first.name[:15] + ".999Z-beef"))
    other = shutil.copytree(first, first.with_name("20200101T000000.000Z-0000"))
    header = cli("history", "-c", str(config)).stdout.splitlines()[1]
    assert first.name in header and twin.name in header  # whole: they share their first 15 characters
    assert other.name[:15] in header and other.name not in header  # alone in its second: as short as before


def test_diff_says_which_outputs_are_missing_where_b_against_a_is_left_out(tmp_path, write_matrix, tiny_model):
    """issue 41, second sweep, finding 12: a run whose cells/ outputs were removed lost "B against A"
    from diff without a word; one warning line names the row and the files."""
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs, ("fp32",)), environments=("ort-1.20", "ort-1.32"))
    assert cli("run", "-c", str(config)).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    assert "identical" in cli("diff", "-c", str(config)).stdout  # B against A, of one onnxruntime to the next
    removed = sorted((run_dir / "cells").glob("*.npz"))
    for path in removed:
        path.unlink()
    shown = cli("diff", "-c", str(config))
    assert shown.returncode == 0 and "identical" not in shown.stdout
    [line] = [line for line in shown.stderr.splitlines() if line.startswith("warning: ")]
    assert line.startswith("warning: B against A is left out for 1 row (tiny/fp32): the outputs their judged "
                           "cells kept are missing (")
    assert all(str(path) in line for path in removed if ".repeats" not in path.name), line


def test_report_counts_as_re_judged_only_the_cells_it_could(project, tmp_path):
    """issue 41, second sweep, finding 16: with every cell's outputs damaged `report` said both
    "re-judged 2 cells: none changed" and "error: 2 cells not re-judged"."""
    config = project(fp16_atol=1e-2)
    assert cli("run", "-c", str(config)).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    outputs = [path for path in (run_dir / "cells").glob("*.npz") if ".repeats" not in path.name]
    assert len(outputs) == 2
    for damaged, left in ((1, 1), (2, 0)):
        path = outputs[damaged - 1]
        path.unlink()  # a hard link to the cache's file: replaced, not written through
        path.write_bytes(b"junk")
        done = cli("report", "-c", str(config))
        assert done.returncode == 2
        said, error = done.stderr.strip().splitlines()[-2:]
        assert said == f"re-judged {left} of 2 cells: none changed"
        assert error.startswith(f"error: {damaged} cells not re-judged (their verdicts are the run's, marked in the report): ")
