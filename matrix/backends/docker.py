"""The `docker` backend: one container per environment runs all of that environment's cells.

The worker is not installed in the image: its staged copy is mounted read-only, as are the
case artifacts and the job file; only the results folder is writable. Paths inside are the same
as on the host, so cell specs need no translation. No network, the host user's uid:gid (result
files are not root-owned), one GPU by device request where the environment needs one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from docker.errors import DockerException
from docker.types import DeviceRequest

from ..envdefs import EnvDef
from ..images import docker_client, ensure_image, find_image, image_digest, image_ref
from . import EnvironmentUnavailable

LABEL = "trtmatrix"


class DockerBackend:
    def __init__(self, envdef: EnvDef, cache_dir: Path, worker_home: Path):
        self.envdef = envdef
        self.cache_dir = cache_dir.resolve()
        self.worker_home = worker_home.resolve()
        self.client = docker_client()
        self.image = None

    def prepare(self) -> None:
        self.image = ensure_image(self.client, self.envdef)

    def fingerprint(self) -> str:
        """The image id: a re-pulled tag or a rebuilt image re-runs its cells."""
        image = self.image or find_image(self.client, image_ref(self.envdef))
        return image.id if image else "absent"

    def facts(self) -> dict:
        return {"image": image_ref(self.envdef), "image_digest": image_digest(self.image)}

    def _mounts(self) -> dict:
        read_only = [self.worker_home, self.cache_dir / "artifacts", self.cache_dir / "jobs"]
        writable = [self.cache_dir / "results", self.cache_dir / "timing"]
        for path in read_only + writable:
            path.mkdir(parents=True, exist_ok=True)
        return {**{str(p): {"bind": str(p), "mode": "ro"} for p in read_only},
                **{str(p): {"bind": str(p), "mode": "rw"} for p in writable}}

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> ContainerWorker:
        python = self.envdef.python or "python3"
        try:
            container = self.client.containers.run(
                self.image.id, [python, "-m", "trtmatrix_worker", *args], detach=True,
                user=f"{os.getuid()}:{os.getgid()}", network_mode="none", volumes=self._mounts(),
                environment={"PYTHONPATH": str(self.worker_home), "PYTHONNOUSERSITE": "1",
                             "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"},
                working_dir="/tmp",
                labels={LABEL: "worker", f"{LABEL}.env": self.envdef.name, f"{LABEL}.host-pid": str(os.getpid())},
                device_requests=[DeviceRequest(device_ids=[str(gpu)], capabilities=[["gpu"]])]
                if gpu is not None else None)
        except DockerException as exc:
            raise EnvironmentUnavailable(f"container for {self.envdef.name} did not start: {exc}") from None
        return ContainerWorker(container, log_path)


class ContainerWorker:
    def __init__(self, container, log_path: Path):
        self.container = container
        self.log_path = log_path

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
