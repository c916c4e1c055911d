"""Run every cell of one environment, each in a child process with a timeout.

A fork server: the supervisor imports numpy and the engine once, then forks a child per cell, so
a cell costs a fork instead of a new interpreter importing them again, and a crash, hang or
exception still stays in its own process. Engines that must not be forked once imported start
each cell as a new interpreter instead (spawn: a fork that execs at once, before anything else):
TensorRT on a GPU, because CUDA state must never cross a fork and importing TensorRT loads the CUDA
libraries (engines.fork_safe; TRTMATRIX_CELL_START=spawn forces it, as the tests do). Up to
job["cell_jobs"] cells run at once.

Warm mode (torch cells, and TensorRT cells on a GPU; TRTMATRIX_CELL_START=warm forces it for any
engine, =fork or =spawn turn it off): one long-lived child, the warm worker, runs the cells one
after another, so CUDA is initialised and each program loaded once per worker, not once per cell.
It is forked before anything touches CUDA; an engine that must not be forked once imported
(TensorRT on a GPU) is imported by the worker itself. Isolation is by restart: a cell that crashes
the worker, hangs past its deadline or leaves CUDA unusable (the engine's reset() says so) ends
that worker, the cell gets its status, and a fresh worker takes the next cell. Between cells the
engine's reset() puts back what a cell may change (engines/torch_engine.py).

Shared cells (job["shared"]: one environment's cells spread over several GPUs, a supervisor per
GPU, each given every cell in its own order): a cell is this supervisor's when it creates the
cell's folder first (the host emptied them all before starting any), so each cell runs once, on
whichever worker reaches it first, and a worker that finishes early takes over what is left of
the others' cells.

Prints one JSON line per event on stdout (the host reads them for its progress display) and
guarantees a result.json for every cell, whatever the child did.
"""

import ctypes
import faulthandler
import importlib
import io
import json
import os
import select
import signal
import sys
import threading
import time
import traceback

from .cell import run_cell, write_json
from .engines import fork_safe, load_engine, warm_worker
from .files import CELL_SPEC, LOG, RESULT, WATCH_STDIN
from .oom import oom_kills, oom_note
from .unfit import unfit

START = "TRTMATRIX_CELL_START"  # "spawn": a new interpreter per cell; "fork": a fork per cell where safe; "warm": a warm worker
STARTED = "TRTMATRIX_CELL_STARTED"  # how this cell's process started: fork | spawn
POLL_S = 0.002
PR_SET_PDEATHSIG = 1  # linux/prctl.h

# The cell processes running now: an orchestrator that dies takes them down (_watch_orchestrator).
_children = set()
# The worker's own clock (epoch seconds), kept in every cell's result.json ("clock"), so that where a
# GPU's time goes can be told from the worker's side: its start, imports, claims, cells (issue 43).
CLOCK = {"supervisor_loaded": time.time()}
OOM_KILLS_AT_START = oom_kills()  # a cell killed by SIGKILL says whether the OOM killer acted since


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


def _fork_child(body, child_only=(), parent_only=()):
    """A child in its own session (a timeout kills its whole group) that dies with the supervisor,
    runs body() and exits with what it returns. `child_only`: descriptors the parent closes after
    the fork; `parent_only`: those the child closes."""
    sys.stdout.flush()
    sys.stderr.flush()
    supervisor = os.getpid()
    pid = os.fork()
    if pid:
        for fd in child_only:
            os.close(fd)
        _children.add(pid)
        return pid
    code = 1
    try:
        for fd in parent_only:
            os.close(fd)
        os.setsid()
        _die_with(supervisor)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        faulthandler.enable()
        code = body()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _start(spec_path, out_dir, fork):
    """A cell's child, writing to the cell's log: the cell run in this process's fork, or a new
    interpreter."""
    log_fd = os.open(os.path.join(out_dir, LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def body():
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.environ[STARTED] = "fork" if fork else "spawn"  # recorded in the cell's result.json
        if not fork:
            os.execv(sys.executable, [sys.executable, "-X", "faulthandler", "-m", __package__, "cell", spec_path])
        return run_cell(spec_path)

    return _fork_child(body, child_only=[log_fd])


def _start_warm():
    """A warm worker: (pid, the pipe it reads cell specs from, the pipe it answers on). It runs each
    cell with its stdout and stderr in that cell's log."""
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()

    def body():
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # never the supervisor's event stream
        os.environ[STARTED] = "warm"
        _serve(os.fdopen(requests_r), answers_w)
        return 0

    CLOCK["worker_forked"] = time.time()
    pid = _fork_child(body, child_only=[requests_r, answers_w], parent_only=[requests_w, answers_r])
    return pid, requests_w, answers_r


def _serve(requests, answers):
    """The warm worker's loop: a cell per spec path read, then "done", or "restart" (and exit)
    when the engine's reset() says this process should not run another cell."""
    for line in requests:
        spec_path = line.strip()
        with open(spec_path) as fh:
            spec = json.load(fh)
        log_fd = os.open(os.path.join(spec["out_dir"], LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        run_cell(spec_path)
        sys.stdout.flush()
        sys.stderr.flush()
        reset = getattr(load_engine(spec["engine"]), "reset", None)
        fresh = reset() if reset else True
        os.write(answers, b"done\n" if fresh else b"restart\n")
        if not fresh:
            return


def _await_warm(pid, answers, deadline):
    """(whether the warm worker is still there, its wait status if not, whether the deadline
    passed) once the cell it runs has ended: answered "done"; answered "restart" and exited; died
    (end of file on its answers: a crash); or killed at the deadline."""
    while True:
        ready, _, _ = select.select([answers], [], [], POLL_S * 10)
        if ready:
            answer = os.read(answers, 64)
            if answer.startswith(b"done"):
                return True, 0, False
            _, status = os.waitpid(pid, 0)
            _children.discard(pid)
            return False, status, False
        if time.time() > deadline:
            _kill(pid)
            _, status = os.waitpid(pid, 0)
            _children.discard(pid)
            return False, status, True


def _taken(cells, shared):
    """The cells this supervisor runs, each claimed as it is about to start (see above)."""
    for spec in cells:
        if shared:
            out_dir = spec["out_dir"]
            os.makedirs(os.path.dirname(out_dir), exist_ok=True)
            try:
                os.mkdir(out_dir)
            except FileExistsError:  # another supervisor's
                continue
        yield dict(spec, clock=dict(CLOCK, claimed=time.time()))


def run_warm(cells):
    """Every cell in a warm worker, one after another; a new worker after one that ended."""
    worker = None
    try:
        for spec in cells:
            if worker is None:
                worker = _start_warm()
            pid, requests, answers = worker
            spec_path = _prepared(spec)
            _emit({"event": "start", "cell_id": spec["cell_id"]})
            started = time.time()
            os.write(requests, (spec_path + "\n").encode())
            alive, status, timed_out = _await_warm(pid, answers, started + spec["timeout_s"])
            _finish(spec, status, timed_out, started)
            if not alive:
                os.close(requests)
                os.close(answers)
                worker = None
    finally:
        if worker is not None:  # no more cells: end of file on its requests ends it
            os.close(worker[1])
            os.waitpid(worker[0], 0)
            _children.discard(worker[0])
        _kill_children()


def _ended(status, timed_out, timeout_s):
    """(status, error) for a child that wrote no result, or was killed at its deadline."""
    if timed_out:
        return "timeout", "not finished within {:g}s; killed".format(timeout_s)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        note = oom_note(OOM_KILLS_AT_START) if signum == signal.SIGKILL else ""
        return "crash", "killed by {}{}".format(_signal_name(signum), note)
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
    _emit({"event": "done", "cell_id": spec["cell_id"], "status": verdict, "seconds": round(time.time() - started, 3),
           "out_dir": spec["out_dir"]})  # the host judges the cell's outputs there while the next cells run


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
    """`cells` an iterator: the next is taken (claimed, where shared) only when a slot is free."""
    running, more = {}, True  # pid -> [spec, started, deadline, timed out]
    try:
        while more or running:
            while more and len(running) < cell_jobs:
                spec = next(cells, None)
                more = spec is not None
                if more:
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


def _missing_engine(engines):
    """Each engine imported before the cells fork; an engine whose package this interpreter lacks
    altogether (an image without onnxruntime) is returned: the environment's fault, said once. Any
    other import failure is each cell's own error."""
    for engine in engines:
        try:
            load_engine(engine)
        except ModuleNotFoundError as exc:
            return exc
        except Exception:  # noqa: BLE001 - reported by each cell
            pass
    return None


def run_job(job_path):
    with open(job_path) as fh:
        job = json.load(fh)
    CLOCK["launched"] = job.get("launched")  # by the host, just before it started this process
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    watching = os.environ.get(WATCH_STDIN) == "1"
    if watching:
        threading.Thread(target=_watch_orchestrator, daemon=True).start()
    try:
        engines = {spec["engine"] for spec in job["cells"]}
        start = os.environ.get(START) or None  # set but empty: as if unset
        fork = start != "spawn" and all(fork_safe(e) for e in engines)
        warm = start == "warm" or (start is None and warm_worker(engines))
        if fork or warm:
            _warm_numpy()
        missing = _missing_engine(engines) if fork else None  # not where forking is unsafe: a warm worker imports it
        CLOCK["engine_imported"] = time.time()
        if missing is not None:
            code = unfit(missing)
        else:
            cells = _taken(job["cells"], job.get("shared", False))
            if warm:
                run_warm(cells)
            else:
                run_cells(cells, fork, max(1, job.get("cell_jobs", 1)))
            code = 0
    except SystemExit as exc:  # SIGTERM / SIGHUP: the cells are already killed
        code = exc.code
    if watching:  # the watcher still blocks reading stdin: an interpreter shutdown around it aborts
        sys.stdout.flush()  # ("Fatal Python error: _enter_buffered_busy"): leave without one
        sys.stderr.flush()
        os._exit(code)
    return code
