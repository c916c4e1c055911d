"""The run a CI job compares with when its reports folder is fresh (an ephemeral runner): a run
folder given by path, or the unpacked artifact of an earlier job that holds one somewhere inside
(`reports/`, `runs/`, the run folder itself). A shard is part of a run, never a baseline."""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from . import PARQUET, read_run_meta
from .swap import settle

DEPTH = 4  # reports/runs/<run id>/results.parquet in an artifact's own folder: deep enough


class NoBaseline(ConfigError):
    """--baseline names no whole run: said before anything runs (exit 2)."""


def find_baseline(path: Path) -> Path:
    """The newest whole run folder at or under `path` (run ids start with a UTC timestamp)."""
    if not path.is_dir():
        raise NoBaseline(path, "", "not a folder (give a run folder or an unpacked artifact that holds one)")
    found = [settle(p.parent) for p in _results(path, DEPTH)]
    whole = [run for run in found if not read_run_meta(run).get("shard")]
    if not whole:
        said = f"only shards ({len(found)}): merge them, and give the merged run" if found else \
            f"no run folder (one with {PARQUET}) in it or {DEPTH} levels below"
        raise NoBaseline(path, "", said)
    return max(whole, key=lambda run: (run.name, str(run)))


def _results(folder: Path, depth: int) -> list[Path]:
    if (folder / PARQUET).is_file():
        return [folder / PARQUET]
    if depth == 0:
        return []
    return [found for child in sorted(folder.iterdir()) if child.is_dir() and not child.name.endswith(".partial")
            for found in _results(child, depth - 1)]
