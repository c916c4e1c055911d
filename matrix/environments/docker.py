"""The `docker` backend: one container per environment runs all of that environment's cells.

The worker is not installed in the image: its staged copy is mounted read-only, as are the
case artifacts and the job files; only this environment's own results and timing-cache folders
are writable. Paths inside are the same as on the host, so cell specs need no translation.
No network, the host user's uid:gid (result files are not root-owned), no capabilities, no
privilege gain, a read-only root filesystem with a tmpfs /tmp, a pids limit, one GPU by device
request where the environment needs one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

from docker.errors import DockerException
from docker.types import DeviceRequest, Ulimit

from ..store.cache import artifacts_folder, jobs_folder, results_folder, timing_folder
from ..stops import alive
from ..store.records import HOST
from ..worker.files import WATCH_STDIN
from .backend import EnvironmentUnavailable
from .definitions import EnvDef
from .gpus import with_host_gpus
from .images import docker_client, ensure_image, image_digest, image_fingerprint, image_ref

LABEL = "trtmatrix"
# Processes and threads together (onnxruntime and TensorRT start a thread per core): enough for
# any real engine on a large host, not for a fork bomb.
PIDS_LIMIT = 4096
# NVIDIA's flags for its NGC containers (TensorRT, PyTorch), as their start banner asks: more
# shared memory than Docker's 64 MB default, a 64 MB stack, and unlimited locked memory. The last
# only where the container gets a GPU: CPU engines pin no memory, and raising that hard limit
# needs a Docker engine with CAP_SYS_RESOURCE, which not every one has (the development
# machines' engine refuses to start such a container).
SHM_SIZE = "1g"
STACK = Ulimit(name="stack", soft=64 << 20, hard=64 << 20)
MEMLOCK = Ulimit(name="memlock", soft=-1, hard=-1)


class DockerBackend:
    def __init__(self, envdef: EnvDef, cache_dir: Path, worker_home: Path, run_id: str = ""):
        self.envdef = envdef
        self.run_id = run_id
        self.cache_dir = cache_dir.resolve()
        self.worker_home = worker_home.resolve()
        self.client = docker_client()
        self.image = None

    def prepare(self) -> None:
        self.image = ensure_image(self.client, self.envdef)

    def fingerprint(self) -> str:
        return docker_fingerprint(self.client, self.envdef, self.image)

    def facts(self) -> dict:
        return {"image": image_ref(self.envdef), "image_digest": image_digest(self.image)}

    def _mounts(self) -> dict:
        read_only = [self.worker_home, artifacts_folder(self.cache_dir), jobs_folder(self.cache_dir)]
        # This environment's own folders only: a container cannot touch another one's results.
        env = self.envdef.name
        writable = [results_folder(self.cache_dir, env), timing_folder(self.cache_dir, env)]
        for path in read_only + writable:
            path.mkdir(parents=True, exist_ok=True)
        return {**{str(p): {"bind": str(p), "mode": "ro"} for p in read_only},
                **{str(p): {"bind": str(p), "mode": "rw"} for p in writable}}

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> ContainerWorker:
        python = self.envdef.python or "python3"
        container = None
        try:
            container = self.client.containers.create(
                self.image.id, [python, "-m", "trtmatrix_worker", *args], name=self._name(gpu),
                user=f"{os.getuid()}:{os.getgid()}", network_mode="none", volumes=self._mounts(),
                environment={"PYTHONPATH": str(self.worker_home), "PYTHONNOUSERSITE": "1",
                             "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp", WATCH_STDIN: "1",
                             # no GPU leased: the worker knows it sees none (as in start_process)
                             **({"CUDA_VISIBLE_DEVICES": ""} if gpu is None else {}),
                             **self.envdef.worker_environment()},
                # An attached stdin that Docker closes when its one client goes (the SDK sets
                # StdinOnce with stdin_open): the supervisor inside sees end of file when this
                # process dies, kill -9 included.
                stdin_open=True,
                working_dir="/tmp",
                cap_drop=["ALL"], security_opt=["no-new-privileges"], pids_limit=PIDS_LIMIT,
                # Nothing but the mounts above and /tmp (HOME) is writable. /tmp is not noexec
                # (Docker's tmpfs default): TensorRT's runtime may create temporary files with
                # execute permission there (IRuntime::setTemporaryDirectory).
                read_only=True, tmpfs={"/tmp": "rw,exec,nosuid,nodev"},
                shm_size=SHM_SIZE, ulimits=[STACK] if gpu is None else [STACK, MEMLOCK],
                labels={LABEL: "worker", f"{LABEL}.run": self.run_id, f"{LABEL}.env": self.envdef.name,
                        f"{LABEL}.host": HOST, f"{LABEL}.host-pid": str(os.getpid())},
                device_requests=[DeviceRequest(device_ids=[str(gpu)], capabilities=[["gpu"]])]
                if gpu is not None else None)
            stdin = container.attach_socket(params={"stdin": 1, "stream": 1})
            container.start()
        except DockerException as exc:
            if container is not None:  # created but not started: leave nothing behind
                ContainerWorker(container, log_path).stop()
            raise EnvironmentUnavailable(f"container for {self.envdef.name} did not start: {exc}") from None
        return ContainerWorker(container, log_path, stdin)

    def _name(self, gpu: int | None) -> str:
        """trtmatrix-<env>-<run id>-<pid>[-gpu<N>]: readable in `docker ps`, unique per run, process
        (a run on a Ray cluster may start parts of one environment from several processes of one
        host) and GPU (one environment's cells spread over a host's GPUs)."""
        name = f"trtmatrix-{self.envdef.name}-{self.run_id}-{os.getpid()}" + (f"-gpu{gpu}" if gpu is not None else "")
        return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def docker_fingerprint(client, envdef: EnvDef, image=None) -> str:
    """The image id (a re-pulled tag or a rebuilt image re-runs its cells), plus the host's GPUs
    for a GPU environment; "absent" for an image not on this host."""
    return with_host_gpus(envdef, image_fingerprint(client, envdef, image))


class ContainerWorker:
    def __init__(self, container, log_path: Path, stdin=None):
        self.container = container
        self.log_path = log_path
        self.stdin = stdin  # held open for the container's life (see DockerBackend.start)

    def lines(self) -> Iterator[str]:
        pending = b""
        for chunk in self.container.logs(stdout=True, stderr=False, stream=True, follow=True):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace") + "\n"
        if pending:
            yield pending.decode(errors="replace")

    def wait(self) -> int:
        status = self.container.wait()["StatusCode"]
        # The container's whole output is the environment log kept with the run.
        self.log_path.write_bytes(self.container.logs(stdout=True, stderr=True))
        return status

    def stop(self) -> None:
        try:
            self.container.remove(force=True)
        except DockerException:
            pass  # already removed, or the engine itself went away
        if self.stdin is not None:
            self.stdin.close()


def remove_dead_runs_containers(client, stopped_run: str | None = None) -> list[str]:
    """Remove the worker containers that runs on this host left behind when they died (kill -9,
    power loss): their orchestrator process is gone; and every one of `stopped_run`. Returns the
    names removed."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": [f"{LABEL}=worker", f"{LABEL}.host={HOST}"]}):
        pid = int(container.labels.get(f"{LABEL}.host-pid", "0") or 0)
        if pid and alive(pid) and container.labels.get(f"{LABEL}.run") != stopped_run:
            continue
        try:
            container.remove(force=True)
            removed.append(container.name)
        except DockerException:
            pass  # removed meanwhile by someone else
    return removed
