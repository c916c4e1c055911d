"""The cache folder: where it is (one per user unless the matrix file names one), its layout (where
prepared artifacts, job files, cell results and engine caches — TensorRT's timing cache,
TensorRT-RTX's runtime cache — live), and which stored results may be reused.

Results and engine caches are kept per environment, so a container is given only its own
folders to write to. Every entry is named by its content and written whole (a temporary name,
then a rename) or under a lock (store/locks.py), so any number of folders and runs share one cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from ..worker.files import DIGESTS, RESULT, file_digest
from .hashing import hash_json
from .locks import cache_lock, held_if_free

# A crash or timeout may not happen again: those results are not reused.
NOT_REUSED = {"crash", "timeout"}
# Written by the cell's own process once its engine loaded (worker/probe.py describe); a result
# without it came from the infrastructure around the cell.
ENGINE_FIELD = "engine_version"


# Overrides the user's cache folder where the matrix file names none (a CI runner's mounted volume,
# a test session's own folder).
CACHE_VARIABLE = "TRTMATRIX_CACHE_DIR"


def user_cache() -> Path:
    """One cache per user, whichever folder a run starts from: identical cells of the same model in
    two folders are one stored result. `$TRTMATRIX_CACHE_DIR`, else the XDG base directory rule
    (`$XDG_CACHE_HOME/trtmatrix`, a relative `XDG_CACHE_HOME` ignored as the rule says, else
    `~/.cache/trtmatrix`)."""
    if chosen := os.environ.get(CACHE_VARIABLE):
        return Path(chosen).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "trtmatrix"


def user_cache_origin() -> str:
    """Where user_cache() took its folder from, for a message about it."""
    if os.environ.get(CACHE_VARIABLE):
        return f"${CACHE_VARIABLE}"
    return "$XDG_CACHE_HOME/trtmatrix" if os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")) else "~/.cache/trtmatrix"


def cache_folder(root: Path, cache_dir: str | None) -> Path:
    """The matrix file's `[run] cache_dir` (relative to the file's folder), else the user's cache."""
    return (root / cache_dir).resolve() if cache_dir else user_cache()


def artifacts_folder(cache_dir: Path) -> Path:
    return cache_dir / "artifacts"


# The lock held while an artifacts folder is made (run.py): this, then the folder's name.
ARTIFACT_LOCK = "artifact-"


def remove_dead_artifacts(cache_dir: Path) -> list[str]:
    """The half-made `<case>-<key>.tmp` folders of prepares whose process died (kill -9 of the run
    while a case file's build ran), removed under their lock: a live prepare holds it while it
    writes there. The next prepare of that case would remove one, but a case that stays prepared
    is never prepared again. Returns the folders' names."""
    removed = []
    for partial in sorted(artifacts_folder(cache_dir).glob("*.tmp")):
        with held_if_free(cache_lock(cache_dir, ARTIFACT_LOCK + partial.name.removesuffix(".tmp"))) as dead:
            if dead:  # else being made now
                shutil.rmtree(partial, ignore_errors=True)
                removed.append(partial.name)
    return removed


def remove_artifact(cache_dir: Path, folder: Path) -> None:
    """An artifacts folder and what the cache remembers of it: its files' digests, the fault patterns
    found in its models, its lock (a trial's, judged and done with: issue 41, sweep 17 K13)."""
    shutil.rmtree(folder, ignore_errors=True)
    for memo in [*(cache_dir / "faults").glob(f"{folder.name}.*"), *(cache_dir / "digests").glob(f"{folder.name}.*")]:
        memo.unlink(missing_ok=True)
    Path(cache_lock(cache_dir, ARTIFACT_LOCK + folder.name).lock_file).unlink(missing_ok=True)


def case_index(cache_dir: Path) -> Path:
    """What each case file declared, by the file's digest (sources/case_files.indexed_cases)."""
    return cache_dir / "case-index"


def digest_memo(cache_dir: Path, artifacts: Path) -> Path:
    """Where the digests of an artifact's files are remembered (hashing.remembered_digests)."""
    return cache_dir / "digests" / f"{artifacts.name}.json"


def faults_memo(cache_dir: Path, model: Path, key: str) -> Path:
    """Where the fault patterns found in an artifact's model (or FP16 copy) are remembered, for the
    registry's patterns and settings `key` names: finding them loads the whole model."""
    return cache_dir / "faults" / f"{model.parent.name}.{model.name}.{key[:16]}.json"


def speed_tests(cache_dir: Path) -> Path:
    """Where the report's U tests of two cells' timed inferences are remembered, by their samples."""
    return cache_dir / "speed-tests"


def resolutions_folder(cache_dir: Path) -> Path:
    """Venv resolutions asked of the package index lately (environments/resolve.py)."""
    return cache_dir / "resolutions"


def jobs_folder(cache_dir: Path) -> Path:
    return cache_dir / "jobs"


def results_folder(cache_dir: Path, env: str) -> Path:
    """One per environment, so a container gets only its own mounted writable."""
    return cache_dir / "results" / env


def result_dir(cache_dir: Path, env: str, result_key: str) -> Path:
    return results_folder(cache_dir, env) / result_key[:24]


def result_key(content_key: str, env_fingerprint: str, artifacts: dict) -> str:
    """The cell's content key, plus what is known only at run time: the image id, and the digests
    of the artifacts it runs (prepared again under one key, as when a file a case's code read has
    changed, they are other artifacts: prepare/files_read.py)."""
    return hash_json([content_key, env_fingerprint, artifacts])


def stored_result(directory: Path) -> dict | None:
    """A finished result that may be reused, or None. Only what the engine produced for the cell is
    reused: outputs (pass/fail), an exception the engine raised inside the cell (`error`), a profile
    it cannot run (`skipped`). A result without the engine's version is infrastructure — the
    supervisor's "exited without a result", an engine that did not even import (a broken venv or
    image) — and, like a crash or a timeout, is retried by the next run, never replayed."""
    try:
        result = json.loads((directory / RESULT).read_text())
    except (OSError, ValueError):
        return None
    reusable = result.get("status") not in NOT_REUSED and result.get(ENGINE_FIELD)
    if reusable and (problem := changed_files(directory, result)):
        print(f"warning: {problem}; its cell runs again", file=sys.stderr, flush=True)
        return None
    return result if reusable else None


def changed_files(directory: Path, result: dict) -> str | None:
    """Why the arrays a cell's result stands for are not those its cell wrote, or None: a result
    that ran ("ok") names them with their digests (worker/cell.py save_runs)."""
    if result.get("status") != "ok":
        return None
    digests = result.get(DIGESTS)
    if not isinstance(digests, dict) or not digests:
        return f"{directory / RESULT}: names no digests of its outputs, not what trtmatrix writes"
    for name, digest in digests.items():
        path = directory / str(name)
        try:
            if file_digest(path) != digest:
                return f"{path}: not the file its cell wrote (its digest differs)"
        except OSError as exc:
            return f"{path}: cannot be read ({exc.strerror})"
    return None


def env_log(cache_dir: Path, env: str) -> Path:
    return jobs_folder(cache_dir) / f"{env}.log"


def timing_folder(cache_dir: Path, env: str) -> Path:
    """One per environment, like results_folder."""
    return cache_dir / "timing" / env


def shared_engines(cache_dir: Path, env: str, run_id: str) -> Path:
    """TensorRT engines one run builds once for several rows of a case (one model, a profile
    spanning their shapes), in the environment's writable folder; removed when its cells are done."""
    return timing_folder(cache_dir, env) / "engines" / run_id


def engine_caches(cache_dir: Path, env: str, env_fingerprint: str, gpu_name: str | None) -> tuple[Path, Path]:
    """(TensorRT's timing cache, TensorRT-RTX's runtime cache). Tactic timings and the kernels
    TensorRT-RTX compiles when an engine first runs hold only for the same build of the engine on the
    same GPU model: one pair per image and GPU model, kept across runs."""
    directory = timing_folder(cache_dir, env)
    directory.mkdir(parents=True, exist_ok=True)
    gpu = re.sub(r"[^A-Za-z0-9_.-]+", "-", gpu_name or "no-gpu")
    stem = f"{env_fingerprint.removeprefix('sha256:')[:12] or 'local'}-{gpu}"
    return directory / f"{stem}.timing", directory / f"{stem}.rtxcache"
