"""A cell's cause in a few words, so that thousands of refusals and errors read as a handful of
groups: an engine's refusal names it first ('IR version 11 (reads up to 9) — onnxruntime 1.17.3:
...'), an exception's message is stripped of what differs from cell to cell (paths, C++ source
locations and signatures)."""

from __future__ import annotations

import re

import pandas as pd

from ..statuses import JUDGED
from .error_text import one_line

SEPARATOR = " — "  # between a refusal's cause and the engine's own words (worker/engines)
LONGEST = 140

_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_SOURCE = re.compile(r"\S+\.(?:cc|cpp|cu|h|hpp):\d+ ")  # "/onnxruntime_src/.../model.cc:179 "
_PATH = re.compile(r"(?<![\w.])/[^\s:'\"]+")


def _without_signature(text: str) -> str:
    """'model.cc:179 onnxruntime::Model::Model(a, b&) const Unsupported ...' → 'Unsupported ...':
    after a source location, everything up to the signature's closing parenthesis goes."""
    while found := _SOURCE.search(text):
        start, at = found.start(), text.find("(", found.end())
        depth, end = 0, at
        for end in range(at, len(text) if at >= 0 else at):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        rest = re.sub(r"^\)( const)?( \[with [^\]]*\])? ?", "", text[end:]) if at >= 0 else text[found.end():]
        text = text[:start] + rest
    return text


def cause(status: str, error, paths: bool = False) -> str:
    """`paths`: kept, where the message is one cell's (or many cells' alike), not a group's."""
    if not isinstance(error, str) or not error.strip():
        return f"{status}, no message"
    text = one_line(error)
    if SEPARATOR in text:  # a refusal: one cause for every input type it names (the types stay in look-at.txt)
        return re.sub(r" with \S+ inputs$", "", text.split(SEPARATOR, 1)[0])
    text = _without_signature(re.sub(r"Load model from \S+ failed: ?", "load failed: ", text))
    text = _ORT_PREFIX.sub("", text) if paths else _PATH.sub("…", _ORT_PREFIX.sub("", text))
    longest = LONGEST * (2 if paths else 1)
    return text if len(text) <= longest else text[:longest - 1] + "…"


def left_out_kind(why: str) -> str:
    """A left-out suite test's reason without its explanation, for counts: 'bfloat16 tensor'."""
    return re.sub(r" \(.*\)$", "", why)


def not_run_reason(cells: pd.DataFrame) -> str | None:
    """Why none of an environment's cells ran, where that is one reason for all of them: every cell
    skipped, or built and not run (TensorRT-RTX without a GPU it supports), for one reason. Else
    None. Said once per environment, not only in each cell's details."""
    if not len(cells) or not cells["status"].isin(("skipped", "built")).all() or cells["error"].nunique() != 1:
        return None
    return one_line(cells["error"].iloc[0])


# What would let each TensorRT product's cells be judged against the reference.
TENSORRT_NEEDS = {"tensorrt-rtx": "a GPU of compute capability 7.5, 8.0, 8.6, 8.9 or 12.x (T4, A100, A10, L4, "
                                  "RTX 20xx-50xx; not the H100)",
                  "tensorrt": "an NVIDIA GPU host with Docker and the NGC TensorRT images"}
PRODUCTS = {"tensorrt-rtx": "TensorRT-RTX", "tensorrt": "full TensorRT"}


def no_tensorrt_compared(frame: pd.DataFrame) -> str | None:
    """One sentence where a run has TensorRT cells and none of them was judged against the
    reference: what each product's cells came to, why none ran, and what would change it. A run
    that built engines must not read as one that checked them. None where any TensorRT cell ran."""
    cells = frame[frame["engine"].isin(PRODUCTS)]
    if cells.empty or cells["status"].isin(JUDGED).any():
        return None
    said, needs = [], []
    for engine, product in PRODUCTS.items():
        mine = cells[cells["engine"] == engine]
        if mine.empty:
            continue
        statuses = mine["status"].value_counts()
        counts = {"built": f"{product} built {len(mine)} cells and ran none",
                  "skipped": f"{product}'s {len(mine)} cells were skipped"}.get(statuses.index[0]) \
            if len(statuses) == 1 else None
        counts = counts or f"{product}'s {len(mine)} cells: " + ", ".join(f"{n} {s}" for s, n in statuses.items())
        reasons = mine.loc[mine["status"].isin(("built", "skipped")), "error"].dropna()
        why = reasons.map(lambda text: one_line(text).split("not run: ", 1)[-1]).value_counts()
        said.append(counts + (f" ({why.index[0]})" if len(why) else ""))
        needs.append(f"{product} needs {TENSORRT_NEEDS[engine]}")
    return f"No TensorRT output was compared with a reference: {'; '.join(said)}. {'; '.join(needs)}."
