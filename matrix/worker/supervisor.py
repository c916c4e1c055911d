"""Run every cell of one environment, each in a child process with a timeout.

Prints one JSON line per event on stdout (the host reads them for its progress display) and
guarantees a result.json for every cell, whatever the child did.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

from .cell import write_json
from .files import CELL_SPEC, LOG, RESULT, WATCH_STDIN


def _signal_name(returncode):
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return "signal {}".format(-returncode)


def _emit(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


# The cell process running now: an orchestrator that dies takes it down (see _watch_orchestrator).
_current = {"child": None}


def _watch_orchestrator():
    """The host keeps this process's stdin open for as long as it lives (a pipe from the venv
    backend; an attached stdin that Docker closes when its client goes, for containers). End of
    file means the orchestrator died, kill -9 included: kill the cell and exit, leaving nothing."""
    while sys.stdin.buffer.read(65536):
        pass
    child = _current["child"]
    if child is not None and child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
    os._exit(137)


def _run_child(spec_path, out_dir, timeout_s):
    """Return (status, error) for a child that did not write its own result."""
    command = [sys.executable, "-X", "faulthandler", "-m", __package__, "cell", spec_path]
    with open(os.path.join(out_dir, LOG), "w") as log:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        _current["child"] = child
        try:
            returncode = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return "timeout", "no result after {:g}s; killed".format(timeout_s)
        except BaseException:  # Ctrl-C / SIGTERM on the supervisor: take the child down too
            os.killpg(child.pid, signal.SIGKILL)
            raise
    if returncode < 0:
        return "crash", "killed by {}".format(_signal_name(returncode))
    return "error", "worker exited with status {} without a result".format(returncode)


def run_job(job_path):
    with open(job_path) as fh:
        job = json.load(fh)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    if os.environ.get(WATCH_STDIN) == "1":
        threading.Thread(target=_watch_orchestrator, daemon=True).start()
    for spec in job["cells"]:
        out_dir = spec["out_dir"]
        os.makedirs(out_dir, exist_ok=True)
        result_path = os.path.join(out_dir, RESULT)
        if os.path.exists(result_path):
            os.remove(result_path)
        spec_path = os.path.join(out_dir, CELL_SPEC)
        write_json(spec_path, spec)
        _emit({"event": "start", "cell_id": spec["cell_id"]})
        started = time.time()
        status, error = _run_child(spec_path, out_dir, spec["timeout_s"])
        if os.path.exists(result_path):
            with open(result_path) as fh:
                status = json.load(fh)["status"]
        else:
            write_json(result_path, {"cell_id": spec["cell_id"], "status": status, "error": error})
        _emit({"event": "done", "cell_id": spec["cell_id"], "status": status,
               "seconds": round(time.time() - started, 3)})
    return 0
