"""Nothing accepted without a word: a value of the wrong type, a version or a requirement that is
not one, a parameter value that would break cell ids, a known issue that can match nothing, an
impossible `--last`. Each is refused by the real command line: exit status 2 and one line on
stderr naming the file and the key."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROFILES, REPO, make_tiny_model, tiny_case
from matrix.environments.definitions import available_envdefs
from matrix.plan import build_plan
from matrix.store import RUNS, to_frame, write_tables
from matrix.store.records import empty_record

TRTMATRIX = str(Path(sys.executable).with_name("trtmatrix"))

# A case file that imports no torch: planning reads only its name and parameters.
CASE_FILE = '''
from matrix.case import case


@case(params={"batch": %s})
def %s(batch: int):
    """Never called while planning."""
    raise AssertionError("not built in these tests")
'''

TOY = PROFILES + '[cases.toy]\nprofiles = ["fp32", "fp16"]\n'

ISSUE = """
[[issue]]
id = "{id}"
title = "t"
case = "{case}"
profiles = ["fp16"]
engine = "onnxruntime"
versions = ">=1.17"
source = "this test"
"""


def refused(*args) -> str:
    """The one line `trtmatrix` prints on stderr for bad input, after checking it exits 2."""
    proc = subprocess.run([TRTMATRIX, *args], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def project(tmp_path, write_matrix):
    """A matrix on a cases folder of its own (case `toy`, and `other` that this matrix does not run)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "toy.py").write_text(CASE_FILE % ("[1, 4]", "toy"))
    (cases / "other.py").write_text(CASE_FILE % ("[1]", "other"))

    def write(body: str = TOY, run: str = "", registry: str | None = None, **settings) -> Path:
        if registry is not None:
            (cases / "known_issues.toml").write_text(registry)
        path = write_matrix(body, cases_dir=cases, environments=settings.pop("environments", ("ort-1.32",)),
                            **settings)
        path.write_text(path.read_text().replace("[run]\n", f"[run]\n{run}\n", 1))
        return path

    return write


# --- 1. values of the wrong type ---------------------------------------------------------------

@pytest.mark.parametrize("settings, body, key", [
    ({}, TOY, None),  # a control: the same file, written right, is accepted
    ({"timeout_s": "true"}, TOY, "run.timeout_s"),  # was accepted as a 1-second timeout
    ({"timeout_s": '"900"'}, TOY, "run.timeout_s"),
    ({"run": 'jobs = "2"'}, TOY, "run.jobs"),
    ({"run": "jobs = 2.0"}, TOY, "run.jobs"),
    ({"run": "jobs = true"}, TOY, "run.jobs"),
    ({}, TOY.replace('precision = "fp32"', 'precision = "fp32"\nbuilds = true'), "profiles.fp32.builds"),
    ({}, TOY + '[cases.toy.tolerances.fp16]\natol = "1e-3"\nrtol = 0.0\n', "cases.toy.tolerances.fp16.atol"),
    ({}, TOY + "[cases.toy.tolerances.fp16]\natol = true\nrtol = 0.0\n", "cases.toy.tolerances.fp16.atol"),
], ids=["control", "timeout-bool", "timeout-text", "jobs-text", "jobs-float", "jobs-bool", "builds-bool",
        "atol-text", "atol-bool"])
def test_values_of_the_wrong_type_are_refused(project, settings, body, key):
    config = project(body, **settings)
    if key is None:
        build_plan(config)
        return
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {config}: {key}: "), line


def test_whole_numbers_are_still_numbers(project):
    """TOML writes 900 and 1 as integers: where a float is wanted they are accepted as floats."""
    config = project(TOY + "[cases.toy.tolerances.fp16]\natol = 1\nrtol = 0\n", timeout_s=900)
    plan = build_plan(config)
    assert plan.config.run.timeout_s == 900.0
    tolerance = plan.config.tolerance("toy", "fp16")
    assert (tolerance.atol, tolerance.rtol) == (1.0, 0.0) and isinstance(tolerance.atol, float)


# --- 2 and 3. environment definitions ----------------------------------------------------------

GOOD_ENV = 'engine = "onnxruntime"\nversion = "1.32.0"\nbackend = "venv"\nrequirements = ["onnxruntime==1.32.0"]\n'


@pytest.mark.parametrize("change, key, said", [
    (("", ""), None, None),
    (('version = "1.32.0"', 'version = "banana"'), "version", "'banana' is not a PEP 440 version"),
    (('requirements = ["', 'requirements = ["--index-url=http://127.0.0.1:9/simple", "'), "requirements.0",
     "'--index-url=http://127.0.0.1:9/simple' is not a requirement"),
    (('requirements = ["', 'requirements = ["-r other.txt", "'), "requirements.0", "is not a requirement"),
    (('"onnxruntime==1.32.0"', '"onnxruntime==1.32.0 --hash=sha256:00"'), "requirements.0", "is not a requirement"),
    (('"onnxruntime==1.32.0"', '"onnxruntime=1.32.0"'), "requirements.0", "is not a requirement"),
    (("", 'python = "--index-url=http://127.0.0.1:9/simple"\n'), "python", None),
    (("", 'gpu = "false"\n'), "gpu", "Input should be False, True or 'optional'"),
], ids=["control", "version-banana", "requirement-index-url", "requirement-file", "requirement-hash-option",
        "requirement-typo", "python-option", "gpu-text"])
def test_environment_definitions_take_versions_and_requirements_only(project, tmp_path, change, key, said):
    images = tmp_path / "images"
    images.mkdir()
    (images / "x.toml").write_text(GOOD_ENV.replace(*change) if change[0] else GOOD_ENV + change[1])
    config = project(environments=("x",), images_dir=images)
    if key is None:
        assert build_plan(config).envs["x"].requirements == ("onnxruntime==1.32.0",)
        return
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {images / 'x.toml'}: {key}: "), line
    assert said is None or said in line, line


def test_every_definition_of_the_repository_is_valid():
    envs = available_envdefs(REPO / "images")
    assert {e.version for e in envs} >= {"9.3.0.post12.dev1", "10.0.0b6", "8.6.1.6", "1.17.3"}


# --- 4. parameter values: they are written into cell ids ---------------------------------------

BAD_VALUES = {
    "brackets": ('["[/]"]', "batch.0"),
    "markup": ('["[link=x]"]', "batch.0"),
    "ansi": ('["\\u001b[31m"]', "batch.0"),
    "long": (f'["{"a" * 200}"]', "batch.0"),
    "slash": ('["a/b"]', "batch.0"),
    "hash": ('["a#b"]', "batch.0"),
    "quote": ("[\"a'b\"]", "batch.0"),
    "space": ('["a b"]', "batch.0"),
    "empty": ('[""]', "batch.0"),
    "one-and-one-point-zero": ("[1, 1.0]", "batch.1"),
    "true-and-True": ('[true, "True"]', "batch.1"),
    "true-and-1": ("[1, true]", "batch.1"),
}


@pytest.mark.parametrize("values, key", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_parameter_values_that_would_break_cell_ids_are_refused(project, values, key):
    config = project(TOY + f"params = {{ batch = {values} }}\n")
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {config}: cases.toy.params.{key}: "), line
    assert "\x1b" not in line and len(line) < 300


@pytest.mark.parametrize("values, key", [BAD_VALUES["slash"], BAD_VALUES["one-and-one-point-zero"]],
                         ids=["slash", "one-and-one-point-zero"])
def test_a_case_files_own_parameter_values_are_checked_too(project, tmp_path, values, key):
    (tmp_path / "cases" / "toy.py").write_text(CASE_FILE % (values, "toy"))
    config = project()
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {tmp_path / 'cases' / 'toy.py'}: toy.params.{key}: "), line


def test_a_case_files_own_parameter_names_are_checked_too(project, tmp_path):
    (tmp_path / "cases" / "toy.py").write_text(CASE_FILE.replace('"batch"', '"a b"') % ("[1]", "toy"))
    line = refused("plan", "-c", str(project()))
    assert line == f"error: {tmp_path / 'cases' / 'toy.py'}: toy.params: 'a b' is not a valid name", line
    # issue 41, sweep 7 N5: `[cases."ümlaut"]` was "cases.ümlaut.[key]: … (letters, …)": ü is a letter, not an ASCII one
    line = refused("plan", "-c", str(project(TOY + '[cases."ümlaut"]\nprofiles = ["fp32"]\n')))
    assert line.endswith(": cases.ümlaut: 'ümlaut' is not a valid name (ASCII letters, digits, _ . + -; starts with a "
                         "letter or digit)"), line


def test_tame_parameter_values_make_distinct_rows(project):
    values = '[4, -1, 0.5, 1e-5, "fp16", "x-1.5e+3", true, false]'
    plan = build_plan(project(TOY.replace('["fp32", "fp16"]', '["fp32"]') + f"params = {{ batch = {values} }}\n"))
    assert plan.rows == [f"toy/batch={v}/fp32" for v in ("4", "-1", "0.5", "1e-05", "fp16", "x-1.5e+3", "True", "False")]


# --- 5. the known-issue registry is checked against the cases ----------------------------------

@pytest.mark.parametrize("registry, key, said", [
    (ISSUE.format(id="a", case="toyy"), "issue.0.case", "unknown case 'toyy'"),
    (ISSUE.format(id="a", case="toy") + ISSUE.format(id="a", case="other"), "issue.1.id", "duplicate id 'a'"),
    (ISSUE.format(id="a", case="toy") + 'params = { batch = "a/b" }\n', "issue.0.params", "'a/b'"),
    (ISSUE.format(id="a", case="toy").replace('["fp16"]', "[]"), "issue.0.profiles", "at least 1"),
], ids=["unknown-case", "duplicate-id", "param-value", "no-profiles"])
def test_a_known_issue_that_can_match_nothing_is_refused(project, tmp_path, registry, key, said):
    config = project(registry=registry)
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {tmp_path / 'cases' / 'known_issues.toml'}: {key}: "), line
    assert said in line, line


def test_a_known_issue_may_name_any_case_beside_it_or_an_onnx_case_of_the_matrix(project, tmp_path):
    """The registry serves every matrix file on these case files: `other` is not in this matrix,
    `tiny` is this matrix's own ONNX-file case."""
    model, inputs = make_tiny_model(tmp_path)
    registry = ISSUE.format(id="a", case="toy") + ISSUE.format(id="b", case="other") + ISSUE.format(id="c", case="tiny")
    plan = build_plan(project(TOY + tiny_case(model, inputs), registry=registry))
    assert [issue.id for issue in plan.known_issues] == ["a", "b", "c"]


def test_the_repositorys_registry_passes_with_the_default_matrix():
    assert len(build_plan(REPO / "matrix.toml").known_issues) >= 6


# --- 6. history --last ---------------------------------------------------------------------------

@pytest.mark.parametrize("last", ["0", "-1"])
def test_history_needs_at_least_one_run(tmp_path, last):
    for run_id in ("20250101T000000.000Z-aaaa", "20250102T000000.000Z-bbbb"):
        (tmp_path / "reports" / RUNS / run_id).mkdir(parents=True)
        write_tables(tmp_path / "reports" / RUNS / run_id,
                     to_frame([empty_record(run_id=run_id, cell_id="toy/fp32/x", status="pass")]))
    proc = subprocess.run([TRTMATRIX, "history", "--last", last], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert "--last" in proc.stderr and "Traceback" not in proc.stderr
