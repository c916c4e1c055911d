"""A against B, not only each against the reference: for a row run on both environments of an
upgrade, how far B's outputs are from A's (the same metrics, B judged with A's outputs as the
reference and the row's tolerance). "Both equally off" (A and B far from the reference, close to
each other) then reads apart from "B changed". Computed when asked (diff, summary, the report's
upgrade view for its default pair) from the outputs a run keeps: nothing more is stored."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..compare import compare_runs
from ..prepare import mask_array
from ..store import cell_file, run_inputs, stored_arrays
from ..worker.files import OUTPUTS


def _outputs_path(run_dir: Path, row) -> Path | None:
    return cell_file(run_dir, str(row["content_key"]), OUTPUTS) if isinstance(row.get("content_key"), str) else None


def _outputs(run_dir: Path, row) -> dict[str, np.ndarray] | None:
    """A cell's stored outputs; None where it kept none; DamagedRun where the file cannot be read."""
    path = _outputs_path(run_dir, row)
    if path is None or not path.is_file():
        return None
    return stored_arrays(path)


def a_vs_b(run_dir: Path, frame: pd.DataFrame, env_a: str, env_b: str) -> dict[str, dict]:
    """{row_id: {"max_abs", "max_rel", "cosine", "identical", "within"}} for each row whose cells
    kept outputs in both environments (judged cells: pass, fail, xfail, xpass). DamagedRun naming
    an outputs file that cannot be read."""
    kept = frame.loc[frame["env"].isin((env_a, env_b)) & frame["verdict"].isin(("pass", "fail")),
                     ["row_id", "env", "content_key", "atol", "rtol", "artifact", "mask"]]
    rows: dict[str, dict] = {}
    for record in kept.to_dict("records"):  # one conversion: a groupby per row costs seconds at thousands
        rows.setdefault(record["row_id"], {})[record["env"]] = record
    found, missing = {}, {}
    for row_id, by_env in rows.items():
        if len(by_env) != 2:
            continue
        a, b = _outputs(run_dir, by_env[env_a]), _outputs(run_dir, by_env[env_b])
        if a is None or b is None:  # a judged cell kept its outputs: they were removed since
            missing[row_id] = [_outputs_path(run_dir, by_env[env]) for env, kept in ((env_a, a), (env_b, b)) if kept is None]
            continue
        if a.keys() != b.keys():
            continue
        if all(a[n].dtype == b[n].dtype and a[n].tobytes() == b[n].tobytes() for n in a):  # most rows: nothing to measure
            found[row_id] = {"max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "identical": True, "within": True}
            continue
        mask = by_env[env_b]["mask"]  # padding the case leaves out of judging is left out here too
        mask = mask_array(run_inputs(run_dir, str(by_env[env_b]["artifact"])), mask) if isinstance(mask, str) else None
        try:
            verdict, worst, _ = compare_runs([b], a, by_env[env_b]["atol"], by_env[env_b]["rtol"], mask)
        except ValueError:  # A's output is NaN everywhere: nothing to measure B by
            continue
        if worst["wrong_shape"]:  # shapes differ: no distance either (each cell says its own shapes)
            continue
        found[row_id] = {"max_abs": worst["max_abs"], "max_rel": worst["max_rel"], "cosine": worst["cosine"],
                         "identical": False, "within": verdict == "pass"}
    if missing:
        _warn_missing(missing)
    return found


def _warn_missing(missing: dict[str, list[Path | None]]) -> None:
    """One line for the rows whose B against A cannot be measured: which outputs are gone."""
    rows, files = list(missing), [str(path) for paths in missing.values() for path in paths]
    said_rows = ", ".join(rows[:3]) + (", …" if len(rows) > 3 else "")
    said_files = ", ".join(files[:2]) + (", …" if len(files) > 2 else "")
    print(f"warning: B against A is left out for {len(rows)} row{'s' if len(rows) > 1 else ''} ({said_rows}): "
          f"the outputs their judged cells kept are missing ({said_files})", file=sys.stderr, flush=True)


def a_vs_b_text(measured: dict | None) -> str | None:
    """'identical', 'max_abs 3.1e-05 (within tolerance)', 'max_abs 2.3e-01 (beyond tolerance)'."""
    if measured is None:
        return None
    if measured["identical"]:
        return "identical"
    value = measured["max_abs"]
    said = "NaN/Inf differs" if not math.isfinite(value) else f"max_abs {value:.1e}"
    return f"{said} ({'within' if measured['within'] else 'beyond'} tolerance)"
