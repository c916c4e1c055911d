"""A known issue's pattern found in a failing cell's model whose own output could not be checked
(the output also reads a node beside it): the cell stays `fail`, and the words saying why travel
with the cell (`pattern_unchecked`), so that the report shows them beside it, not only `run`'s
terminal (issue 41, sweep 5 leftovers 2)."""

from __future__ import annotations

import pandas as pd

from .known_issues import KnownIssue, unchecked_patterns


def with_unchecked_patterns(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> pd.DataFrame:
    """The frame with `pattern_unchecked`: unchecked_patterns' line for each cell it names, without
    the cell id it starts with (the longest id a line starts with is its cell's)."""
    ids = sorted(set(frame["cell_id"]), key=len, reverse=True)
    said: dict[str, list[str]] = {}
    for line in unchecked_patterns(frame, issues):
        cell = next((cell for cell in ids if line.startswith(f"{cell}: ")), None)
        if cell is not None:
            said.setdefault(cell, []).append(line.removeprefix(f"{cell}: "))
    return frame.assign(pattern_unchecked=["; ".join(said[cell]) if cell in said else None for cell in frame["cell_id"]])
