"""Which folders are trtmatrix's caches. `cache --free` removes whole parts of a cache (`results/`,
`venvs/`, …); a `cache_dir` that is some other folder (the project's own `.`, or `~`) must never
lose the user's own `results/` or `venvs/` to it.

A cache trtmatrix makes carries a CACHEDIR.TAG (the cache directory tagging convention, which
backup tools also read). A cache an earlier trtmatrix made has none: it is recognised by its
layout, every entry one of trtmatrix's parts and a `locks/` of trtmatrix's lock files alone (every
run takes some), and tagged at the end of the next run.
"""

from __future__ import annotations

from pathlib import Path

from . import write_text_atomically
from .locks import is_lock_file

TAG = "CACHEDIR.TAG"
SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"  # the convention's, first in the file
TAG_TEXT = (f"{SIGNATURE}\n# This file is a cache directory tag created by trtmatrix: this folder is its cache,\n"
            "# whose parts `trtmatrix cache --free` removes. See https://bford.info/cachedir/\n")
# Every entry trtmatrix makes at a cache's top: store/cache.py and locks.py, the environments'
# venvs/, worker/, interpreters/ and pycache/, the investigations', the suites'.
OWN_ENTRIES = {TAG, "artifacts", "case-index", "digests", "faults", "held", "interpreters", "investigations", "jobs", "locks",
               "pycache", "resolutions", "results", "speed-tests", "suites", "timing", "venvs", "worker"}


def _tagged(cache: Path) -> bool:
    try:
        with open(cache / TAG, encoding="utf-8", errors="replace") as tag:
            text = tag.read(4096)
    except OSError:
        return False
    return text.startswith(SIGNATURE) and "trtmatrix" in text


def _strangers(cache: Path) -> list[str]:
    """What in `cache` is not laid out as trtmatrix's (nothing for an empty folder)."""
    try:
        names = sorted(path.name for path in cache.iterdir())
    except OSError:
        return []
    if not names:
        return []
    foreign = [name for name in names if name not in OWN_ENTRIES]
    locks = cache / "locks"
    if not foreign and not (locks.is_dir() and all(is_lock_file(path) for path in locks.iterdir())):
        foreign.append("trtmatrix's part names, but no locks/ of its lock files")
    return foreign


def tag_cache(cache: Path) -> None:
    """Tag a cache folder that is empty or laid out as trtmatrix's (an earlier trtmatrix's, or the
    one a run has just made); leave any other folder untagged (a run may still keep its parts there)."""
    if _tagged(cache) or not cache.is_dir() or _strangers(cache):
        return  # a file is refused where the run checks its folders
    try:
        write_text_atomically(cache / TAG, TAG_TEXT)
    except OSError:  # an unwritable place: said where the run first writes there
        return


def not_a_cache(cache: Path) -> str | None:
    """Why `cache --free` must not remove parts of `cache`, or None for trtmatrix's cache."""
    if not cache.is_dir() or _tagged(cache) or not (strangers := _strangers(cache)):
        return None
    shown = ", ".join(strangers[:3]) + (", …" if len(strangers) > 3 else "")
    return (f"{cache} is not a cache trtmatrix made (no {TAG}; it holds {shown}): nothing freed; give "
            "run.cache_dir a folder of its own, or remove what you mean to by hand")
