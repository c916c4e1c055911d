"""A venv definition resolved to what it installs: every package pinned by `uv pip compile` for the
environment's interpreter, and that interpreter's exact build.

Pinned requirements still pull unpinned transitive dependencies (onnxruntime's protobuf, say), so
the definition alone does not say what a venv holds. The resolution does: it names the venv's
folder, is installed exactly (`uv pip sync`), and its hash is the venv backend's fingerprint.

Resolving asks the package index (uv's HTTP cache keeps that fast); without a network uv resolves
from its own cache (`--offline`), which is what a run here would install. When neither works the
environment's state is unknown: EnvironmentUnavailable, never a silent "nothing changed".
Resolutions are kept for the life of the process, so a run uses one resolution throughout. A run
asks for all of them at once, and keeps each in the cache for ten minutes (resolved_together):
each asks the index for about a second, which an unchanged re-run of the default matrix's seven
venvs paid one after another. A release newer than the kept resolution is seen by the first run
after its ten minutes (a nightly run resolves anew).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Iterator

from uv import find_uv_bin

from ..store.cache import resolutions_folder
from ..store.hashing import hash_json
from .backend import EnvironmentUnavailable, SetupFailed
from .definitions import EnvDef

TIMEOUT_S = 120
UNSATISFIABLE = "requirements are unsatisfiable"  # uv's words once the index has answered no
KEPT_S = 600  # how long a resolution from the index stands for the next runs
# (requirements, python) → a resolution read from the cache; _resolve's own cache holds the rest.
_KEPT: dict[tuple[tuple[str, ...], str], Resolution] = {}


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
    wanted = (envdef.requirements, envdef.python or sys.executable)
    if wanted in _KEPT:
        return _KEPT[wanted]
    try:
        return _resolve(*wanted)
    except EnvironmentUnavailable as exc:
        if UNSATISFIABLE in str(exc):  # the index answered: the definition asks for what no release is
            why = next((line.split("Because ", 1)[1].split(" and you require")[0].split(",")[0]
                        for line in str(exc).splitlines() if "Because " in line), str(exc))
            where = f" in {envdef.path}" if envdef.path else ""
            raise SetupFailed(f"{envdef.name}: no release satisfies its requirements ({why}): fix `requirements`"
                              f"{where}") from None
        raise EnvironmentUnavailable(f"cannot resolve the requirements of {envdef.name}: {exc}") from None


@contextmanager
def resolved_together(envdefs: list[EnvDef], cache_dir: Path, keep: bool = True) -> Iterator[None]:
    """The venv definitions' resolutions found at once, in threads, while the block does other
    work: each from the cache where the index was asked less than KEPT_S ago, else asked now (and,
    with `keep`, kept in the cache); at the block's end resolve_env has them all."""
    wanted = {(e.requirements, e.python or sys.executable) for e in envdefs if e.backend == "venv"}
    folder = resolutions_folder(cache_dir)
    with ThreadPoolExecutor(max(len(wanted), 1), thread_name_prefix="resolve") as pool:
        for requirements, python in wanted:
            pool.submit(_kept_or_resolved, (requirements, python), folder, keep)
        yield


def _kept_or_resolved(wanted: tuple[tuple[str, ...], str], folder: Path, keep: bool) -> None:
    if wanted in _KEPT:
        return
    path = folder / f"{hash_json([list(wanted[0]), wanted[1]])[:24]}.json"
    try:
        kept = json.loads(path.read_text())
        if 0 <= time.time() - kept["at"] < KEPT_S:
            _KEPT[wanted] = Resolution(**kept["resolution"])
            return
    except (OSError, ValueError, KeyError, TypeError):  # none kept, or of another shape
        pass
    try:
        resolution = _resolve(*wanted)
    except EnvironmentUnavailable:  # not kept: the environment's own resolve_env asks again and says why
        return
    if not keep or resolution.offline:  # uv's cache without the index stands for this run only
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"at": time.time(), "resolution": dataclasses.asdict(resolution)}))
        tmp.replace(path)
    except OSError:  # a read-only cache: the index is asked again next run
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
