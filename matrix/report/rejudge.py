"""Re-apply tolerances and known issues to a stored run, without running anything again.

Every cell that produced outputs keeps them (cells/<key>.npz, and cells/<key>.repeats.npz where
later inferences differed) and the run keeps the float64 references (refs/<artifact>.npz), so a
changed tolerance in matrix.toml or a new entry in known_issues.toml gives new verdicts from the
same measurements.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..compare import compare_files
from ..config import MatrixConfig
from ..sources.known_issues import KnownIssue, apply_known_issues
from ..prepare import mask_array
from ..store import cell_file, run_inputs, run_reference
from ..worker.files import OUTPUTS, REPEATS

JUDGED = {"pass", "fail"}


def rejudge(run_dir: Path, frame: pd.DataFrame, config: MatrixConfig, issues: tuple[KnownIssue, ...]) -> pd.DataFrame:
    frame = frame.copy()
    for index, row in frame[frame["verdict"].isin(JUDGED)].iterrows():
        key = str(row["content_key"])
        outputs, reference = cell_file(run_dir, key, OUTPUTS), run_reference(run_dir, str(row["artifact"]))
        if not (outputs.is_file() and reference.is_file()):
            continue
        known = row["case"] in config.cases and row["profile"] in config.cases[row["case"]].profiles
        # A suite's test judged with its own tolerance keeps it, unless the matrix file now sets one.
        own = isinstance(row.get("suite"), str) and not (known and row["profile"] in config.cases[row["case"]].tolerances)
        tol = config.tolerance(row["case"], row["profile"]) if known and not own else None
        atol, rtol = (tol.atol, tol.rtol) if tol else (row["atol"], row["rtol"])
        mask = config.cases[row["case"]].mask if known else None
        verdict, judged = compare_files(outputs, reference, atol, rtol,
                                        config.acceptance(row["case"], row["profile"]) if known else None,
                                        cell_file(run_dir, key, REPEATS),
                                        mask_array(run_inputs(run_dir, str(row["artifact"])), mask))
        for key, value in {**judged, "atol": atol, "rtol": rtol, "verdict": verdict, "mask": mask}.items():
            frame.at[index, key] = value
    frame["status"] = frame["verdict"]
    return apply_known_issues(frame, issues)
