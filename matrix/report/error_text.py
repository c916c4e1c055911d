"""How a cell's worst error is written wherever a person reads one (terminal, report, history,
JUnit, diff): one function, so a NaN is shown first everywhere and never as a small number."""

from __future__ import annotations

import math

DRIFT_MARK = "↯"  # the outputs differed between inferences of the same engine on the same inputs
RULE_MARK = "⚖"  # judged by the case's acceptance rule (cosine, top-k agreement), not atol/rtol


def _count(value) -> int:
    try:
        return 0 if value is None or math.isnan(value) else int(value)
    except TypeError:  # pandas.NA
        return 0


def _number(value) -> float | None:
    try:
        return None if value is None or math.isnan(value) else float(value)
    except TypeError:
        return None


def worst_error(row, precision: int = 1) -> str | None:
    """'NaN×512' (and/or 'Inf×3') when outputs held non-finite values where the reference is
    finite; what was found where the reference's own NaN/Inf was missed ('-inf expected, -3.4e+38
    (float32 lowest) found ×84'); else max_abs ('2.7e-03'); None for a cell without numbers."""
    nans, infs = _count(row.get("nan_count")), _count(row.get("inf_count"))
    if nans or infs:
        return " ".join(f"{text}×{n}" for text, n in (("NaN", nans), ("Inf", infs)) if n)
    value = _number(row.get("max_abs"))
    found = row.get("nonfinite_found")
    if value == math.inf and isinstance(found, str):  # the reference's NaN/Inf missed: say what was there
        return found
    return None if value is None else f"{value:.{precision}e}"


def drift_text(row) -> str | None:
    """'drift 1.4e+03 from inference 2' when a later inference differed from the first, else None."""
    value = _number(row.get("drift_max_abs"))
    if not value:
        return None
    run = _count(row.get("drift_run"))
    return f"drift {value:.1e}" + (f" from inference {run}" if run else "")


def needed_text(row) -> str | None:
    """'needs atol ≥ 3.1e-03 or rtol ≥ 2.0e-02' for a cell that missed its tolerance: a miss by a
    hair reads differently from one by orders of magnitude. None for a cell within it, or with
    NaN/Inf (no tolerance passes those)."""
    atol, rtol = _number(row.get("atol_needed")), _number(row.get("rtol_needed"))
    if isinstance(row.get("rule"), str):  # judged by an acceptance rule: no tolerance would change it
        return None
    if atol is None or rtol is None or (atol <= (_number(row.get("atol")) or 0) and not _count(row.get("nan_count"))):
        return None
    if math.isinf(atol):  # NaN/Inf: worst_error already says so, and no tolerance would pass it
        return None
    rtol_text = "no rtol suffices (an error where the reference is 0)" if math.isinf(rtol) else f"rtol ≥ {rtol:.1e}"
    return f"needs atol ≥ {atol:.1e} or {rtol_text}"


def with_marks(text: str, row) -> str:
    """A cell's short text with ↯ when its inferences differed and ⚖ when a rule judged it."""
    marks = [DRIFT_MARK] * bool(drift_text(row)) + [RULE_MARK] * isinstance(row.get("rule"), str)
    return " ".join([text, *marks])


def rule_text(row) -> str | None:
    """'cosine ≥ 0.999: measured 0.99953' for a cell judged by an acceptance rule."""
    if not isinstance(row.get("rule"), str):
        return None
    measured = []
    if "cosine" in row["rule"]:
        measured.append(cosine_text(row))
    if "agreement" in row["rule"] and _number(row.get("top1")) is not None:
        measured.append(f"top-k agreement {row['top1']:.4f}")
    return f"{row['rule']}: measured {', '.join(measured)}"


def cosine_text(row) -> str:
    """'cosine 1 − 3.2e-07' rather than a rounded 'cosine 1': near 1 the distance is the news."""
    value = _number(row.get("cosine"))
    if value is None:
        return "cosine undefined (NaN/Inf)"
    if value == 1.0:
        return "cosine 1 (exactly)"
    if value > 1.0:  # float64 rounding of a dot product over norms: as close as it can tell
        return "cosine 1 (within float64 rounding)"
    return f"cosine 1 − {1 - value:.1e}" if value > 0.999 else f"cosine {value:.5f}"
