"""Nothing silent, part two: a green run means the cells ran, one bad file does not poison the
rest, and every fault ends as a clear status or one clear line. Real commands, real files, real
venvs: each test failed before its fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import PROFILES, make_tiny_model, tiny_case
from matrix.compare import compare_output
from matrix.config import ConfigError
from matrix.environments.backend import SetupFailed
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.sources import case_files
from matrix.store import RUNS, list_runs, read_run
from test_bad_values import CASE_FILE, TOY, TRTMATRIX, refused

ENV = "ort-1.32"


def trtmatrix(*args, env=None):
    return subprocess.run([TRTMATRIX, *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250", **(env or {})})


@pytest.fixture
def toy(tmp_path, write_matrix):
    """A matrix whose cases folder holds `toy` (used) and files it does not use."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "toy.py").write_text(CASE_FILE % ("[1]", "toy"))
    return cases, write_matrix(TOY, cases_dir=cases, environments=(ENV,))


# --- 1, 10: case files that exit, raise, hang or are not Python source ----------------------

@pytest.mark.parametrize("body, said", [
    ("import sys\nsys.exit(0)\n", "exits while being imported (SystemExit(0))"),
    ("exit()\n", "exits while being imported (SystemExit(None))"),
    ("import argparse\nargparse.ArgumentParser().parse_args(['--nightly'])\n",
     "(SystemExit(2)); it printed: trtmatrix: error: unrecognized arguments: --nightly"),
    ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
])
def test_a_case_file_that_exits_or_interrupts_at_import_is_one_line_exit_2(toy, body, said):
    cases, config = toy
    (cases / "toy.py").write_text(CASE_FILE % ("[1]", "toy") + body)
    for command in ("plan", "run"):
        line = refused(command, "-c", str(config))
        assert line.startswith(f"error: {cases / 'toy.py'}: line ") and said in line
    assert not (config.parent / "reports" / RUNS).exists()


def test_a_case_file_that_hangs_at_import_is_named_at_its_deadline(toy, monkeypatch):
    cases, config = toy
    (cases / "toy.py").write_text("import time\ntime.sleep(3600)\n" + CASE_FILE % ("[1]", "toy"))
    monkeypatch.setattr(case_files, "IMPORT_TIMEOUT_S", 1)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="still importing after 1 s"):
        build_plan(config)
    assert time.monotonic() - start < 30


def test_only_the_case_files_a_matrix_uses_are_loaded_and_encodings_are_python_s(toy):
    cases, config = toy
    (cases / "broken.py").write_bytes("# coding: utf-16\n".encode() + "x = (".encode("utf-16"))
    (cases / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (cases / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + (CASE_FILE % ("[1]", "latin")).encode())
    assert trtmatrix("plan", "-c", str(config)).returncode == 0  # toy's plan never imports them
    bom = cases / "toy.py"
    bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())  # a BOM, as Python itself reads it
    assert trtmatrix("plan", "-c", str(config)).returncode == 0
    bom.write_bytes((CASE_FILE % ("[1]", "toy")).encode("utf-16"))  # not UTF-8, no cookie: unreadable
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {cases}: ['toy'] declared by no readable case file; not readable: ")
    assert "broken.py (" in line and "toy.py (not Python source: source code string cannot contain null bytes)" in line
    (cases / "broken.py").unlink()
    assert refused("plan", "-c", str(config)).startswith(f"error: {bom}: not a readable case file (not Python source")


def test_toml_files_are_utf8_a_bom_is_taken_and_latin1_is_named(toy):
    _, config = toy
    text = config.read_bytes()
    config.write_bytes(b"\xef\xbb\xbf" + text)
    assert trtmatrix("plan", "-c", str(config)).returncode == 0
    config.write_bytes(b"# caf\xe9\n" + text)
    assert refused("plan", "-c", str(config)) == f"error: {config}: not UTF-8 text (byte 0xe9 at offset 5); TOML files are UTF-8"
    # issue 41, third sweep, 20: a registry that is a pipe was not applied, without a word
    config.write_bytes(text)
    cases, _ = toy
    os.mkfifo(cases / "known_issues.toml")
    assert refused("plan", "-c", str(config)) == \
        f"error: {cases / 'known_issues.toml'}: not a regular file (a pipe, a device or a socket)"


# --- 2: a damaged stored run --------------------------------------------------------------------

def test_a_damaged_run_is_named_and_left_out_and_never_poisons_later_commands(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV, "ort-1.17"))
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    damaged = list_runs(tmp_path / "reports")[-1]
    parquet = damaged / "results.parquet"
    parquet.write_bytes(parquet.read_bytes()[:100])  # truncated
    again = trtmatrix("run", "-c", str(config))
    assert again.returncode == 0, again.stderr
    assert f"warning: {parquet}: cannot be read, a damaged run?" in again.stderr
    for command in (["history"], ["report"], ["diff"], ["export", "--format", "csv"]):
        done = trtmatrix(*command, "-c", str(config))
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr)
    for command in (["report", damaged.name], ["export", damaged.name, "--format", "csv"], ["diff", damaged.name]):
        line = refused(*command, "-c", str(config))
        assert line.startswith(f"error: {parquet}: cannot be read, a damaged run?"), command
    newest = list_runs(tmp_path / "reports")[-1]
    (newest / "run.json").write_text("{not json")
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0 and f"warning: {newest / 'run.json'}: cannot be read" in done.stderr


# --- 3, 12, 13: refused at plan time --------------------------------------------------------------

def test_settings_that_would_be_ignored_or_doubled_are_refused(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    case = tiny_case(model, inputs)
    onnx_case = write_matrix(PROFILES + case + "params = { batch = [1, 4] }\n", environments=(ENV,))
    assert "cases.tiny: an ONNX-file case has no params" in refused("plan", "-c", str(onnx_case))
    options = write_matrix(PROFILES + case + "options = { depth = 2 }\n", environments=(ENV,))
    assert "cases.tiny: an ONNX-file case has no options" in refused("plan", "-c", str(options))
    twice = write_matrix(PROFILES + case, environments=(ENV, "ort-1.17", ENV))
    assert "run.environments: 'ort-1.32' is listed twice (item 2)" in refused("plan", "-c", str(twice))
    profile = write_matrix(PROFILES + case.replace('["fp32"]', '["fp32", "fp16", "fp32"]'), environments=(ENV,))
    assert "cases.tiny.profiles: 'fp32' is listed twice (item 2)" in refused("plan", "-c", str(profile))
    inf = write_matrix(PROFILES + case + "[cases.tiny.tolerances.fp32]\natol = inf\nrtol = 0.0\n", environments=(ENV,))
    assert "cases.tiny.tolerances.fp32.atol: Input should be a finite number" in refused("plan", "-c", str(inf))
    np.savez(inputs, x=np.load(inputs)["x"], typo=np.zeros(3, np.float32))  # an array no input reads
    extra = write_matrix(PROFILES + case, environments=(ENV,))
    assert refused("plan", "-c", str(extra)) == f"error: {inputs}: typo: not a graph input of the model (its inputs: ['x'])"


def test_a_known_issue_that_could_match_nothing_is_refused(toy):
    cases, config = toy
    issue = '[[issue]]\nid = "x"\ntitle = "t"\ncase = "toy"\nprofiles = ["fp16"]\nengine = "onnxruntime"\n' \
            'source = "this test"\n'
    (cases / "known_issues.toml").write_text(issue + 'versions = ""\n')
    assert "issue.0.versions: empty: give the versions the issue affects" in refused("plan", "-c", str(config))
    (cases / "known_issues.toml").write_text(issue + 'versions = ">=1.17"\nparams = { seq = 8 }\n')
    assert "issue.0.params.seq: case 'toy' has no parameter 'seq' (it has ['batch'])" in refused("plan", "-c", str(config))


def test_shards_are_bounded_and_an_empty_one_writes_nothing(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    start = time.monotonic()
    assert "1 <= I <= N <= 1000" in refused("plan", "-c", str(config), "--shard", f"1/{10 ** 9}")
    assert time.monotonic() - start < 30
    empty = trtmatrix("run", "-c", str(config), "--shard", "2/2")
    assert empty.returncode == 0 and "shard 2/2 of this plan has no cells (1 cells in all)" in empty.stderr
    assert list_runs(tmp_path / "reports") == []
    one = trtmatrix("run", "-c", str(config), "--shard", "1/2")
    assert one.returncode == 0, one.stderr
    merged = trtmatrix("merge", list_runs(tmp_path / "reports")[-1].name, "-c", str(config))
    assert merged.returncode == 0, merged.stderr  # shard 2/2 was empty: nothing missing


# --- 4, 11: every output path checked before anything runs; paths that are not what they must be

def test_output_paths_are_checked_before_anything_runs(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    reports = tmp_path / "reports"
    folder = tmp_path / "junit"
    folder.mkdir()
    assert refused("run", "-c", str(config), "--junit-xml", str(folder)) == \
        f"error: --junit-xml {folder}: {folder} is a folder, not a file"
    assert refused("run", "-c", str(config), "--junit-xml", str(tmp_path / "no" / "j.xml")).endswith(
        f"no folder {tmp_path / 'no'}")
    (reports / "index.html").mkdir(parents=True)
    assert refused("run", "-c", str(config)).endswith(f"{reports / 'index.html'} is a folder, not a file")
    assert list_runs(reports) == []  # nothing ran
    (reports / "index.html").rmdir()
    start = time.monotonic()
    line = refused("explain", "tiny/fp32/ort-1.32", "NOSUCHRUN", "-c", str(config))
    assert "match 'NOSUCHRUN'" in line and time.monotonic() - start < 60


def test_files_and_folders_where_the_other_was_expected_are_bad_input(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / RUNS).write_text("a file")
    assert refused("run", "-c", str(config)).endswith(f"{tmp_path / 'reports' / RUNS} is a file, not a folder")
    (tmp_path / "reports" / RUNS).unlink()
    locks = config.read_text().split('cache_dir = "')[1].split('"')[0] + "/locks"
    shutil.rmtree(locks, ignore_errors=True)
    with open(locks, "w") as fh:
        fh.write("a file")
    try:
        assert refused("run", "-c", str(config)) == f"error: {locks}: File exists"
    finally:
        os.unlink(locks)


# --- 5: a terminal width that shows nothing -------------------------------------------------------

def test_a_nonsense_terminal_width_still_lists_everything(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs, ("fp32", "fp16")), environments=(ENV, "ort-1.17"))
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    for width in ("0", "3"):
        done = trtmatrix("diff", "-c", str(config), env={"COLUMNS": width})
        assert done.returncode == 0 and "tiny/fp16" in done.stdout and "tiny/fp32" in done.stdout, (width, done.stdout)
    # issue 41, sweep 3 part 1 #28i: the matrix marks an FP16 cell none of whose nodes computed in FP16
    # (⇡); diff showed it as a plain pass
    [line] = [line for line in done.stdout.splitlines() if line.startswith("  tiny/fp16: ")]
    assert line.startswith("  tiny/fp16: pass ⇡ → pass ⇡  "), line


# --- 6, 7: verdicts --------------------------------------------------------------------------------

def test_integer_outputs_are_compared_exactly_as_integers():
    big = compare_output("idx", np.array([2 ** 62 + 1, 2 ** 62]), np.array([2 ** 62, 2 ** 62]), 1e-4, 1e-3)
    assert big.mismatch_frac == 0.5 and big.max_abs == 1.0  # through float64 both are 2**62: "0e+00"
    assert compare_output("idx", np.array([3, 4], np.int32), np.array([3, 4]), 1e-4, 1e-3).mismatch_frac == 0


def test_a_reference_that_is_nan_everywhere_is_no_pass():
    from matrix.compare import compare_runs

    with pytest.raises(ValueError, match="NaN everywhere: nothing to judge against"):
        compare_runs([{"y": np.full(4, np.nan, np.float32)}], {"y": np.full(4, np.nan)}, 1e-4, 1e-3)


# --- 8: the cache hands back what it stored -------------------------------------------------------

def test_a_damaged_cached_reference_is_made_again_not_judged_against(tmp_path, write_matrix, cache_dir):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    first = read_run(MatrixRun(build_plan(config)).execute()).iloc[0]
    reference = cache_dir / "artifacts" / first["artifact"] / "reference.npz"
    good = reference.read_bytes()
    np.savez(reference, y=np.zeros((4, 8)))  # a valid file with the wrong numbers
    second = read_run(MatrixRun(build_plan(config)).execute()).iloc[0]
    assert second["status"] == "pass" and second["max_abs"] == first["max_abs"]
    assert reference.read_bytes() == good


# --- 9: a timeout is a timeout ----------------------------------------------------------------------

def test_a_millisecond_timeout_is_a_timeout_never_a_pass(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs, ("fp32", "fp16")), environments=(ENV,), timeout_s=0.001)
    cells = read_run(MatrixRun(build_plan(config), reuse=False).execute())
    assert set(cells["status"]) == {"timeout"}
    assert cells["error"].str.startswith("not finished within 0.001s; killed").all()


# --- 14, 15, 16: what runs leave behind, venvs that went away, installs that fail -----------------

def test_a_run_killed_outright_leaves_no_lock_the_next_run_keeps(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    runs = tmp_path / "reports" / RUNS
    runs.mkdir(parents=True)
    stale = runs / ".20260101T000000.000Z-dead.lock"  # what a SIGQUIT or an exit 3 left, no partial folder
    stale.write_text("")
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    assert not stale.exists() and not list(runs.glob(".*.lock"))


def test_a_deleted_venv_interpreter_rebuilds_the_environment(tmp_path, write_matrix, cache_dir):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=("ort-1.17",))
    MatrixRun(build_plan(config)).execute()
    for python in (cache_dir / "venvs").glob("ort-1.17-*/bin/python"):
        python.unlink()
    again = read_run(MatrixRun(build_plan(config), reuse=False).execute())
    assert list(again["status"]) == ["pass"]


def test_an_install_that_keeps_failing_is_an_error_not_a_skip(monkeypatch, cache_dir, tmp_path):
    from matrix.environments import venv
    from matrix.environments.definitions import load_envdef
    from conftest import REPO

    monkeypatch.setattr(venv, "RETRY_S", 0)
    backend = venv.VenvBackend(load_envdef(REPO / "images" / f"{ENV}.toml"), cache_dir, tmp_path)
    with pytest.raises(SetupFailed, match=r"uv pip sync failed 3 times for ort-1.32"):
        backend._uv("pip", "sync", "--python", str(tmp_path / "no-python"), str(tmp_path / "no.lock"))


# --- 17: bisect lists releases without pip's experimental --json ---------------------------------

def test_bisect_lists_releases_from_the_index_simple_api():
    from matrix.investigations.bisect import index_versions

    versions = index_versions("onnxruntime")
    assert {"1.17.3", "1.20.1", "1.32.0"} <= set(versions) and versions == sorted(versions, key=lambda v: tuple(
        int(p) for p in v.split(".")[:3]))
    assert sys.version_info[:2] != (3, 11) or "1.15.0" in versions  # cp311 wheels since 1.15


def test_a_declared_version_the_environment_does_not_install_is_said(tmp_path, write_matrix):
    from conftest import REPO

    images = tmp_path / "images"
    images.mkdir()
    (images / f"{ENV}.toml").write_text((REPO / "images" / f"{ENV}.toml").read_text()
                                        .replace('version = "1.32.0"', 'version = "1.32.1"'))
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,), images_dir=images)
    done = trtmatrix("run", "-c", str(config))
    said = "ort-1.32 declares version 1.32.1, its cells report onnxruntime 1.32.0"
    assert done.returncode == 0 and f"warning: {said}" in done.stderr
    assert said in (list_runs(tmp_path / "reports")[-1] / "report.html").read_text()


def test_a_supervisor_ends_without_a_fatal_error_in_its_log(tmp_path, write_matrix):
    """Its stdin watcher thread blocked in a read made every shutdown abort ("Fatal Python error:
    _enter_buffered_busy ... <stdin>"), at the end of every environment's log."""
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    run_dir = MatrixRun(build_plan(config), reuse=False).execute()
    log = (run_dir / "envs" / f"{ENV}.log").read_text()
    assert "Fatal Python error" not in log and "_enter_buffered_busy" not in log
