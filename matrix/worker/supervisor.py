"""Run every cell of one environment, each in a child process with a timeout.

A fork server: the supervisor imports numpy and the engine once, then forks a child per cell, so
a cell costs a fork instead of a new interpreter importing them again, and a crash, hang or
exception still stays in its own process. Engines that must not be forked once imported start
each cell as a new interpreter instead (spawn: a fork that execs at once, before anything else):
TensorRT on a GPU, because CUDA state must never cross a fork and importing TensorRT loads the CUDA
libraries (engines.fork_safe; TRTMATRIX_CELL_START=spawn forces it, as the tests do). Up to
job["cell_jobs"] cells run at once.

Prints one JSON line per event on stdout (the host reads them for its progress display) and
guarantees a result.json for every cell, whatever the child did.
"""

import ctypes
import faulthandler
import importlib
import io
import json
import os
import signal
import sys
import threading
import time
import traceback

from .cell import run_cell, write_json
from .engines import fork_safe, load_engine
from .files import CELL_SPEC, LOG, RESULT, WATCH_STDIN

START = "TRTMATRIX_CELL_START"  # "spawn": a new interpreter per cell even where forking is safe
STARTED = "TRTMATRIX_CELL_STARTED"  # how this cell's process started: fork | spawn
POLL_S = 0.002
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# The cell processes running now: an orchestrator that dies takes them down (_watch_orchestrator).
_children = set()


def _signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal {}".format(signum)


def _emit(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _kill(pid):
    """The cell's whole process group; a child that has not reached its setsid yet has no group of
    its own, and is killed alone (killpg would fail: a ProcessLookupError, not a kill)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone


def _kill_children():
    for pid in list(_children):
        _kill(pid)


def _watch_orchestrator():
    """The host keeps this process's stdin open for as long as it lives (a pipe from the venv
    backend; an attached stdin that Docker closes when its client goes, for containers). End of
    file means the orchestrator died, kill -9 included: kill the cells and exit, leaving nothing."""
    while sys.stdin.buffer.read(65536):
        pass
    _kill_children()
    os._exit(137)


def _die_with(supervisor):
    """A cell must not outlive its supervisor: a supervisor killed outright (SIGKILL: the OOM
    killer, a Ray worker killed with its node) cannot take its cells down itself, and a hung cell
    would sleep on forever. Linux asks the kernel for SIGKILL when the parent goes (it survives the
    exec of a spawned cell); elsewhere the supervisor's own clean-up is all there is."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != supervisor:  # it died between the fork and the prctl
        os._exit(137)


def _start(spec_path, out_dir, fork):
    """A child in its own session (a timeout kills its whole group) writing to the cell's log:
    the cell run in this process's fork, or a new interpreter."""
    log_fd = os.open(os.path.join(out_dir, LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    supervisor = os.getpid()
    pid = os.fork()
    if pid:
        os.close(log_fd)
        _children.add(pid)
        return pid
    code = 1
    try:
        os.setsid()
        _die_with(supervisor)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.environ[STARTED] = "fork" if fork else "spawn"  # recorded in the cell's result.json
        if not fork:
            os.execv(sys.executable, [sys.executable, "-X", "faulthandler", "-m", __package__, "cell", spec_path])
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        faulthandler.enable()
        code = run_cell(spec_path)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _ended(status, timed_out, timeout_s):
    """(status, error) for a child that wrote no result, or was killed at its deadline."""
    if timed_out:
        return "timeout", "not finished within {:g}s; killed".format(timeout_s)
    if os.WIFSIGNALED(status):
        return "crash", "killed by {}".format(_signal_name(os.WTERMSIG(status)))
    return "error", "worker exited with status {} without a result".format(os.WEXITSTATUS(status))


def _finish(spec, status, timed_out, started):
    """A cell the supervisor killed at its deadline is a timeout, whatever it wrote before the kill."""
    result_path = os.path.join(spec["out_dir"], RESULT)
    if os.path.exists(result_path) and not timed_out:
        with open(result_path) as fh:
            verdict = json.load(fh)["status"]
    else:
        verdict, error = _ended(status, timed_out, spec["timeout_s"])
        write_json(result_path, {"cell_id": spec["cell_id"], "status": verdict, "error": error})
    _emit({"event": "done", "cell_id": spec["cell_id"], "status": verdict, "seconds": round(time.time() - started, 3)})


def _prepared(spec):
    out_dir = spec["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    result_path = os.path.join(out_dir, RESULT)
    if os.path.exists(result_path):
        os.remove(result_path)
    spec_path = os.path.join(out_dir, CELL_SPEC)
    write_json(spec_path, spec)
    return spec_path


def run_cells(cells, fork, cell_jobs):
    pending, running = list(cells), {}  # pid -> [spec, started, deadline, timed out]
    try:
        while pending or running:
            while pending and len(running) < cell_jobs:
                spec = pending.pop(0)
                spec_path = _prepared(spec)
                _emit({"event": "start", "cell_id": spec["cell_id"]})
                started = time.time()
                running[_start(spec_path, spec["out_dir"], fork)] = [spec, started, started + spec["timeout_s"], False]
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                now = time.time()
                for child, entry in running.items():
                    if now > entry[2] and not entry[3]:
                        _kill(child)
                        entry[3] = True
                time.sleep(POLL_S)
                continue
            _children.discard(pid)
            spec, started, _, timed_out = running.pop(pid)
            _finish(spec, status, timed_out, started)
    finally:  # Ctrl-C / SIGTERM on the supervisor: take the cells down too
        _kill_children()


def _warm_numpy():
    """Import numpy here, with the parts it loads lazily on first use (median, npz files): every
    forked cell inherits them instead of paying ~65 ms to load them itself."""
    numpy = importlib.import_module("numpy")
    buffer = io.BytesIO()
    numpy.savez(buffer, x=numpy.zeros(1))
    buffer.seek(0)
    numpy.median(numpy.load(buffer)["x"])


def run_job(job_path):
    with open(job_path) as fh:
        job = json.load(fh)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    watching = os.environ.get(WATCH_STDIN) == "1"
    if watching:
        threading.Thread(target=_watch_orchestrator, daemon=True).start()
    try:
        engines = {spec["engine"] for spec in job["cells"]}
        fork = os.environ.get(START) != "spawn" and all(fork_safe(e) for e in engines)
        if fork:
            _warm_numpy()
            for engine in engines:
                try:
                    load_engine(engine)
                except Exception:  # noqa: BLE001 - each cell then reports the import failure as its own error
                    pass
        run_cells(job["cells"], fork, max(1, job.get("cell_jobs", 1)))
        code = 0
    except SystemExit as exc:  # SIGTERM / SIGHUP: the cells are already killed
        code = exc.code
    if watching:  # the watcher still blocks reading stdin: an interpreter shutdown around it aborts
        sys.stdout.flush()  # ("Fatal Python error: _enter_buffered_busy"): leave without one
        sys.stderr.flush()
        os._exit(code)
    return code
