"""Executors decide where an environment's cells run: `local` (threads on this host, GPU leases)
or `ray` (one Ray task per environment, or per GPU model of it, on the nodes of a cluster). Every
executor runs the same unit (unit.py: the environment set up, its cells through the worker), and
the orchestrator (matrix.run) keeps plan, prepare, compare, store and report in one place
whatever the executor.
"""

from __future__ import annotations

from ..config import RunSettings
from .local import LocalExecutor


def open_executor(settings: RunSettings, ray_address: str | None = None):
    """The executor a run asks for: `ray_address` (--ray) or `[run] executor = "ray"` → Ray
    (ImportError with the install hint when Ray is missing), else this host."""
    if ray_address or settings.executor == "ray":
        from .ray_cluster import RayExecutor

        return RayExecutor(ray_address or settings.ray_address)
    return LocalExecutor(settings.jobs)
