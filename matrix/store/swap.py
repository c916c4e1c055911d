"""A re-judging (`trtmatrix report`) replaces several files of a run folder: its tables, run.json,
report.html with report-details/, look-at.txt and the summaries. Each is atomic alone, but a kill
between two (kill -9, the OOM killer, a CI job's timeout) left tables of one judgement and a report
of another (issue 41, sweep 6 #14). So the new files are written into a staging folder inside the
run folder; a marker beside it says the staging is complete; only then is each renamed into place.
Whoever finds the run next (store.find_run, list_runs, find_baseline) settles a swap a kill cut
off: finished where the marker is there, the staging removed where it is not; one line says which.
"""

from __future__ import annotations

import errno
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import Timeout

from .locks import rejudge_lock, remove_dead_note

STAGED, COMPLETE = ".rejudging.staged", ".rejudging.complete"


@contextmanager
def staged_swap(run_dir: Path) -> Iterator[Path]:
    """A fresh staging folder for a re-judging's files, swapped in as a whole when the block ends,
    removed when it raises. The caller holds the run's rejudge_lock."""
    _settle(run_dir)
    staging = run_dir / STAGED
    staging.mkdir()
    try:
        yield staging
        for entry in staging.iterdir():  # checked before anything is swapped: refused, the old run stays whole
            refuse_other_kind(run_dir / entry.name, entry.is_dir())
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    (run_dir / COMPLETE).touch()
    _swap_in(run_dir)


def refuse_other_kind(target: Path, folder: bool) -> None:
    """Something of another kind under `target`'s name (a file or a link where trtmatrix writes a
    folder, a folder where it writes a file) is named and left as it is."""
    if folder and (target.is_symlink() or (target.exists() and not target.is_dir())):
        raise NotADirectoryError(errno.ENOTDIR, f"not a folder: the run's {target.name}/ goes there; move it away",
                                 str(target))
    if not folder and target.is_dir() and not target.is_symlink():
        raise IsADirectoryError(errno.EISDIR, f"a folder: the run's file {target.name} goes there; move it away",
                                str(target))


def _swap_in(run_dir: Path) -> None:
    """Each staged file and folder over the old one; again after a kill, which left the moved ones
    moved. The marker goes last: while it is there, the swap is not done."""
    staging = run_dir / STAGED
    for entry in sorted(staging.iterdir()) if staging.is_dir() else []:
        target = run_dir / entry.name
        if entry.is_dir() and target.is_dir():
            shutil.rmtree(target)
        entry.replace(target)
    shutil.rmtree(staging, ignore_errors=True)
    (run_dir / COMPLETE).unlink(missing_ok=True)


def _settle(run_dir: Path) -> None:
    if (run_dir / COMPLETE).exists():
        _swap_in(run_dir)
        said = "cut off while its files were swapped in: finished, every file of the run is of that re-judging"
    elif (run_dir / STAGED).exists():
        shutil.rmtree(run_dir / STAGED)
        said = "cut off before its files were all written: rolled back, every file of the run is as before it"
    else:
        return
    print(f"note: run {run_dir.name}: a re-judging (trtmatrix report) was {said}", file=sys.stderr, flush=True)


def settle(run_dir: Path) -> Path:
    """`run_dir`, a re-judging that a kill cut off finished or rolled back, and the note its holder
    left beside the run's lock removed (sweep 8 A1); one that is at work (it holds the run's lock)
    is its own to finish."""
    remove_dead_note(rejudge_lock(run_dir))
    if (run_dir / STAGED).exists() or (run_dir / COMPLETE).exists():
        lock = rejudge_lock(run_dir)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return run_dir
        except OSError as exc:  # a read-only copy of a run folder (an unpacked CI artifact): read as it is
            print(f"warning: run {run_dir.name}: a re-judging (trtmatrix report) was cut off here and cannot be "
                  f"settled ({exc.strerror or exc}): its files may be of two judgements; `trtmatrix report` it "
                  "where it can be written", file=sys.stderr, flush=True)
            return run_dir
        try:
            _settle(run_dir)
        finally:
            lock.release()
    return run_dir
