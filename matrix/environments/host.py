"""The `host` backend: an interpreter that is already there is the environment; nothing is
installed. By default the Python running trtmatrix, or the definition's `python` path.

This is how trtmatrix runs where the engine is already installed: a GPU host with PyTorch, or
inside a container someone already has (an NGC TensorRT image: `trtmatrix run` in it with a host
environment, no Docker-in-Docker). The interpreter's engine and Python versions are its
fingerprint, so a changed installation re-runs its cells. They are learnt by importing the engine
once per installation (cache folder: interpreters/), not before every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

from ..store.hashing import hash_json
from .backend import EnvironmentUnavailable, SetupFailed
from .definitions import EnvDef
from .gpus import with_host_gpus
from .venv import ProcessWorker, start_process

# The engine's module (EnvDef.module) and the interpreter's facts.
_FACTS = ("import json, platform, {0}; "
          "print(json.dumps({{'engine_version': {0}.__version__, 'python_version': platform.python_version()}}))")
# Where the engine would be imported from, without importing it (milliseconds, not torch's seconds).
_SIGNATURE = ("import importlib.util, json, os, sys; spec = importlib.util.find_spec({0!r}); "
              "origin = spec and spec.origin; stat = origin and os.stat(origin); "
              "print(json.dumps([sys.version, origin, stat and [stat.st_mtime_ns, stat.st_size, stat.st_ino]]))")
FACTS_TIMEOUT_S = 300  # importing torch on a cold disk takes seconds, not minutes
START_TIMEOUT_S = 30  # a Python that prints its version and a path takes well under a second
INTERPRETERS = "interpreters"  # in the cache folder: facts of interpreters already checked


def host_python(envdef: EnvDef) -> str:
    return envdef.python or sys.executable


def _python(python: str, code: str, what: str, timeout_s: float = FACTS_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    except FileNotFoundError:  # the definition names what is not there: its fault, not the host's
        raise SetupFailed(f"{python}: not found") from None
    except OSError as exc:
        raise SetupFailed(f"{python}: cannot be run ({exc.strerror})") from None
    except subprocess.TimeoutExpired:  # it is there and hangs: the definition names no working Python
        raise SetupFailed(f"{python} did not {what} within {timeout_s:g} s: not a working Python interpreter") from None


def _imported_facts(python: str, engine: str) -> dict:
    done = _python(python, _FACTS.format(engine), f"import {engine}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentUnavailable(f"{engine} does not import in {python}: {last}")
    return json.loads(done.stdout.splitlines()[-1])


def _installation(python: str, engine: str) -> list | None:
    """The interpreter and the file its engine would be imported from (path, mtime, size, inode):
    a reinstall or upgrade changes it. None where the engine is not there (the import check says
    why); SetupFailed where `python` is no working Python."""
    done = _python(python, _SIGNATURE.format(engine), "start", START_TIMEOUT_S)
    try:
        found = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else None
    except (IndexError, ValueError):
        found = None
    if found is None:  # the standard library alone did not run: no Python at all, or a broken one
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SetupFailed(f"{python}: not a working Python interpreter (exit status {done.returncode}: {said})")
    return [os.path.realpath(python), *found] if found[1] else None


@cache
def interpreter_facts(python: str, engine: str, cache_dir: Path | None = None) -> dict:
    """{engine_version, python_version} as the interpreter sees them; SetupFailed when it is not
    there or no working Python, EnvironmentUnavailable when it cannot import the engine (another
    host may have it). Importing the engine is the check
    (torch: seconds on a GPU host, paid before every run's first cell); with `cache_dir` its answer
    is kept under the installation it checked and reused while that is unchanged."""
    installation = _installation(python, engine)  # first: an interpreter that hangs is found in seconds
    kept = cache_dir / INTERPRETERS / f"{hash_json(installation)[:24]}.json" if installation and cache_dir else None
    if kept and kept.is_file():
        return json.loads(kept.read_text())
    facts = _imported_facts(python, engine)
    if kept:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(facts))
        partial.replace(kept)
    return facts


def definition_facts(envdef: EnvDef, cache_dir: Path | None = None) -> dict:
    """interpreter_facts of the definition's interpreter; a `python` that is no working Python is
    the definition's error, named with its file."""
    try:
        return interpreter_facts(host_python(envdef), envdef.module, cache_dir)
    except SetupFailed as exc:
        if not envdef.python:
            raise
        raise SetupFailed(f"{envdef.name}: {exc}: fix `python` in {envdef.path}") from None


def host_fingerprint(envdef: EnvDef, cache_dir: Path | None = None) -> str:
    facts = definition_facts(envdef, cache_dir)
    return with_host_gpus(envdef, hash_json([os.path.realpath(host_python(envdef)), facts]))


class HostBackend:
    def __init__(self, envdef: EnvDef, cache_dir: Path, worker_home: Path):
        self.envdef = envdef
        self.cache_dir = cache_dir
        self.worker_home = worker_home
        self.python = host_python(envdef)

    def prepare(self) -> None:
        definition_facts(self.envdef, self.cache_dir)

    def fingerprint(self) -> str:
        return host_fingerprint(self.envdef, self.cache_dir)

    def facts(self) -> dict:
        return {"image": None, "image_digest": None}

    def start(self, args: list[str], log_path: Path, gpu: int | None) -> ProcessWorker:
        return start_process(self.python, self.worker_home, args, log_path, gpu, self.envdef, isolated=False)
