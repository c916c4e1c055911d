"""Issue 41, eighth sweep A9 (stored files trusted, lock wording): another run's results.parquet
copied into a run folder was adopted as that run's; a cached artifact's reference.npz swapped with
another's was prepared again without a word; an `explain` holding a lock was named "run pid …" to
whoever waited for it. One real run of two Relu cases on the session's onnxruntime venv, its
folders and cache entries then damaged by hand; each test failed on 2ae5ff5."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T, helper

from conftest import PROFILES, matrix_file
from test_bad_values import TRTMATRIX
from test_sweep_eight_stops_and_merges import noted, until
from test_sweep_five_texts_and_waits import save, trtmatrix

CASES = {"a9_first": [0.75, -1.5, 2.25], "a9_second": [-0.5, 3.5, 1.125]}  # equal shapes, other values


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    """(matrix file, run X of both cases, run Y of the first alone: its cells reused)."""
    folder = tmp_path_factory.mktemp("stored")
    body = PROFILES + "".join(
        save(folder, name, [helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])], {},
             {"x": np.array(x, np.float32)}) + 'profiles = ["fp32"]\n' for name, x in CASES.items())
    config = matrix_file(folder, cache_dir, body, environments=("ort-1.32",))
    made = []
    for only in ([], ["--case", "a9_first"]):
        done = trtmatrix("run", "-c", str(config), *only)
        assert done.returncode == 0, done.stderr
        made.append(Path(done.stdout.strip().splitlines()[-1]))
    return config, *made


def test_a_swapped_reference_of_a_cached_artifact_is_named_as_it_is_prepared_again(runs, cache_dir):
    """Issue 41, sweep 8 A9: reference.npz swapped between two cached artifacts of equal shapes was
    prepared again silently, while a changed cached outputs.npz is named in a warning line."""
    config, _, _ = runs
    [first], [second] = ([p for p in (cache_dir / "artifacts").glob(f"{name}-*") if p.suffix != ".tmp"] for name in CASES)
    aside = first / "reference.npz.aside"
    os.replace(first / "reference.npz", aside)
    os.replace(second / "reference.npz", first / "reference.npz")
    os.replace(aside, second / "reference.npz")
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: artifact")]
    assert warned == [f"warning: artifact {folder}: reference.npz is not the file prepared (its digest differs); "
                      "prepared again" for folder in (first, second)], done.stderr
    for folder, x in zip((first, second), CASES.values()):  # made again from the case, not the swapped file
        assert np.load(folder / "reference.npz")["y"].tolist() == np.maximum(np.array(x, np.float32), 0).tolist()


def test_an_explain_holding_its_lock_is_named_as_an_explain(runs, cache_dir):
    """Issue 41, sweep 8 A9 (lock wording): `report` was fixed to name itself in its lock's note; an
    `explain` (and repro, bisect, precision: the same parameter) still said "run pid N which is …" to
    the command waiting for it. A second explain of the cell waits for the first, stopped."""
    config, _, _ = runs
    cell = "a9_first/fp32/ort-1.32"
    notes = lambda: [n for n in (cache_dir / "locks").glob("explain-*.holder.json") if noted(n) and cell in n.read_text()]
    first = subprocess.Popen([TRTMATRIX, "explain", cell, "-c", str(config)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    said = config.parent / "second.txt"
    second = None
    try:
        until(lambda: first.poll() is not None or notes(), pause=0.001)
        os.kill(first.pid, signal.SIGSTOP)
        assert json.loads(notes()[0].read_text())["command"] == "explain"
        with said.open("w") as out:
            second = subprocess.Popen([TRTMATRIX, "explain", cell, "-c", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                      env={**os.environ, "COLUMNS": "250"})
            waiting = until(lambda: [line for line in said.read_text().splitlines() if "waiting for" in line], 60, 0.05)
    finally:
        for process in (second, first):
            if process is not None:
                process.kill()
                process.wait()
    # its own lock, or the environment's it holds while its observed copy runs: named an explain either way
    assert f"explain pid {first.pid} which is " in waiting[0] and "run pid" not in said.read_text(), said.read_text()


def test_another_runs_table_in_a_run_folder_is_refused_naming_both_runs(runs):
    """Issue 41, sweep 8 A9: `cp X/results.parquet Y/results.parquet` (X of 2 cells, Y of 1), then
    `report Y`: "re-judged 1 of 2 cells", errors of X's cells missing from Y, and Y's page showing
    X's cells as run Y. The table's run_id is checked against run.json's, refused as a damaged table
    is; a copied run folder (its own table and run.json) is still read."""
    config, x, y = runs
    own = y / "results.parquet.own"
    shutil.copy2(y / "results.parquet", own)
    shutil.copy2(x / "results.parquet", y / "results.parquet")
    try:
        for command in ("report", "summary"):
            done = trtmatrix(command, y.name, "-c", str(config))
            assert done.returncode == 2 and done.stderr == (
                f"error: {y / 'results.parquet'}: holds the rows of run {x.name}, not of run {y.name} (its run.json): "
                "not this run's table\n"), done.stderr
    finally:
        os.replace(own, y / "results.parquet")
    kept = x.with_name("keep-good")
    shutil.copytree(x, kept, symlinks=True)
    assert trtmatrix("summary", "keep-good", "-c", str(config)).returncode == 0
