"""A known issue's pattern found in a failing cell's model whose own output could not be checked
(the output also reads a node beside it): the cell stays `fail`, and the words saying why travel
with the cell (`pattern_unchecked`), so that the report shows them beside it, not only `run`'s
terminal (issue 41, sweep 5 leftovers 2)."""

from __future__ import annotations

import pandas as pd

from .known_issues import KnownIssue, unchecked_patterns


def with_unchecked_patterns(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> pd.DataFrame:
    """The frame with `pattern_unchecked`: unchecked_patterns' words for each cell it names."""
    said: dict[str, list[str]] = {}
    for cell, why in unchecked_patterns(frame, issues):
        said.setdefault(cell, []).append(why)
    return frame.assign(pattern_unchecked=["; ".join(said[cell]) if cell in said else None for cell in frame["cell_id"]])
