"""Issue 41, eighth sweep: what kills and stops leave (a profile folder outside the cache, a lock
holder's note of a dead `report`), a `cache --free` under a run that holds no lock yet, a report's
lock named as a run's, and a merge of re-judged shards that says nothing of it. Real `trtmatrix`
processes and signals, real onnxruntime venvs (the session's); each failed on main 527a463."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
from filelock import FileLock
from onnx import TensorProto as T, helper

from conftest import PROFILES, matrix_file
from matrix.store import read_run
from matrix.store.locks import is_free
from test_bad_values import TRTMATRIX
from test_nothing_silent_three import children
from test_sweep_five_texts_and_waits import save, trtmatrix


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        found += (kids := children(todo.pop()))
        todo += kids
    return found


def until(check, seconds: float = 120.0, pause: float = 0.002):
    """`check()`'s value once true (polled every `pause` s: the windows caught here are short)."""
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "never happened"
        time.sleep(pause)
    return value


def test_a_killed_fp16_cell_leaves_no_profile_outside_the_cache_and_a_starting_run_is_not_freed_under(
        tmp_path, cache_dir):
    """Issue 41, sweep 8 A13: a run killed while an FP16 cell profiled its inference (precision_ran)
    left /tmp/trtmatrix-profile-XXXX/ for good. It is in the cell's results folder now, and the cell's
    next run removes it.
    Sweep 8 A6: `cache --free all` started just after `run` freed the cache under it (the run holds
    no lock between its plan and its environments'); the run holds the cache's in-use lock from its
    first look at it, and `cache --free` is refused meanwhile."""
    rng = np.random.default_rng(0)
    turn = np.linalg.qr(rng.standard_normal((640, 640)))[0].astype(np.float32)  # keeps the values' size
    names = ["x"] + [f"h{i}" for i in range(11)] + ["y"]
    body = PROFILES + save(tmp_path, "turns", [helper.make_node("MatMul", [a, "W"], [b]) for a, b in zip(names, names[1:])],
                           [("x", T.FLOAT, [640, 640])], [("y", T.FLOAT, [640, 640])], {"W": turn},
                           {"x": rng.standard_normal((640, 640)).astype(np.float32)}) + 'profiles = ["fp16"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "COLUMNS": "250"}
    run = subprocess.Popen([TRTMATRIX, "run", "-c", str(config), "--no-reuse"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    in_use = FileLock(cache_dir / "locks" / "cache-in-use.lock")
    until(lambda: run.poll() is not None or not is_free(in_use), pause=0.01)
    assert run.poll() is None, "the run never held the cache's in-use lock"
    os.kill(run.pid, signal.SIGSTOP)
    try:
        freed = trtmatrix("cache", "--free", "all", "-c", str(config), timeout=60)
    finally:
        os.kill(run.pid, signal.SIGCONT)
    assert freed.returncode == 2 and "is in use: a run or an investigation holds " in freed.stderr \
        and "cache-in-use" in freed.stderr, freed.stdout + freed.stderr

    def profiling():
        return list(scratch.glob("trtmatrix-profile-*")) + list(cache_dir.glob("results/ort-1.32/*/profile.tmp"))

    until(lambda: run.poll() is not None or profiling())
    assert run.poll() is None, "the run ended before its FP16 cell profiled"
    for pid in [run.pid, *descendants(run.pid)]:  # everything at once, as a CI runner's kill does
        os.kill(pid, signal.SIGKILL)
    run.communicate()
    assert profiling()  # killed while it profiled...
    assert not list(scratch.glob("trtmatrix-profile-*"))  # ...and nothing of it is outside the cache
    again = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, timeout=300,
                           env=env)
    assert read_run(Path(again.stdout.strip().splitlines()[-1]))["status"].tolist() in (["pass"], ["fail"]), again.stderr
    assert not profiling() and not list(scratch.glob("trtmatrix-profile-*"))

