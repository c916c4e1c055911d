"""One cache per user (issue 44, point 1): a matrix file without `cache_dir` uses
`$XDG_CACHE_HOME/trtmatrix`, so the same model in a second folder reuses the first folder's cells,
and two runs from two folders at once share it safely. Real runs of onnxruntime 1.32 through
`trtmatrix run`, under an XDG_CACHE_HOME of the session's own (conftest's cache_dir is its
`trtmatrix` folder), never the real user's cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from uv import find_uv_bin

from conftest import PROFILES, REPO, TOLERANCES, make_tiny_model
from matrix.store import list_runs, read_run
from matrix.store.cache import CACHE_VARIABLE, result_dir
from matrix.worker.files import RESULT

REUSE_LINE = re.compile(r"\((\d+) reused from earlier runs, (\S+) run now\)")


def project(folder: Path, model: Path, inputs: Path) -> Path:
    """A user's folder: their model and a matrix file that names no cache (the README's own kind)."""
    folder.mkdir()
    shutil.copy(model, folder / "model.onnx")
    shutil.copy(inputs, folder / "inputs.npz")
    config = folder / "matrix.toml"
    config.write_text(textwrap.dedent(f"""\
        [run]
        environments = ["ort-1.32"]
        cases_dir = "{REPO / 'cases'}"
        images_dir = "{REPO / 'images'}"

        {TOLERANCES}
        {PROFILES}
        [cases.tiny]
        onnx = "model.onnx"
        inputs = "inputs.npz"
        profiles = ["fp32", "fp16"]
        """))
    return config


def user_environment(cache_dir: Path) -> dict:
    """A user's shell: no TRTMATRIX_CACHE_DIR, XDG_CACHE_HOME the session's (uv keeps its own cache
    where it was, so the venvs install from it as in the other tests)."""
    env = {key: value for key, value in os.environ.items() if key != CACHE_VARIABLE}
    uv_cache = subprocess.run([find_uv_bin(), "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    return {**env, "XDG_CACHE_HOME": str(cache_dir.parent), "UV_CACHE_DIR": env.get("UV_CACHE_DIR", uv_cache)}


def start(config: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=config.parent,
                            env={**env, "COLUMNS": "200"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished(process: subprocess.Popen) -> str:
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    return output


def reused(output: str) -> int:
    """How many cells `run`'s reuse line says came from earlier runs (0: it says none)."""
    found = REUSE_LINE.search(output)
    return int(found.group(1)) if found else 0


def test_a_second_folder_reuses_the_first_folders_cells(tmp_path, cache_dir):
    """issue 44, point 1: the same model in another folder runs nothing again; both folders' runs
    are in their own reports, neither grows a cache of its own."""
    model, inputs = make_tiny_model(tmp_path, seed=4401)
    env = user_environment(cache_dir)
    first = finished(start(project(tmp_path / "first", model, inputs), env))
    assert reused(first) == 0, first
    second = finished(start(project(tmp_path / "second", model, inputs), env))
    assert "(2 reused from earlier runs, none run now)" in second, second
    for folder in ("first", "second"):
        frame = read_run(list_runs(tmp_path / folder / "reports")[-1])
        assert list(frame["status"]) == ["pass", "pass"], frame[["cell_id", "status", "error"]]
        assert not (tmp_path / folder / ".trtmatrix-cache").exists()
        # Each cell's result is in $XDG_CACHE_HOME/trtmatrix, where the README says.
        for key in frame["content_key"]:
            assert (result_dir(cache_dir, "ort-1.32", key) / RESULT).is_file(), key
    # `trtmatrix cache` from a folder whose matrix file names no cache reads the user's (it failed
    # with a TypeError, exit 3, found by a stranger's walk through the README).
    said = subprocess.run([sys.executable, "-m", "matrix.cli", "cache", "--json"], cwd=tmp_path / "second",
                          capture_output=True, text=True, env=env)
    assert said.returncode == 0, said.stderr
    assert str(cache_dir) in said.stdout


def test_two_folders_running_at_once_share_the_cache(tmp_path, cache_dir):
    """issue 44, point 1 ("shared safely between concurrent runs"): two runs of the same new model
    from two folders at the same moment both finish with right verdicts, and each cell runs once:
    the run that waits for the environment's lock reuses what the other stored."""
    model, inputs = make_tiny_model(tmp_path, seed=4402)
    env = user_environment(cache_dir)
    runs = [start(project(tmp_path / name, model, inputs), env) for name in ("left", "right")]
    outputs = [finished(run) for run in runs]
    assert sorted(reused(output) for output in outputs) == [0, 2], outputs
    for name in ("left", "right"):
        frame = read_run(list_runs(tmp_path / name / "reports")[-1])
        assert list(frame["status"]) == ["pass", "pass"], frame[["cell_id", "status", "error"]]

