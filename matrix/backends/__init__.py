"""Backends give an environment a Python that can run the worker: a virtualenv or a container."""

from __future__ import annotations

from pathlib import Path

from ..envdefs import EnvDef


class EnvironmentUnavailable(Exception):
    """This environment cannot run on this host; its cells become 'skipped' with this reason."""


def open_backend(envdef: EnvDef, cache_dir: Path, worker_home: Path):
    if envdef.backend == "venv":
        from .venv import VenvBackend

        return VenvBackend(envdef, cache_dir, worker_home)
    raise EnvironmentUnavailable(f"the {envdef.backend!r} backend is not available in this version of trtmatrix")
