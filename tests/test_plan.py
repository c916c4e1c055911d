"""`trtmatrix plan` is a dry run: it says what a run would do and changes nothing on disk."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import PROFILES, REPO, matrix_file, tiny_case


def cli(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


def snapshot(folder: Path) -> dict:
    """Every path under the folder, with each file's bytes and modification time."""
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def test_plan_leaves_the_cache_byte_for_byte_unchanged(tmp_path, tiny_model):
    model, inputs = tiny_model
    cache = tmp_path / "cache"
    config = matrix_file(tmp_path, cache, PROFILES + tiny_case(model, inputs, ("fp32", "fp16")),
                         environments=("ort-1.32", "ort-1.32-docker"))

    before = cli("plan", "-c", str(config))
    assert before.returncode == 0, before.stderr
    assert not cache.exists()  # no worker staged, no folder made
    assert [line.split("\t")[2] for line in before.stdout.splitlines()][:2] == ["new", "new"]
    assert "docker environments (ort-1.32-docker): result keys include the image id" in before.stderr

    assert cli("run", "-c", str(config), "--env", "ort-1.32").returncode == 0
    assert (cache / "CACHEDIR.TAG").is_file()  # the run tags the cache it made (cache --free frees only such)
    files = snapshot(cache)
    after = cli("plan", "-c", str(config))
    assert after.returncode == 0, after.stderr
    assert snapshot(cache) == files
    states = dict(line.split("\t")[::2] for line in after.stdout.splitlines())
    assert states["tiny/fp32/ort-1.32"] == states["tiny/fp16/ort-1.32"] == "stored"
    assert states["tiny/fp32/ort-1.32-docker"] in ("new", "unknown")  # never run in its container
