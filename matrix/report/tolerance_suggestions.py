"""`trtmatrix tolerances suggest`: tolerances from measurements instead of by hand.

Per case × profile: the atol the trusted environments' cells needed at the configured rtol (the
worst over their rows, outputs and inferences: atol_needed), times a safety factor, never below
the noise floor measured there (run-to-run drift, and the case's FP32 error against float64),
itself taken at the configured rtol as atol_needed is: an output of values near 1e15 has an FP32
rounding of 1e7 that rtol covers, and as an atol it would pass any error on the case's other outputs.
A profile judged by an acceptance rule gets the rule's cosine threshold instead (atol and rtol
have no effect there): 1 - factor x the largest gap from 1 the trusted cells showed (per slice
where the rule has an axis), never above what the case's FP32 cells reach nor above 1 - the
profile precision's machine epsilon (a trusted cell that happened to be exact, or did not compute
in that precision, would otherwise give a threshold only bit-exact outputs reach), the rest of the
rule as configured. For the same reason an FP16 or BF16 atol is never below that precision's
resolution at the outputs' scale (its machine epsilon x the largest |reference| of the case's
outputs), and a suggestion from a trusted cell that did not compute in that precision (⇡) says so.
A suggestion comes only from trusted environments, so a fault in another one stays red when the
run is re-judged with it (`trtmatrix report --tolerances FILE`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from ..compare import compare_runs, load_runs
from ..config import Acceptance, Tolerance
from ..prepare import mask_array
from ..statuses import EXPECTED_CAUSE
from ..store import DamagedRun, cell_file, run_inputs, run_reference, stored_arrays
from ..worker.files import OUTPUTS, REPEATS
from .precision_ran import every_node_wider

RAN = {"pass", "fail"}
# Machine epsilon of each profile precision (its mantissa's last bit): the least gap from 1 a
# suggested cosine threshold leaves (issue 41, sweep 7 N11).
EPSILON = {"fp32": 2.0 ** -23, "tf32": 2.0 ** -10, "fp16": 2.0 ** -10, "bf16": 2.0 ** -7}
# Precisions whose atol is floored at their resolution at the outputs' scale (issue 41, sweep 8 A11).
REDUCED = {"fp16": "FP16", "bf16": "BF16"}


@dataclass
class Suggestion:
    case: str
    profile: str
    rtol: float
    atol: float | None = None  # None: no suggestion, see `why`
    needed: float | None = None
    worst: str = ""  # the cell and output that needed it
    floor: float = 0.0
    floor_from: str = ""
    cells: int = 0
    why: str = ""
    rule: dict | None = None  # a rule-judged profile: the suggested rule (its cosine) in place of atol
    note: str = ""  # a trusted cell that did not compute in the profile's precision


def round_up(value: float) -> float:
    """Up to two significant digits, never below `value`."""
    if value <= 0:
        return 0.0
    if not math.isfinite(value):
        return value
    step = 10.0 ** (math.floor(math.log10(value)) - 1)
    rounded = float(f"{math.ceil(value / step) * step:.1e}")
    return rounded if rounded >= value else float(f"{(math.ceil(value / step) + 1) * step:.1e}")


def _drift_at(run_dir: Path, cell: dict, rtol: float) -> float:
    """A cell's run-to-run drift as an atol at `rtol`: its later runs judged against its first, as
    B is against A (a_vs_b), so the part of it that rtol covers is none."""
    outputs = cell_file(run_dir, str(cell["content_key"]), OUTPUTS)
    try:
        first, later = load_runs(outputs, cell_file(run_dir, str(cell["content_key"]), REPEATS))
        mask = cell.get("mask")
        mask = mask_array(run_inputs(run_dir, str(cell["artifact"])), mask) if isinstance(mask, str) else None
    except Exception as exc:  # noqa: BLE001 - whatever a missing or damaged file raises (zip, numpy's format)
        raise DamagedRun.of(outputs, exc) from None
    try:
        return float(compare_runs(list(later.values()), first, 0.0, rtol, mask)[1]["atol_needed"]) if later else 0.0
    except ValueError:  # the runs differ in shape or outputs: nothing rtol covers
        return math.inf


def _noise_floor(run_dir: Path, frame: pd.DataFrame, measured: pd.DataFrame, case: str, rtol: float) -> tuple[float, str]:
    """(the floor, what it is): the largest of the trusted cells' drift and the case's FP32 cells'
    atol_needed (at the FP32 tolerance's rtol), each at a configured rtol."""
    drifting = measured[measured["drift_max_abs"].fillna(0) > 0]
    drift = max((_drift_at(run_dir, cell, rtol) for cell in drifting.to_dict("records")), default=0.0)
    fp32 = frame[(frame["case"] == case) & (frame["precision"] == "fp32") & frame["verdict"].isin(RAN)]
    fp32_error = float(fp32["atol_needed"].max()) if fp32["atol_needed"].notna().any() else 0.0
    if not math.isfinite(fp32_error):  # NaN/Inf in FP32 says nothing about noise
        fp32_error = 0.0
    return max((drift, "run-to-run drift"), (fp32_error, "FP32 vs float64"))


def _resolution(run_dir: Path, measured: pd.DataFrame, precision: str) -> tuple[float, str]:
    """(the precision's machine epsilon x the largest finite |reference| of the measured cells'
    float outputs, what it is): the least error an engine that computes in FP16 or BF16 shows at
    the outputs' scale. A trusted cell that was exact, or ran in float32, needed 0."""
    scale = 0.0
    for artifact in dict.fromkeys(measured["artifact"].astype(str)):
        for value in stored_arrays(run_reference(run_dir, artifact)).values():
            if value.dtype.kind == "f" and value.size and np.isfinite(value).any():
                scale = max(scale, float(np.max(np.abs(value[np.isfinite(value)]))))
    return EPSILON[precision] * scale, f"{REDUCED[precision]}'s resolution at the outputs' scale {scale:.3g}"


def _not_computed(measured: pd.DataFrame, precision: str) -> str:
    """A comment naming the trusted cells that ran every node in float32 (⇡), or ''."""
    wider = measured[measured["precision_ran"].map(every_node_wider)]["cell_id"].tolist()
    if not wider:
        return ""
    more = f" and {len(wider) - 1} more" if len(wider) > 1 else ""
    return (f"{wider[0]}{more} did not compute in {REDUCED[precision]} (⇡: every node ran in float32): what it needed "
            f"says nothing of {REDUCED[precision]} arithmetic")


def _rule(suggestion: Suggestion, frame: pd.DataFrame, measured: pd.DataFrame, accept: Acceptance, factor: float) -> None:
    """The rule with its cosine threshold from the trusted cells' worst cosine (see module doc)."""
    if accept.cosine is None:
        suggestion.why = f"judged by the rule '{accept.text()}', which has no cosine threshold to measure: keep it"
        return
    worst = measured.loc[measured["cosine"].idxmin()] if measured["cosine"].notna().all() else None
    if worst is None:
        suggestion.why = "NaN/Inf in a trusted cell: no cosine passes it"
        return
    fp32 = frame[(frame["case"] == suggestion.case) & (frame["precision"] == "fp32") & frame["verdict"].isin(RAN)]
    precision = str(measured["precision"].iloc[0])
    floor = max((1 - float(fp32["cosine"].min()) if fp32["cosine"].notna().any() else 0.0, "FP32 vs float64 gap"),
                (EPSILON[precision], f"{precision}'s machine epsilon"))
    gap = round_up(max(factor * (1 - float(worst["cosine"])), floor[0]))
    suggestion.needed, (suggestion.floor, suggestion.floor_from) = float(worst["cosine"]), floor
    suggestion.worst = worst["worst_slice"] if isinstance(worst.get("worst_slice"), str) else worst["cell_id"]
    suggestion.rule = {**accept.model_dump(exclude_defaults=True), "cosine": float(f"{1 - gap:.15g}")}
    _accepted(factor, suggestion, lambda: Acceptance(**suggestion.rule))


def _accepted(factor: float, suggestion: Suggestion, check) -> None:
    """What suggest writes, the matrix file (and `report --tolerances`) accepts: a --factor that
    makes a tolerance or rule that cannot fail (atol 3e+307, cosine -1) is refused, not written."""
    try:
        check()
    except ValidationError as exc:
        raise ValueError(f"--factor {factor:g}: {suggestion.case}/{suggestion.profile} would get a suggestion the "
                         f"matrix file refuses ({exc.errors()[0]['msg'].removeprefix('Value error, ')}): give a "
                         "smaller factor") from None


def suggest(run_dir: Path, frame: pd.DataFrame, trusted: list[str], factor: float, cases: list[str] | None = None,
            rules: dict[tuple[str, str], Acceptance] | None = None) -> list[Suggestion]:
    """`frame`: the results of the run in `run_dir` (whose stored outputs give the drift);
    `rules`: the matrix file's acceptance rules {(case, profile): rule}."""
    for flag, given, known in (("--trusted", trusted, set(frame["env"])), ("--case", cases or (), set(frame["case"]))):
        if unknown := sorted(set(given) - known):
            raise ValueError(f"{flag} {unknown[0]} is not {'an environment' if flag == '--trusted' else 'a case'} of "
                             f"the run ({', '.join(sorted(known))})")
    mine = frame[frame["env"].isin(trusted)]
    found = []
    for (case, profile), group in mine.groupby(["case", "profile"], sort=False):
        if cases and case not in cases:
            continue
        # A cell failing against the user's expected file alone measured the file, not the engine.
        blamed = group["error"].fillna("").astype(str).str.startswith(EXPECTED_CAUSE)
        measured = group[group["verdict"].isin(RAN) & group["atol_needed"].notna() & ~blamed]
        suggestion = Suggestion(case, profile, float(group["rtol"].iloc[0]), cells=len(measured))
        found.append(suggestion)
        if measured.empty:
            why = "its expected file is the cause (the engine matches the model's own evaluation): fix the file" \
                if blamed.any() else "no trusted cell has numbers"
            suggestion.why = f"{why} ({', '.join(sorted(set(group['status'])))})"
            continue
        if (case, profile) in (rules or {}):
            _rule(suggestion, frame, measured, rules[(case, profile)], factor)
            continue
        worst = measured.loc[measured["atol_needed"].idxmax()]
        output = max(json.loads(worst["outputs"]), key=lambda o: o["atol_needed"])["name"]
        suggestion.needed, suggestion.worst = float(worst["atol_needed"]), f"{worst['cell_id']}, output {output}"
        if math.isinf(suggestion.needed):
            exact = not any(o["nan_count"] or o["inf_count"] or o.get("ref_nonfinite")
                            for o in json.loads(worst["outputs"]) if o["name"] == output)
            what = "an output compared exactly (integers, booleans, strings) differs" if exact else "NaN/Inf"
            suggestion.why = f"{what} in a trusted cell ({suggestion.worst}): no tolerance passes it"
            continue
        suggestion.floor, suggestion.floor_from = _noise_floor(run_dir, mine, measured, case, suggestion.rtol)
        if math.isinf(suggestion.floor):
            suggestion.why = "the runs of a trusted cell differ in NaN/Inf or shape: no tolerance covers that"
            continue
        if (precision := str(measured["precision"].iloc[0])) in REDUCED:
            suggestion.floor, suggestion.floor_from = max((suggestion.floor, suggestion.floor_from),
                                                          _resolution(run_dir, measured, precision))
            suggestion.note = _not_computed(measured, precision)
        suggestion.atol = round_up(max(factor * suggestion.needed, suggestion.floor))
        drifting = measured[measured["drift_max_abs"].fillna(0) > measured["atol"]]
        if suggestion.floor_from == "run-to-run drift" and not drifting.empty:  # sweep 18 L23: atol 13000, said nowhere
            cell = drifting.iloc[0]
            suggestion.note = "; ".join(filter(None, [suggestion.note, (
                f"the floor is {cell['cell_id']}'s outputs changing between inferences by {cell['drift_max_abs']:.3g}, "
                f"beyond its atol {cell['atol']:g}: where an engine should be deterministic (a CPU), that is a finding "
                "to look at before taking this tolerance")]))
        _accepted(factor, suggestion, lambda: Tolerance(atol=suggestion.atol, rtol=suggestion.rtol))
    return found


def to_toml(suggestions: list[Suggestion], run_id: str, trusted: list[str], factor: float) -> str:
    lines = [f"# trtmatrix tolerances suggest: run {run_id}; trusted: {', '.join(trusted)}; factor {factor:g}.",
             "# atol: factor x the atol the trusted cells needed at the configured rtol, never below the noise",
             "# floor measured there at a configured rtol too (run-to-run drift; the case's FP32 error against",
             "# float64; FP16 and BF16: the precision's resolution at the outputs' scale). rtol: as configured.",
             "# Paste into the matrix file, or re-judge a run: trtmatrix report RUN --tolerances THIS_FILE", ""]
    for s in suggestions:
        if s.rule is not None:
            lines += [f"[cases.{s.case}.accept.{s.profile}]",
                      f"# judged by a rule: the worst cosine was {s.needed!r} ({s.worst}; worst of {s.cells} trusted "
                      f"cells); never closer to 1 than {s.floor:.2e} ({s.floor_from})",
                      *(f"{key} = {json.dumps(value)}" for key, value in s.rule.items()), ""]
            continue
        if s.atol is None:
            lines += [f"# {s.case} / {s.profile}: no suggestion: {s.why}", ""]
            continue
        lines += [f"[cases.{s.case}.tolerances.{s.profile}]",
                  f"# needed {s.needed:.2e} ({s.worst}; worst of {s.cells} trusted cells); "
                  f"noise floor {s.floor:.2e} ({s.floor_from})", *([f"# {s.note}"] if s.note else []),
                  f"atol = {s.atol!r}", f"rtol = {s.rtol!r}", ""]
    return "\n".join(lines)
