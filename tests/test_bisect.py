"""`trtmatrix bisect` finds the releases the known-issue registry documents for the real onnxruntime
regressions of cases/ort_regressions.py, on real onnxruntime versions (venvs from images/ and
made on the fly), through the real command line."""

import json
import math
import os
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import REPO, matrix_file
from matrix.environments.gpus import gpu_missing_reason
from matrix.investigations.bisect import Bisection, BisectError, Step, between, released_versions, search
from matrix.sources.known_issues import load_registry
from matrix.store import list_runs

REGISTRY = {issue.case: issue for issue in load_registry(REPO / "cases" / "known_issues.toml")}
RELEASES = ["1.16.3", "1.17.0", "1.18.1", "1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0"]


def documented_boundary(case: str, versions: list[str]) -> str:
    """The first (oldest) of `versions` that the registry entry says is bad."""
    spec = SpecifierSet(REGISTRY[case].versions)
    return next(v for v in versions if v in spec)


@pytest.fixture(scope="module")
def project(tmp_path_factory, cache_dir):
    home = tmp_path_factory.mktemp("bisect")
    body = '[profiles.fp32]\nprecision = "fp32"\n'
    body += "".join(f'[cases.{case}]\nprofiles = ["fp32"]\n'
                    for case in ("ort_pad_avgpool_fusion", "ort_pad_maxpool_fusion", "ort_avgpool_count_include_pad_end"))
    return matrix_file(home, cache_dir, body, environments=("ort-1.32",)), home


def bisect(config, *args):
    result = subprocess.run([sys.executable, "-m", "matrix.cli", "bisect", *args, "-c", str(config), "--json"],
                            cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    return result, (json.loads(result.stdout) if result.returncode == 0 else None)


def test_the_search_runs_about_log2_n_cells_and_finds_the_boundary():
    versions = [f"1.{minor}.0" for minor in range(40)]
    for boundary in (1, 7, 20, 39):
        runs = []

        def run(version):
            runs.append(version)
            return Step(version, "fail" if versions.index(version) >= boundary else "pass", None, "env")

        found = search(Bisection("r", "onnxruntime", versions[0], versions[-1], versions, "test"), run)
        assert found.found() == {"last_good": versions[boundary - 1], "first_bad": versions[boundary]}
        assert len(runs) <= math.ceil(math.log2(len(versions))) + 2
        # The other way (A later than B): a fix, read forwards all the same.
        fixed = search(Bisection("r", "onnxruntime", versions[-1], versions[0], versions[::-1], "test"),
                       lambda v: Step(v, "pass" if versions.index(v) >= boundary else "fail", None, "env"))
        assert fixed.found() == {"last_bad": versions[boundary - 1], "first_good": versions[boundary]}
    with pytest.raises(BisectError, match="nothing to bisect"):
        search(Bisection("r", "onnxruntime", "1.0.0", "1.1.0", ["1.0.0", "1.1.0"], "test"),
               lambda v: Step(v, "pass", None, "env"))
    assert between(RELEASES, "1.21.0", "1.19.0") == ["1.21.0", "1.20.1", "1.20.0", "1.19.2", "1.19.0"]


def test_a_release_that_crashes_or_raises_is_a_bad_end_like_one_that_fails():
    """Issue 41, sweep 5 (the leftovers of an earlier sweep): bisect took only pass and fail ends
    and refused a row that starts crashing ("did not run on … (crash)"); a crash, an error or a
    timeout is "not pass" as a regression counts it, and a release between is on the side of the
    end it is like. A disputed end was not judged, which it now says, instead of "did not run"."""
    versions = [f"1.{minor}.0" for minor in range(12)]

    def verdicts(boundary: int, bad: list[str]):
        return lambda v: Step(v, "pass" if versions.index(v) < boundary else bad[versions.index(v) % len(bad)], None, "env")

    for bad in (["crash"], ["error"], ["timeout", "fail", "crash"]):
        found = search(Bisection("r", "onnxruntime", versions[0], versions[-1], versions, "test"), verdicts(5, bad))
        assert found.found() == {"last_good": "1.4.0", "first_bad": "1.5.0"}, bad
    with pytest.raises(BisectError, match="it passes at neither, nothing to bisect"):
        search(Bisection("r", "onnxruntime", versions[0], versions[-1], versions, "test"), verdicts(0, ["fail", "crash"]))
    with pytest.raises(BisectError, match=r"r was not judged on onnxruntime 1\.0\.0 \(disputed\)"):
        search(Bisection("r", "onnxruntime", versions[0], versions[-1], versions, "test"),
               lambda v: Step(v, "disputed" if v == versions[0] else "fail", None, "env", "reference disputed: …"))


def test_bisect_finds_the_documented_first_bad_release(project):
    config, home = project
    subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO, check=True,
                   capture_output=True)
    result, found = bisect(config, "ort_pad_avgpool_fusion/fp32", "--good", "1.18.1", "--bad", "1.20.1")
    assert result.returncode == 0, result.stderr
    assert found["first_bad"] == documented_boundary("ort_pad_avgpool_fusion", RELEASES) == "1.19.0"
    assert found["last_good"] == "1.18.1" and found["direction"] == "regression"
    assert {step["status"] for step in found["tested"] if step["version"] >= "1.19.0"} == {"fail"}
    # One folder per bisect asked (issue 42, build 1: every bisect of a row kept, not the last only).
    kept = list_runs(home / "reports")[-1] / "bisect" / "ort_pad_avgpool_fusion__fp32__onnxruntime-1.18.1..1.20.1"
    written = json.loads((kept / "bisect.json").read_text())
    assert written["first_bad"] == "1.19.0" and written["tested"] == found["tested"]


def test_bisect_the_other_way_finds_the_fix_with_environments_made_on_the_fly(project):
    config, _ = project
    result, found = bisect(config, "ort_pad_maxpool_fusion/fp32", "--good", "1.32.0", "--bad", "1.29.0")
    assert result.returncode == 0, result.stderr
    spec = SpecifierSet(REGISTRY["ort_pad_maxpool_fusion"].versions)
    assert found["direction"] == "fix" and "first_bad" not in found and "last_good" not in found
    assert found["last_bad"] == "1.31.1" and found["last_bad"] in spec  # read forwards: the last bad release
    assert found["first_good"] == "1.32.0" and found["first_good"] not in spec
    made = [step["environment"] for step in found["tested"] if step["environment"].startswith("onnxruntime-")]
    assert made, found["tested"]  # 1.29.0 and others have no definition in images/


def test_bisect_names_releases_not_nightly_builds_unless_asked(project):
    """onnxruntime's index holds nightlies (1.25.0.dev20260417008) between releases; pip installs
    them only with --pre, and bisect names them only with --pre."""
    config, _ = project
    result, found = bisect(config, "ort_avgpool_count_include_pad_end/fp32", "--bad", "1.22.0", "--good", "1.31.1")
    assert result.returncode == 0, result.stderr
    assert (found["direction"], found["last_bad"], found["first_good"]) == ("fix", "1.24.4", "1.25.0")
    assert all(not Version(step["version"]).is_prerelease for step in found["tested"])
    spec = SpecifierSet(REGISTRY["ort_avgpool_count_include_pad_end"].versions)
    assert found["last_bad"] in spec and found["first_good"] not in spec
    # The nightlies are there all the same: --pre searches them too (released_versions lists what
    # the index holds; the search itself is the one above, so its list is what is checked here).
    index = released_versions("onnxruntime", [], pre=True)[0]
    assert "1.25.0.dev20260417008" in index and "1.25.0.dev20260417008" not in released_versions("onnxruntime", [])[0]
    with pytest.raises(BisectError, match="a pre-release: --pre takes them in"):
        between(released_versions("onnxruntime", [])[0], "1.25.0.dev20260417008", "1.22.0")


def test_a_question_bisect_cannot_answer_is_one_line_and_status_2(project):
    config, _ = project
    same, _ = bisect(config, "ort_pad_avgpool_fusion/fp32", "--good", "1.19.0", "--bad", "1.19.2")
    last = same.stderr.strip().splitlines()[-1]  # after the progress lines: one line saying why
    assert same.returncode == 2 and last.startswith("error: ") and "nothing to bisect" in last
    unknown, _ = bisect(config, "ort_pad_avgpool_fusion/fp32", "--good", "1.18.9", "--bad", "1.19.2")
    assert unknown.returncode == 2 and "1.18.9 is not a known release" in unknown.stderr
    row, _ = bisect(config, "nope/fp32", "--good", "1.18.1", "--bad", "1.19.2")
    assert row.returncode == 2 and "is not a row of the matrix" in row.stderr
    # TensorRT's releases come from images/; on a host without a GPU its cells are skipped, and bisect says why.
    if gpu_missing_reason():
        trt, _ = bisect(config, "ort_pad_avgpool_fusion/fp32", "--engine", "tensorrt", "--good", "8.6.1.6",
                        "--bad", "10.8.0.43")
        last = trt.stderr.strip().splitlines()[-1]
        assert trt.returncode == 2 and last.startswith("error: ") and "did not run on tensorrt 8.6.1.6 (skipped)" in last
        assert gpu_missing_reason() in last


def test_a_word_that_is_no_version_is_one_line_and_status_2(project):
    """issue 41, second sweep, finding 10: `--good banana` was exit 3 (InvalidVersion, a traceback
    file); it is bad input like `--good 9.9.9`."""
    config, _ = project
    banana, _ = bisect(config, "ort_pad_avgpool_fusion/fp32", "--good", "banana", "--bad", "1.19.2")
    assert banana.returncode == 2, banana.stderr
    assert banana.stderr.strip().splitlines()[-1].startswith("error: --good banana is not a known release (not a version")
    assert "traceback" not in banana.stderr.lower()
