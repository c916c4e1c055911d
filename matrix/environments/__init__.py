"""Environments: where a cell's engine runs — definitions (images/*.toml), a uv virtualenv, a
container (docker SDK) or an interpreter already on the host, with the worker staged beside them
and the host's GPUs.

`open_backend` picks the backend of a definition; each is imported lazily, so the venv and host
paths need no Docker SDK connection.
"""

from __future__ import annotations

from pathlib import Path

from .backend import Backend, EnvironmentUnavailable, SetupFailed
from .definitions import EnvDef


def open_backend(envdef: EnvDef, cache_dir: Path, worker_home: Path, run_id: str = "") -> Backend:
    """`run_id` names and labels what the backend starts (containers), so a later run can tell
    what a dead run left behind."""
    if envdef.backend == "docker":
        from .docker import DockerBackend

        return DockerBackend(envdef, cache_dir, worker_home, run_id)
    if envdef.backend == "host":
        from .host import HostBackend

        return HostBackend(envdef, cache_dir, worker_home)
    from .venv import VenvBackend

    return VenvBackend(envdef, cache_dir, worker_home)


def planned_fingerprints(envdefs: list[EnvDef], cache_dir: Path) -> dict[str, str | None]:
    """What each environment's fingerprint would be in a run, found without changing anything
    (no venv made, no image built or pulled, no worker staged): a venv's resolution (the one a run
    kept in the cache lately, else by uv, which may refresh its own cache; nothing installed or kept), a docker environment's image id or "absent" — looked up in Docker, read
    only — each with the host's GPUs for GPU environments; None where that cannot be known (the
    requirements do not resolve, no Docker engine answers)."""
    from .host import host_fingerprint
    from .resolve import resolved_together
    from .venv import venv_fingerprint

    found: dict[str, str | None] = {}
    with resolved_together(envdefs, cache_dir, keep=False):  # at once, then each from the process's cache
        pass
    for envdef in (e for e in envdefs if e.backend != "docker"):
        try:
            found[envdef.name] = (host_fingerprint if envdef.backend == "host" else venv_fingerprint)(envdef)
        except (EnvironmentUnavailable, SetupFailed):  # said by the run that tries to make it
            found[envdef.name] = None
    docker = [e for e in envdefs if e.backend == "docker"]
    if docker:
        from .docker import docker_fingerprint
        from .images import docker_client

        try:
            client = docker_client()
        except EnvironmentUnavailable:
            client = None
        found.update({e.name: docker_fingerprint(client, e) if client else None for e in docker})
    return found


def remove_left_behind(envdefs: list[EnvDef], stopped_run: str | None = None) -> list[str]:
    """The containers that dead runs on this host left behind (kill -9, a crash), removed, and with
    `stopped_run` every container of that run (stopped by Ctrl-C: none of them is wanted, even
    where the process that started it is not quite gone yet); nothing to do without docker
    environments or a Docker engine. Returns their names. Worker processes of dead runs (venv and
    host environments) are killed first (venv.remove_dead_workers)."""
    from .venv import remove_dead_workers

    remove_dead_workers()
    if not any(e.backend == "docker" for e in envdefs):
        return []
    from .docker import remove_dead_runs_containers
    from .images import docker_client

    try:
        client = docker_client()
    except EnvironmentUnavailable:
        return []
    return remove_dead_runs_containers(client, stopped_run)
