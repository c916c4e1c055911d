"""The `host` backend: an interpreter that is already there is the environment; nothing is
installed. By default the Python running trtmatrix, or the definition's `python` path.

This is how trtmatrix runs where the engine is already installed: a GPU host with PyTorch, or
inside a container someone already has (an NGC TensorRT image: `trtmatrix run` in it with a host
environment, no Docker-in-Docker). The interpreter's engine and Python versions are its
fingerprint, so a changed installation re-runs its cells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

from ..store.hashing import hash_json
from .backend import EnvironmentUnavailable
from .definitions import EnvDef
from .gpus import with_host_gpus
from .venv import ProcessWorker, start_process

# The engine's module (EnvDef.module) and the interpreter's facts.
_FACTS = ("import json, platform, {0}; "
          "print(json.dumps({{'engine_version': {0}.__version__, 'python_version': platform.python_version()}}))")
FACTS_TIMEOUT_S = 300  # importing torch on a cold disk takes seconds, not minutes


def host_python(envdef: EnvDef) -> str:
    return envdef.python or sys.executable


@cache
def interpreter_facts(python: str, engine: str) -> dict:
    """{engine_version, python_version} as the interpreter sees them; EnvironmentUnavailable with
    the reason when it does not run or cannot import the engine."""
    try:
        done = subprocess.run([python, "-c", _FACTS.format(engine)], capture_output=True, text=True, timeout=FACTS_TIMEOUT_S,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    except OSError as exc:
        raise EnvironmentUnavailable(f"cannot run the interpreter {python}: {exc.strerror}") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentUnavailable(f"{python} did not import {engine} within {FACTS_TIMEOUT_S} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentUnavailable(f"{engine} does not import in {python}: {last}")
    return json.loads(done.stdout.splitlines()[-1])


def host_fingerprint(envdef: EnvDef) -> str:
    python = host_python(envdef)
    return with_host_gpus(envdef, hash_json([os.path.realpath(python), interpreter_facts(python, envdef.module)]))


class HostBackend:
    def __init__(self, envdef: EnvDef, worker_home: Path):
        self.envdef = envdef
        self.worker_home = worker_home
        self.python = host_python(envdef)

    def prepare(self) -> None:
        interpreter_facts(self.python, self.envdef.module)

    def fingerprint(self) -> str:
        return host_fingerprint(self.envdef)

    def facts(self) -> dict:
        return {"image": None, "image_digest": None}

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> ProcessWorker:
        return start_process(self.python, self.worker_home, args, log_path, gpu, self.envdef)
