"""A plain Python script run inside an environment, as a person would run it there: `python
SCRIPT` in its folder, with the environment's interpreter (a venv's, the host's) or in a container
of its image (the folder mounted read-only at the same path, no network, the host user). Nothing of
trtmatrix is on its path: what `trtmatrix repro` checks its repro.py with.

A CPU environment's script sees no GPU (as its cells do). GPU environments get the host's GPUs
as they are: not run on a GPU host from this repository.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..store.locks import cache_lock
from ..store.records import HOST
from . import open_backend
from .backend import EnvironmentUnavailable, SetupFailed
from .definitions import EnvDef


@dataclass
class ScriptRun:
    env: str
    returncode: int | None  # None: it did not finish within the time allowed, or could not start
    output: str  # stdout and stderr together, in order


def run_script(envdef: EnvDef, cache_dir: Path, worker_home: Path, folder: Path, script: str,
               timeout_s: float) -> ScriptRun:
    """Prepare the environment (made once, as for its cells) and run `python script` in `folder`."""
    try:
        backend = open_backend(envdef, cache_dir, worker_home)
        with cache_lock(cache_dir, f"prepare-{envdef.name}"):
            backend.prepare()
    except EnvironmentUnavailable as exc:
        return ScriptRun(envdef.name, None, f"environment {envdef.name} cannot run here: {exc}")
    except SetupFailed as exc:
        return ScriptRun(envdef.name, None, f"environment {envdef.name} could not be made: {exc}")
    if envdef.backend == "docker":
        return _in_container(backend, envdef, folder, script, timeout_s)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if envdef.backend == "venv":
        env["PYTHONNOUSERSITE"] = "1"
    if not envdef.gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        done = subprocess.run([str(backend.python), script], cwd=folder, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        return ScriptRun(envdef.name, None, f"{_text(exc.stdout)}\n(did not finish within {timeout_s:.0f} s)")
    return ScriptRun(envdef.name, done.returncode, done.stdout)


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def _in_container(backend, envdef: EnvDef, folder: Path, script: str, timeout_s: float) -> ScriptRun:
    from docker.errors import DockerException

    from .docker import LABEL

    folder = folder.resolve()
    container = None
    try:
        container = backend.client.containers.run(
            backend.image.id, [envdef.python or "python3", script], detach=True, working_dir=str(folder),
            volumes={str(folder): {"bind": str(folder), "mode": "ro"}}, user=f"{os.getuid()}:{os.getgid()}",
            network_mode="none", read_only=True, tmpfs={"/tmp": "rw,nosuid,nodev"}, cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            environment={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
                         **({} if envdef.gpu else {"CUDA_VISIBLE_DEVICES": ""})},
            # A worker's labels: a run that dies leaves it to the next run's clean-up (docker.py).
            labels={LABEL: "worker", f"{LABEL}.env": envdef.name, f"{LABEL}.host": HOST,
                    f"{LABEL}.host-pid": str(os.getpid())})
        try:
            code = container.wait(timeout=timeout_s)["StatusCode"]
        except Exception:  # noqa: BLE001 - the SDK's read timeout: requests' or urllib3's error
            return ScriptRun(envdef.name, None, f"{container.logs().decode(errors='replace')}\n"
                                                f"(did not finish within {timeout_s:.0f} s)")
        # Killed by a signal: as subprocess says it (-N), not as the shell does (128 + N).
        return ScriptRun(envdef.name, 128 - code if code > 128 else code, container.logs().decode(errors="replace"))
    except DockerException as exc:
        return ScriptRun(envdef.name, None, f"container for {envdef.name} did not run: {exc}")
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except DockerException:
                pass
