"""A venv definition resolved to what it installs: every package pinned by `uv pip compile` for the
environment's interpreter, and that interpreter's exact build.

Pinned requirements still pull unpinned transitive dependencies (onnxruntime's protobuf, say), so
the definition alone does not say what a venv holds. The resolution does: it names the venv's
folder, is installed exactly (`uv pip sync`), and its hash is the venv backend's fingerprint.

Resolving asks the package index (uv's HTTP cache keeps that fast); without a network uv resolves
from its own cache (`--offline`), which is what a run here would install. When neither works the
environment's state is unknown: EnvironmentUnavailable, never a silent "nothing changed".
Resolutions are kept for the life of the process, so a run uses one resolution throughout, and
a run asks for all of them at once (resolved_together): each waits about a second on the index.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Iterator

from uv import find_uv_bin

from ..store.hashing import hash_json
from .backend import EnvironmentUnavailable
from .definitions import EnvDef

TIMEOUT_S = 120


@dataclass(frozen=True)
class Resolution:
    lock: str  # requirements.txt syntax, one `name==version` per line
    interpreter: str  # the path uv found for the definition's `python`
    python: str  # that interpreter's sys.version: its exact build
    offline: bool  # resolved from uv's cache: install from it too

    @property
    def key(self) -> str:
        return hash_json([self.python, self.lock])


def resolve_env(envdef: EnvDef) -> Resolution:
    try:
        return _resolve(envdef.requirements, envdef.python or sys.executable)
    except EnvironmentUnavailable as exc:
        raise EnvironmentUnavailable(f"cannot resolve the requirements of {envdef.name}: {exc}") from None


@contextmanager
def resolved_together(envdefs: list[EnvDef]) -> Iterator[None]:
    """The venv definitions' resolutions asked for at once, in threads, while the block does other
    work; at its end they are in this process's cache. One after another, a re-run of the default
    matrix's seven venvs spent most of its seconds waiting on the index."""
    wanted = {(e.requirements, e.python or sys.executable) for e in envdefs if e.backend == "venv"}
    with ThreadPoolExecutor(max(len(wanted), 1), thread_name_prefix="resolve") as pool:
        for requirements, python in wanted:
            pool.submit(_resolve_or_not, requirements, python)
        yield


def _resolve_or_not(requirements: tuple[str, ...], python: str) -> None:
    """A failure is not kept: the environment's own resolve_env asks again and reports it."""
    try:
        _resolve(requirements, python)
    except EnvironmentUnavailable:
        pass


@cache
def _resolve(requirements: tuple[str, ...], python: str) -> Resolution:
    interpreter = _output([find_uv_bin(), "python", "find", python]).strip()
    version = _output([interpreter, "-c", "import sys; print(sys.version)"]).strip()
    compile_ = [find_uv_bin(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
                "--python", interpreter, "-"]
    text = "\n".join(requirements) + "\n"
    try:
        return Resolution(_output(compile_, stdin=text), interpreter, version, offline=False)
    except EnvironmentUnavailable as online:
        try:
            return Resolution(_output([*compile_, "--offline"], stdin=text), interpreter, version, offline=True)
        except EnvironmentUnavailable:
            raise online from None


def _output(command: list[str], stdin: str | None = None) -> str:
    what = " ".join([command[0].rsplit("/", 1)[-1], *command[1:3]])
    try:
        return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
                              check=True).stdout
    except subprocess.CalledProcessError as exc:
        tail = "\n".join((exc.stderr or exc.stdout or "").strip().splitlines()[-6:])
        raise EnvironmentUnavailable(f"{what} failed: {tail}") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentUnavailable(f"{what} gave no answer in {TIMEOUT_S}s") from None
    except OSError as exc:
        raise EnvironmentUnavailable(f"{what} failed: {exc}") from None
