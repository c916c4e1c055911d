"""Issue 41, eighth sweep: what kills and stops leave (a profile folder outside the cache, a lock
holder's note of a dead `report`), a `cache --free` under a run that holds no lock yet, a report's
lock named as a run's, and a merge of re-judged shards that says nothing of it. Real `trtmatrix`
processes and signals, real onnxruntime venvs (the session's); each failed on main 527a463."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock
from onnx import TensorProto as T, helper

from conftest import PROFILES, REPO, matrix_file
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


def noted(note: Path) -> bool:
    """Whether a lock's holder note is there and whole (it is written in place)."""
    try:
        return "doing" in json.loads(note.read_text())
    except (OSError, ValueError):
        return False


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
    first look at it, and `cache --free` is refused meanwhile.
    Sweep 8 A1, in the cache: the note a killed holder left beside a lock nobody takes again stayed;
    a run removes such notes at its start."""
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
    # Sweep 8 A1 (in the cache): an explain killed while it held its lock left its holder's note for
    # good, since no later command takes that lock again; the next run removes it.
    explain = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; from matrix.store.locks "
                                "import held_for\nwith held_for(Path(sys.argv[1]), 'explain-0123', 'explaining x', "
                                "print):\n    print('held', flush=True); sys.stdin.read()", str(cache_dir)],
                               cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert explain.stdout.readline() == "held\n"
    explain.kill()
    explain.wait()
    assert (cache_dir / "locks" / "explain-0123.holder.json").exists()
    again = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, timeout=300,
                           env=env)
    assert read_run(Path(again.stdout.strip().splitlines()[-1]))["status"].tolist() in (["pass"], ["fail"]), again.stderr
    assert not profiling() and not list(scratch.glob("trtmatrix-profile-*"))
    assert not list(cache_dir.glob("locks/*.holder.json"))



@pytest.fixture(scope="module")
def shards(tmp_path_factory, cache_dir):
    """Two shards (one cell each) of a matrix whose cases fail against their expected files (0.3 off,
    atol 0.1), and a tolerance file under which they pass (atol 1)."""
    folder = tmp_path_factory.mktemp("shards")
    body = PROFILES
    for name in ("near_a", "near_b"):
        x = np.array([1.0, 2.0, 3.0], np.float32)
        body += save(folder, name, [helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])],
                     [("y", T.FLOAT, [3])], {}, {"x": x})
        np.savez(folder / f"{name}_expected.npz", y=x + 0.3)
        body += (f'profiles = ["fp32"]\nexpected = "{folder / f"{name}_expected.npz"}"\n'
                 f'[cases.{name}.tolerances.fp32]\natol = 0.1\nrtol = 0.0\n')
    config = matrix_file(folder, cache_dir, body, environments=("ort-1.32",))
    loose = folder / "loose.toml"
    loose.write_text("".join(f"[cases.{n}.tolerances.fp32]\natol = 1.0\nrtol = 0.0\n" for n in ("near_a", "near_b")))
    runs = []
    for shard in ("1/2", "2/2"):
        done = trtmatrix("run", "-c", str(config), "--shard", shard)
        assert done.returncode in (0, 1), done.stderr
        runs.append(Path(done.stdout.strip().splitlines()[-1]))
    assert [read_run(r)["status"].tolist() for r in runs] == [["fail"], ["fail"]]
    return config, loose, runs


def test_a_merge_of_re_judged_shards_says_so_and_shards_judged_apart_are_refused(shards):
    """Issue 41, sweep 8 A10: shards each re-judged with `report --tolerances F` merged into a run
    holding F's verdicts while its run.json said `rejudged: None`, its page nothing, and merge's own
    end lines "fails against your expected file alone" of cells its table said pass. The merged run
    says F as the shards did; shards judged with different files are refused."""
    config, loose, runs = shards
    for run in runs:
        assert trtmatrix("report", run.name, "-c", str(config), "--tolerances", str(loose)).returncode == 0
    merged = trtmatrix("merge", *(r.name for r in runs), "-c", str(config))
    run_dir = Path(merged.stdout.strip().splitlines()[-1])
    assert read_run(run_dir)["status"].tolist() == ["pass", "pass"]
    assert json.loads((run_dir / "run.json").read_text())["rejudged"][-1]["tolerances"] == str(loose.resolve())
    assert f"and <code>{loose.resolve()}</code>: these verdicts are not the run's own" in (run_dir / "report.html").read_text()
    assert "expected file" not in merged.stderr, merged.stderr  # nothing fails against it now
    assert trtmatrix("report", runs[0].name, "-c", str(config)).returncode == 0  # the matrix file's: fail again
    refused = trtmatrix("merge", *(r.name for r in runs), "-c", str(config))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and refused.stderr.startswith(
        "error: shards judged with different files: "), refused.stderr
    assert f"{runs[1].name} (shard 2/2) re-judged with {config.resolve()} and {loose.resolve()}" in refused.stderr
    # sweep 10 C6, merge's side: both re-judged with the matrix file, one path holding two contents
    text = config.read_text()
    config.write_text(text.replace("atol = 0.1", "atol = 0.2"))
    try:
        assert trtmatrix("report", runs[1].name, "-c", str(config)).returncode == 0
        refused = trtmatrix("merge", *(r.name for r in runs), "-c", str(config))
        assert refused.returncode == 2 and refused.stderr.startswith(
            "error: shards judged with different contents of the matrix file: "), refused.stderr
    finally:
        config.write_text(text)


def test_a_report_waiting_for_a_stopped_report_names_it_once_and_its_killed_note_goes(shards):
    """Issue 41, sweep 8 A9: a `report` waiting for a stopped `report` said "waiting for run pid N
    which is re-judging run …", and its error doubled that clause. Sweep 8 A1: that report killed
    (kill -9) left its `.rejudging.holder.json` for good; whoever reads the run next removes it."""
    config, loose, runs = shards
    run_dir = runs[1]
    note = run_dir / ".rejudging.holder.json"
    first = subprocess.Popen([TRTMATRIX, "report", run_dir.name, "-c", str(config), "--tolerances", str(loose)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until(lambda: first.poll() is not None or noted(note), pause=0.001)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = trtmatrix("report", run_dir.name, "-c", str(config), timeout=60)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    holder = f"report pid {first.pid} which is re-judging run {run_dir.name}"
    assert second.returncode == 2 and second.stderr == (
        f"waiting for {holder} (its process is stopped: SIGSTOP or a suspended job)\n"
        f"error: {holder} has been stopped (SIGSTOP or a suspended job) for 5 s: let it go on (kill -CONT) or end it, "
        "then report again\n"), second.stderr
    assert note.exists()  # the killed report's
    assert trtmatrix("summary", run_dir.name, "-c", str(config)).returncode == 0
    assert not note.exists()


@contextmanager
def stopped_holder(path):
    """A process holding the flock of `path` (no note written), stopped (SIGSTOP); killed at the end."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; from filelock import FileLock; "
                               f"lock = FileLock({str(path)!r}); lock.acquire(); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_stopped_before_its_note_is_written_is_seen_stopped(tmp_path):
    """Issue 41, sweep 8 (helper's find): a holder stopped between taking a lock and writing its note
    (or halfway through it) left waiters saying "another run", never seeing it stopped: a wait
    bounded only by `stopped_s` was without end. /proc/locks names the holder."""
    from matrix.store.locks import LockWaitEnded, held

    path = tmp_path / "env-x.lock"
    (tmp_path / "env-x.holder.json").write_text('{"pid": ')  # half of a note
    with stopped_holder(path) as holder:
        said = []
        started = time.monotonic()
        with pytest.raises(LockWaitEnded) as ended:
            with held(FileLock(str(path)), "testing", said.append, stopped_s=1.5):
                pass
        assert time.monotonic() - started < 10
        assert said == [f"process pid {holder.pid} (its process is stopped: SIGSTOP or a suspended job)"]
        assert ended.value.who == said[0]


def test_a_stopped_cache_free_is_waited_for_saying_so_and_not_for_ever(tmp_path, monkeypatch, capsys):
    """Issue 41, sweep 9 B5: a `cache --free` stopped while it held the cache alone made every run
    wait without a word and without end. Now the run says for whom it waits and gives up once the
    free has been stopped for FREE_STOPPED_S, in one line (exit 2 through the CLI's bad-input path)."""
    from matrix.store import locks

    monkeypatch.setattr(locks, "FREE_STOPPED_S", 1.5)
    with stopped_holder(locks.cache_lock(tmp_path, locks.IN_USE).lock_file) as freeing:
        started = time.monotonic()
        with pytest.raises(locks.CacheBeingFreed) as ended:
            with locks.cache_in_use(tmp_path):
                pass
        assert time.monotonic() - started < 10
        who = f"process pid {freeing.pid} (its process is stopped: SIGSTOP or a suspended job)"
        assert capsys.readouterr().err == f"waiting for `trtmatrix cache --free`, {who}, to finish freeing the cache\n"
        assert str(ended.value) == (f"the cache is being freed by `trtmatrix cache --free`, {who}, stopped for 1.5 s: "
                                    "let it go on (kill -CONT) or end it, then run again")
        freeing.kill()
        freeing.wait()
        with locks.cache_in_use(tmp_path):  # the free gone, the cache is the run's at once
            pass
