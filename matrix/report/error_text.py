"""How a cell's worst error is written wherever a person reads one (terminal, report, history,
JUnit, diff): one function, so a NaN is shown first everywhere and never as a small number."""

from __future__ import annotations

import json
import math

from ..acceptance import cosine_text as value_text
from .precision_ran import every_node_wider

DRIFT_MARK = "↯"  # the outputs differed between inferences of the same engine on the same inputs
WIDER_MARK = "⇡"  # a reduced-precision cell none of whose nodes computed in that precision (precision_ran)
RULE_MARK = "⚖"  # judged by the case's acceptance rule (cosine, top-k agreement), not atol/rtol
PIN_MARK = "≡"  # a TensorRT engine built with a shape tensor pinned to one value: no dynamic shapes tested


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


def one_line(text) -> str:
    """A message of several lines as one line, every line kept: ONNX Runtime's "… of node:" names
    the node on the next line, which a first line alone cut off."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def bits_text(row) -> str | None:
    """'1 of 5 elements differ (bit patterns)' where outputs compared bit for bit (float8…) differ:
    their max_abs 1 is no distance (compare.OutputMetrics.bits_differ); else None."""
    outputs = row.get("outputs")  # a cell's per-output metrics (JSON); explain's node rows name theirs
    measured = json.loads(outputs) if isinstance(outputs, str) and outputs.startswith("[") else ()
    bitwise = [o for o in measured if o.get("bits_differ") is not None]
    differ = sum(o["bits_differ"] for o in bitwise)
    return f"{differ} of {sum(math.prod(o['shape']) for o in bitwise)} elements differ (bit patterns)" if differ else None


def _numeric_max_abs(row) -> float | None:
    """The largest max_abs of the outputs not compared bit for bit, where some were."""
    outputs = json.loads(row["outputs"])
    return max((o["max_abs"] for o in outputs if o.get("bits_differ") is None and o["max_abs"] is not None),
               default=None)


def distance_text(row) -> str:
    """'max_abs 0.5', or what differs bit for bit ('1 of 5 elements differ (bit patterns)')."""
    bits = bits_text(row)
    return bits or f"max_abs {row['max_abs']:.3g}"


def worst_error(row, precision: int = 1) -> str | None:
    """'NaN×512' (and/or 'Inf×3') when outputs held non-finite values where the reference is
    finite; what was found where the reference's own NaN/Inf was missed ('-inf expected, -3.4e+38
    (float32 lowest) found ×84'); an output of the wrong shape ('y has shape (2,), the reference (3,)');
    else max_abs ('2.7e-03'); None for a cell without numbers."""
    if isinstance(row.get("wrong_shape"), str):  # an output of another shape: nothing measured, its shapes said
        return row["wrong_shape"]
    nans, infs = _count(row.get("nan_count")), _count(row.get("inf_count"))
    if nans or infs:
        return " ".join(f"{text}×{n}" for text, n in (("NaN", nans), ("Inf", infs)) if n)
    if bits := bits_text(row):  # no distance between two codes: how many differ (and the other outputs' distance)
        other = _numeric_max_abs(row)
        return f"{bits}; max_abs {other:.{precision}e}" if other else bits
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
    if math.isinf(atol):  # NaN/Inf, or an integer that differs: no tolerance would pass it
        return None
    rtol_text = "no rtol suffices (an error where the reference is 0)" if math.isinf(rtol) else f"rtol ≥ {rtol:.1e}"
    return f"needs atol ≥ {atol:.1e} or {rtol_text}"


def pinned_inputs(row) -> list[str]:
    """The shape-tensor inputs a TensorRT cell's engine was built with pinned to one value."""
    profile = row.get("shape_profile")
    if not isinstance(profile, str):
        return []
    return [name for name, bounds in json.loads(profile)["inputs"].items() if bounds.get("pinned")]


def with_marks(text: str, row) -> str:
    """A cell's short text with ↯ when its inferences differed, ⚖ when a rule judged it, ≡ when its
    engine has a shape tensor pinned and ⇡ when no node computed in its profile's reduced precision."""
    marks = [DRIFT_MARK] * bool(drift_text(row)) + [RULE_MARK] * isinstance(row.get("rule"), str) + \
        [PIN_MARK] * bool(pinned_inputs(row)) + [WIDER_MARK] * every_node_wider(row.get("precision_ran"))
    return " ".join([text, *marks])


def rule_text(row) -> str | None:
    """'cosine ≥ 0.999: measured 0.99953' for a cell judged by an acceptance rule."""
    if not isinstance(row.get("rule"), str):
        return None
    measured = []
    if "cosine" in row["rule"]:
        measured.append(cosine_text(row) if _number(row.get("cosine")) is not None else "no cosine (no floating output)")
    if "agreement" in row["rule"] and _number(row.get("top1")) is not None:
        measured.append(f"top-k agreement {row['top1']:.4f}")
    worst = f"; worst: {row['worst_slice']}" if isinstance(row.get("worst_slice"), str) else ""
    return f"{row['rule']}: measured {', '.join(measured)}{worst}"


def cosine_text(row) -> str:
    """'cosine 1 − 3.2e-07' rather than a rounded 'cosine 1': near 1 the distance is the news."""
    return "cosine " + value_text(_number(row.get("cosine")))
