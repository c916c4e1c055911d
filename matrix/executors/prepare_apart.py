"""A case file's artifacts prepared in a child process of their own: its build function is the
user's code, and run in trtmatrix's own process it could take that process hostage (a build that
never returns, a segfault that ends the run with exit 139, a signal disposition it changes, a
warnings filter that turns trtmatrix's own warnings into errors). In a child it has a deadline
(the matrix's `timeout_s`), a signal ends it, and a crash is that case's `error`; the parent removes
the half-made artifacts a killed child leaves. ONNX-file and suite cases run no user code and are
prepared in the process itself.

Run as `python -m matrix.executors.prepare_apart '<json>'` by prepare_apart()."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import matrix

from ..prepare import artifact_dir, prepare, prepared
from ..sources import CaseSpec, Params, case_specs

STOP_GRACE_S = 5


class PrepareFailed(Exception):
    """The child's own words: its error line and the end of its traceback."""

    def __init__(self, error: str, tail: str = ""):
        self.error, self.tail = error, tail
        super().__init__(error)


def prepare_apart(config_path: Path, spec: CaseSpec, params: Params, key: str, cache_dir: Path,
                  timeout_s: float) -> Path:
    """prepare(), in a child process where the case runs code of a case file."""
    if spec.torch_case is None:
        return prepare(spec, params, key, cache_dir)
    if ready := prepared(cache_dir, spec.name, key):
        return ready
    job = json.dumps({"config": str(config_path), "case": spec.name, "params": list(params), "key": key,
                      "cache": str(cache_dir)})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(matrix.__file__).parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-m", __name__, job], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise PrepareFailed(f"not prepared within {timeout_s:g} s (timeout_s): the case's build or export never "
                            "returned") from None
    finally:  # a deadline, a stop, or the end: nothing of the child is left, nor its half-made artifacts
        _end(child)
        shutil.rmtree(artifact_dir(cache_dir, spec.name, key).with_name(
            artifact_dir(cache_dir, spec.name, key).name + ".tmp"), ignore_errors=True)
    sys.stderr.write(err)  # what the case file printed, as it would have in this process
    if child.returncode < 0:
        raise PrepareFailed(f"the process preparing it was killed by {signal.Signals(-child.returncode).name} "
                            "(the case's build or export crashed)")
    if child.returncode:
        said = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"error": f"exit {child.returncode}"}
        raise PrepareFailed(said["error"], said.get("tail", ""))
    return prepared(cache_dir, spec.name, key) or artifact_dir(cache_dir, spec.name, key)


def _end(child: subprocess.Popen) -> None:
    """The child's process group: SIGTERM, then SIGKILL after a grace (a child that ignores SIGTERM)."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            child.wait(STOP_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def main(job: dict) -> int:
    from ..config import load_config

    config_path = Path(job["config"])
    try:
        spec = case_specs(load_config(config_path), config_path, set(), only=[job["case"]])[job["case"]]
        prepare(spec, tuple(tuple(pair) for pair in job["params"]), job["key"], Path(job["cache"]))
    except BaseException as exc:  # noqa: BLE001 - whatever the case's code raised, SystemExit included
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                          "tail": "".join(traceback.format_exception(exc)[-6:])}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
