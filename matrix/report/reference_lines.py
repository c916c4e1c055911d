"""What a run says once about its references: cases judged against the referee's float32 output
(no float64 evaluation of some op), cases whose expected file alone makes cells fail, and cases not
judged at all (their reference disputed, or none could be made), each with what to do. The terminal's end, the report's header and summary say it."""

from __future__ import annotations

import pandas as pd

from ..statuses import EXPECTED_CAUSE
from ..statuses import GOOD, UNJUDGED

NOT_CHECKED = "not checked (the referee refuses the model"  # reference/__init__.py's words (report sits above it)
TO_DO = "give the case `expected` outputs (docs/judging.md)"
# A case file takes no `expected` outputs; its ONNX export, made an ONNX-file case, does.
CASE_FILE_TO_DO = ("a case file takes no `expected` outputs: judge its ONNX export (model.onnx in <cache>/artifacts/"
                   "<the cell's artifact>/) as an ONNX-file case with `expected` outputs (docs/judging.md)")


def _first(cells: pd.DataFrame, column: str) -> str:
    found = cells[column].dropna() if column in cells else ()
    return str(found.iloc[0]) if len(found) else ""


def _blamed(frame: pd.DataFrame) -> pd.Series:
    """The cells that fail for their expected file alone. A cell re-judged to pass (`report
    --tolerances`) keeps the run's cause in `error`, for a later re-judging that fails it again;
    it fails for nothing now (issue 41, sweep 8 A10: merge's end lines said so of passing cells)."""
    if "error" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["error"].fillna("").astype(str).str.startswith(EXPECTED_CAUSE) & ~frame["status"].isin(GOOD)


def _concerned(frame: pd.DataFrame) -> pd.DataFrame:
    """The cells of the cases that have something to say, found for the whole frame at once: case by
    case, a run of 50,000 cells in 900 cases took 7 s (bench/report_bench.py)."""
    said = frame["status"].isin(UNJUDGED) | _blamed(frame)
    cases = set(frame.loc[said, "case"])
    if "reference" in frame:
        firsts = frame.groupby("case", sort=False)["reference"].first()
        cases |= {case for case, text in firsts.items()
                  if pd.notna(text) and any(said in str(text) for said in ("no float64 evaluation for", NOT_CHECKED))}
    return frame[frame["case"].isin(cases)]


def reference_lines(frame: pd.DataFrame) -> list[str]:
    lines = []
    for case, cells in _concerned(frame).groupby("case", sort=False):
        unjudged = cells[cells["status"].isin(UNJUDGED)]
        if len(unjudged):
            why = _first(unjudged, "error").removeprefix("reference disputed: ")
            word = "no reference" if (unjudged["status"] == "no_reference").all() else "reference disputed"
            to_do = CASE_FILE_TO_DO if _first(cells, "reference").startswith("PyTorch") else TO_DO
            said = any(words in why for words in ("expected", "fix the inputs", "raise timeout_s"))  # in the cause already
            # a cell beside a step ran, and passed where no step decides (sweep 19 M18): judged there only
            ran = unjudged["max_abs"].notna().all() if "max_abs" in unjudged else False
            judged = "judged only where no step decides" if ran else "not judged"
            lines.append(f"{len(unjudged)} cell{'s' * (len(unjudged) != 1)} of case {case} {judged}, {word}: {why}"
                         + ("" if said else f"; {to_do}"))
        blamed = cells[_blamed(cells)]
        if len(blamed):
            lines.append(f"{len(blamed)} cell{'s' * (len(blamed) != 1)} of case {case} fail{'s' * (len(blamed) == 1)} "
                         f"against your expected file alone: {_first(blamed, 'error').removeprefix(EXPECTED_CAUSE)}")
        said = _first(cells, "reference")
        if "no float64 evaluation for" in said:
            lines.append(f"case {case}: {said.split(': float32')[0]}; its reference is that float32 output")
        if NOT_CHECKED in said:
            lines.append(f"case {case}: its reference is {said}")
    return lines
