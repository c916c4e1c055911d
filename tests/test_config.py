"""Bad input gets one message naming the file and the key, and exit status 2 from the CLI."""

import subprocess
import sys

import pytest

from matrix.config import ConfigError
from matrix.plan import build_plan

GOOD_CASE = """
[profiles.fp32]
precision = "fp32"

[cases.gemm_mha_fp16]
profiles = ["fp32"]
"""


def error_for(write_matrix, body, **kw) -> ConfigError:
    path = write_matrix(body, **kw)
    with pytest.raises(ConfigError) as info:
        build_plan(path)
    assert info.value.path == path or info.value.path.suffix == ".py"
    return info.value


def test_unknown_profile_names_the_key(write_matrix):
    err = error_for(write_matrix, GOOD_CASE.replace('profiles = ["fp32"]', 'profiles = ["fp32", "fp64"]'))
    assert err.key == "cases.gemm_mha_fp16.profiles.1"
    assert "fp64" in err.message


def test_shell_metacharacters_in_environment_names_are_rejected(write_matrix):
    err = error_for(write_matrix, GOOD_CASE, environments=("ort-1.17; rm -rf /",))
    assert err.key == "run.environments.0"
    assert "not a valid name" in err.message


def test_environment_without_definition(write_matrix):
    err = error_for(write_matrix, GOOD_CASE, environments=("ort-1.17", "ort-0.1"))
    assert err.key == "run.environments.1"
    assert "ort-0.1.toml" in err.message


def test_negative_tolerance(write_matrix):
    err = error_for(write_matrix, GOOD_CASE + "\n[cases.gemm_mha_fp16.tolerances.fp32]\natol = -1\nrtol = 0\n")
    assert err.key == "cases.gemm_mha_fp16.tolerances.fp32.atol"


@pytest.mark.parametrize("value, said", [("0", "greater than 0"), ("-5", "greater than 0"),
                                         ('"60"', "valid number"), ("true", "valid number")])
def test_a_case_s_own_timeout_is_a_number_above_0(write_matrix, value, said):
    """Issue 41p: a case's own timeout_s, as strict as [run]'s."""
    err = error_for(write_matrix, GOOD_CASE + f"timeout_s = {value}\n")
    assert err.key == "cases.gemm_mha_fp16.timeout_s" and said in err.message, err


def test_unknown_key_is_reported(write_matrix):
    err = error_for(write_matrix, GOOD_CASE.replace('precision = "fp32"', 'precison = "fp32"'))
    assert err.key == "profiles.fp32.precison"


def test_case_not_found(write_matrix):
    err = error_for(write_matrix, GOOD_CASE.replace("gemm_mha_fp16", "no_such_case"))
    assert err.key == "cases.no_such_case"


def test_unknown_case_parameter(write_matrix):
    err = error_for(write_matrix, GOOD_CASE + "params = { heads = [2] }\n")
    assert err.key == "cases.gemm_mha_fp16.params"


# A case file is imported only when it declares a case the matrix uses (read from its source).
DECLARES = "\n\nfrom matrix.case import case\n\n\n@case()\ndef gemm_mha_fp16():\n    pass\n"


def test_broken_case_file_names_the_file(write_matrix, tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "broken.py").write_text("import torch\n\nraise RuntimeError('no good')\n" + DECLARES)
    err = error_for(write_matrix, GOOD_CASE, cases_dir=cases)
    assert err.path == cases / "broken.py"
    assert err.key == "line 3" and "no good" in err.message


def test_cli_prints_one_line_and_exits_2(write_matrix, tmp_path):
    path = write_matrix(GOOD_CASE.replace('precision = "fp32"', 'precision = "fp8"'))
    proc = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "--config", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert str(path) in proc.stderr and "profiles.fp32.precision" in proc.stderr
    assert not (tmp_path / "reports").exists(), "a bad config must not leave a half-written run"


@pytest.mark.parametrize("source, line, what", [
    ("import torch\n\nx = (1,\ndef f(:\n    pass\n", 4, "SyntaxError"),
    # The exception is raised inside the json library: the line is still the case file's own.
    ("import json\n\n\nSETTINGS = json.loads('{')\n" + DECLARES, 4, "JSONDecodeError"),
], ids=["syntax-error", "raises-in-a-library"])
def test_broken_case_file_names_its_own_line(write_matrix, tmp_path, source, line, what):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "broken.py").write_text(source)
    err = error_for(write_matrix, GOOD_CASE, cases_dir=cases)
    assert (err.path, err.key) == (cases / "broken.py", f"line {line}")
    assert err.message.startswith(what)
    proc = subprocess.run([sys.executable, "-m", "matrix.cli", "plan", "--config", str(tmp_path / "matrix.toml")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {cases / 'broken.py'}: line {line}: {err.message}"]
