"""The `venv` backend: uv creates one virtualenv per resolved environment definition and reuses it.

The folder is named by the definition and its resolution (resolve.py): a dependency that moves
gets a new venv, installed exactly from the lock, and the resolution is the fingerprint.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from uv import find_uv_bin

from ..stops import ORCHESTRATOR, process_mark
from ..store.hashing import hash_json
from .definitions import EnvDef
from ..worker.files import WATCH_STDIN
from .backend import SetupFailed
from .gpus import with_host_gpus
from .resolve import resolve_env
from .venv_check import venv_damage

DONE_MARK = ".trtmatrix-complete"
ATTEMPTS, RETRY_S = 3, 5
LOCK = "requirements.lock"
STOP_GRACE_S = 5


def venv_fingerprint(envdef: EnvDef) -> str:
    """What the venv holds beyond its definition (interpreter build, every resolved version), plus
    the host's GPUs for a GPU environment. Raises EnvironmentUnavailable when it cannot be resolved."""
    return with_host_gpus(envdef, resolve_env(envdef).key)


class VenvBackend:
    def __init__(self, envdef: EnvDef, cache_dir: Path, worker_home: Path):
        self.envdef = envdef
        self.worker_home = worker_home
        self.resolution = resolve_env(envdef)
        folder = hash_json([envdef.definition_hash(), self.resolution.key])[:12]
        self.path = cache_dir / "venvs" / f"{envdef.name}-{folder}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def _uv(self, *args: str) -> None:
        """uv, tried ATTEMPTS times: an index that fails for a moment (seen on a busy machine:
        "no version of packaging==26.4" for a version it has) must not fail the environment."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                subprocess.run([find_uv_bin(), *args], check=True, capture_output=True, text=True)
                return
            except subprocess.CalledProcessError as exc:
                tail = "\n".join((exc.stderr or exc.stdout or "").strip().splitlines()[-6:])
                if "(os error 28)" in tail:  # ENOSPC: the run's own failure, not this environment's, not retried
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path)) from None
                if attempt < ATTEMPTS:
                    time.sleep(RETRY_S * attempt)
        raise SetupFailed(f"uv {args[0]} {args[1]} failed {ATTEMPTS} times for {self.envdef.name}: {tail}")

    def prepare(self) -> None:
        """Made once; made again, said in one line, when something deleted its interpreter (its
        packages then cannot be trusted either) or damaged what it installed: never run damaged,
        where the cells would blame the engine for a file that is gone."""
        if (self.path / DONE_MARK).is_file():
            damage = venv_damage(self.path, self.resolution.lock) if os.access(self.python, os.X_OK) \
                else f"its interpreter {self.python} is gone"
            if damage is None:
                return
            print(f"warning: {self.envdef.name}: its venv {self.path} is damaged ({damage}); made again",
                  file=sys.stderr, flush=True)
        if not (self.path / "pyvenv.cfg").is_file():  # half made (a full disk, a kill): uv will not clear it
            shutil.rmtree(self.path, ignore_errors=True)
        self._uv("venv", "--quiet", "--clear", "--python", self.resolution.interpreter, str(self.path))
        (self.path / LOCK).write_text(self.resolution.lock)
        offline = ["--offline"] if self.resolution.offline else []
        self._uv("pip", "sync", "--quiet", *offline, "--python", str(self.python), str(self.path / LOCK))
        (self.path / DONE_MARK).write_text(self.resolution.python + "\n")

    def fingerprint(self) -> str:
        return venv_fingerprint(self.envdef)

    def facts(self) -> dict:
        return {"image": None, "image_digest": None}

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> ProcessWorker:
        return start_process(self.python, self.worker_home, args, log_path, gpu, self.envdef)


def start_process(python: Path | str, worker_home: Path, args: list[str], log_path: Path,
                  gpu: int | None, envdef: EnvDef, isolated: bool = True) -> ProcessWorker:
    """The worker's supervisor under `python`, seeing only its leased GPU, or none at all: a CPU
    environment on a GPU host must not pick a GPU up by itself (PyTorch would). `isolated` (a
    venv): only the venv's packages and the worker's; else (a host interpreter) also what its user
    gives it, PYTHONPATH and the user's site-packages, as when they run it (and as its check ran)."""
    search = [str(worker_home)] + ([] if isolated else [os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, search)), WATCH_STDIN: "1",
           **({"PYTHONNOUSERSITE": "1"} if isolated else {}),
           "CUDA_VISIBLE_DEVICES": "" if gpu is None else str(gpu), ORCHESTRATOR: process_mark(os.getpid()) or "",
           **envdef.worker_environment()}
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        # No bytecode beside the packages, as asked; trtmatrix's own folder keeps the worker's, so
        # that each worker does not compile torch from source again (5.0 s against 2.3 s a start on
        # an H100 host lent with this variable set: paid once per GPU, per run).
        env["PYTHONPYCACHEPREFIX"] = str(worker_home.parent / "pycache")
    with log_path.open("w") as log:
        # stdin: a pipe nobody writes to; it closes when this process dies, however it dies,
        # and the supervisor then stops its cell and exits. A session of its own: a Ctrl-C in the
        # terminal reaches the orchestrator alone, which stops the worker itself (a worker that
        # died of the same Ctrl-C first would make its cells look like errors).
        process = subprocess.Popen([str(python), "-m", "trtmatrix_worker", *args], env=env, start_new_session=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
    return ProcessWorker(process)


def remove_dead_workers() -> list[int]:
    """Kill the worker processes (supervisors and their cells), and what a case's build started
    (stops.run_apart marks its children too: a helper server in a session of its own), whose
    trtmatrix died without stopping them: a supervisor stopped (SIGSTOP) when its trtmatrix was
    killed cannot read the closed pipe that would end it, and would stay for good. Each one's process group is killed, by SIGKILL (which
    a stopped process does not hold off). Returns the pids found; nothing where there is no /proc."""
    found = []
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # no /proc
        return found
    for proc in Path("/proc").glob("[0-9]*"):
        try:  # a process of another pid namespace (a container's) names its trtmatrix by a pid of its own
            if os.readlink(proc / "ns" / "pid") != namespace:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        mark = next((item.split(b"=", 1)[1].decode() for item in environ if item.startswith(ORCHESTRATOR.encode() + b"=")), "")
        if not mark or process_mark(int(mark.split(":")[0])) == mark:
            continue
        try:
            os.killpg(os.getpgid(int(proc.name)), signal.SIGKILL)
            found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


class ProcessWorker:
    def __init__(self, process: subprocess.Popen):
        self.process = process

    def lines(self) -> Iterator[str]:
        yield from self.process.stdout

    def wait(self) -> int:
        return self.process.wait()

    def stop(self) -> None:
        """SIGTERM first: the supervisor then kills its cell's process group itself."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
