"""Re-apply tolerances and known issues to a stored run, without running anything again.

Every cell that produced outputs keeps them (cells/<key>.npz, and cells/<key>.repeats.npz where
later inferences differed) and the run keeps the float64 references (refs/<artifact>.npz), so a
changed tolerance in matrix.toml or a new entry in known_issues.toml gives new verdicts from the
same measurements. A cell whose files are gone or damaged cannot be re-judged: it keeps the run's
verdict, says so in its `error`, and the file is named to the caller, never passed over in silence.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..compare import compare_files, judged_beside_a_step, judging_error
from ..config import MatrixConfig
from ..sources.known_issues import KnownIssue, apply_known_issues
from ..sources.pattern_notes import with_unchecked_patterns
from ..prepare import mask_array
from ..store import cell_file, npz_problem, run_inputs, run_reference, run_step_decides, stored_digests
from ..worker.files import OUTPUTS, REPEATS, file_digest

JUDGED = {"pass", "fail"}


def _unreadable(files: list[Path], run_dir: Path, digests: dict[str, str]) -> str | None:
    """Why the first of `files` that cannot be judged from cannot be, or None: missing, damaged, or
    another file than the run stored (a valid archive with other outputs or shapes would be judged
    as the cell's)."""
    for path in files:
        if not path.is_file():
            return f"{path} is missing"
        if problem := npz_problem(path):
            return f"{path} cannot be read ({problem})"
        recorded = digests.get(str(path.relative_to(run_dir)))
        if recorded and file_digest(path) != recorded:
            return f"{path} is not the file the run stored (its digest differs)"
    return None


def rejudge(run_dir: Path, frame: pd.DataFrame, config: MatrixConfig,
            issues: tuple[KnownIssue, ...]) -> tuple[pd.DataFrame, dict[str, int]]:
    """The run's cells judged again, and what kept some from it: {a file missing or damaged: how
    many cells it concerns} (each keeps the run's verdict and tolerance, and says why in `error`)."""
    frame, problems, digests = frame.copy(), {}, stored_digests(run_dir)
    for index, row in frame[frame["verdict"].isin(JUDGED | {"disputed"})].iterrows():
        key, decides = str(row["content_key"]), run_step_decides(run_dir, str(row["artifact"]))
        if row["verdict"] not in JUDGED and not decides.is_file():
            continue  # never ran: its reference is disputed at every element
        outputs, reference = cell_file(run_dir, key, OUTPUTS), run_reference(run_dir, str(row["artifact"]))
        repeats = cell_file(run_dir, key, REPEATS)
        if row["case"] not in config.cases or row["profile"] not in config.cases[row["case"]].profiles:
            continue  # not_in_matrix: its tolerance, rule and mask are the run's, so is its verdict
        # A suite's test judged with its own tolerance keeps it, unless the matrix file now sets one.
        own = isinstance(row.get("suite"), str) and row["profile"] not in config.cases[row["case"]].tolerances
        tol = None if own else config.tolerance(row["case"], row["profile"])
        atol, rtol = (tol.atol, tol.rtol) if tol else (row["atol"], row["rtol"])
        mask = config.cases[row["case"]].mask
        changed = {"atol": atol, "rtol": rtol, "mask": mask}
        inputs = run_inputs(run_dir, str(row["artifact"]))  # where the mask is read from
        stored = [outputs, reference, *([repeats] if repeats.is_file() else []), *([inputs] if mask else []),
                  *([decides] if decides.is_file() else [])]
        if not (problem := _unreadable(stored, run_dir, digests)):
            try:
                rule = config.acceptance(row["case"], row["profile"])
                verdict, judged = judged_beside_a_step(outputs, reference, decides, atol, rtol, str(row["reference_check"]),
                                                       rule, repeats, mask_array(inputs, mask)) if decides.is_file() \
                    else compare_files(outputs, reference, atol, rtol, rule, repeats, mask_array(inputs, mask))
                changed.update(judged, verdict=verdict)
            except Exception as exc:  # the stored files are the run's: the matrix file's rule does not apply
                changed.update(verdict="error", error=judging_error(exc, row.get("reference")))
        if problem:
            problems[problem] = problems.get(problem, 0) + 1
            changed = {"error": f"not re-judged: {problem}; its verdict and tolerance are the run's"}
        for column, value in changed.items():
            frame.at[index, column] = value
    frame["status"] = frame["verdict"]
    return with_unchecked_patterns(apply_known_issues(frame, issues), issues), problems


def not_in_matrix(frame: pd.DataFrame, config: MatrixConfig) -> list[str]:
    """Rows ("case/profile") of a run whose case or profile the matrix file does not have (any more,
    or a run of another matrix): rejudge keeps their verdicts, known issues aside."""
    rows = frame[["case", "profile"]].drop_duplicates()
    return [f"{case}/{profile}" for case, profile in rows.itertuples(index=False)
            if case not in config.cases or profile not in config.cases[case].profiles]
