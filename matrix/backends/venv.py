"""The `venv` backend: uv creates one virtualenv per environment definition and reuses it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from uv import find_uv_bin

from ..envdefs import EnvDef
from . import EnvironmentUnavailable

DONE_MARK = ".trtmatrix-complete"
STOP_GRACE_S = 5


class VenvBackend:
    def __init__(self, envdef: EnvDef, cache_dir: Path, worker_home: Path):
        self.envdef = envdef
        self.worker_home = worker_home
        self.path = cache_dir / "venvs" / f"{envdef.name}-{envdef.definition_hash()[:12]}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def _uv(self, *args: str) -> None:
        try:
            subprocess.run([find_uv_bin(), *args], check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as exc:
            tail = "\n".join((exc.stderr or exc.stdout or "").strip().splitlines()[-6:])
            raise EnvironmentUnavailable(f"uv {args[0]} {args[1]} failed for {self.envdef.name}: {tail}") from None

    def prepare(self) -> None:
        if (self.path / DONE_MARK).is_file():
            return
        self._uv("venv", "--quiet", "--clear", "--python", self.envdef.python or sys.executable, str(self.path))
        self._uv("pip", "install", "--quiet", "--python", str(self.python), *self.envdef.requirements)
        (self.path / DONE_MARK).write_text("\n".join(self.envdef.requirements) + "\n")

    def fingerprint(self) -> str:
        return ""  # the pinned requirements are in the definition hash already

    def facts(self) -> dict:
        return {"image": None, "image_digest": None}

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> ProcessWorker:
        env = {**os.environ, "PYTHONPATH": str(self.worker_home), "PYTHONNOUSERSITE": "1"}
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        with log_path.open("w") as log:
            process = subprocess.Popen([str(self.python), "-m", "trtmatrix_worker", *args], env=env,
                                       stdout=subprocess.PIPE, stderr=log, text=True)
        return ProcessWorker(process)


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
