"""Numbers and verdicts: every output against its float64 reference.

The verdict is np.allclose's rule, element by element: |out - ref| <= atol + rtol * |ref|, and
a NaN or Inf where the reference is finite always counts as a mismatch. A cell passes when no
element of any output mismatches.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

# Relative error divides by |ref|; this keeps exact zeros in the reference from giving inf.
REL_FLOOR = 1e-12


@dataclass(frozen=True)
class OutputMetrics:
    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mean_abs: float
    rmse: float
    cosine: float
    mismatch_frac: float
    nan_count: int
    inf_count: int

    def to_dict(self) -> dict:
        return asdict(self)


WORST = {"max_abs": max, "max_rel": max, "mean_abs": max, "rmse": max, "cosine": min,
         "mismatch_frac": max, "nan_count": sum, "inf_count": sum}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def compare_output(name: str, actual: np.ndarray, reference: np.ndarray, atol: float, rtol: float) -> OutputMetrics:
    if actual.shape != reference.shape:
        raise ValueError(f"output {name!r} has shape {actual.shape}, reference has {reference.shape}")
    out = actual.astype(np.float64).ravel()
    ref = reference.astype(np.float64).ravel()
    finite = np.isfinite(out)
    diff = np.where(finite, np.abs(out - ref), np.inf)
    bad = ~(diff <= atol + rtol * np.abs(ref)) & np.isfinite(ref)
    ok = finite & np.isfinite(ref)
    d = diff[ok]
    return OutputMetrics(
        name=name,
        shape=tuple(actual.shape),
        max_abs=float(d.max()) if d.size else 0.0,
        max_rel=float((d / np.maximum(np.abs(ref[ok]), REL_FLOOR)).max()) if d.size else 0.0,
        mean_abs=float(d.mean()) if d.size else 0.0,
        rmse=float(np.sqrt((d ** 2).mean())) if d.size else 0.0,
        cosine=_cosine(np.where(finite, out, 0.0), ref),
        mismatch_frac=float(bad.mean()) if bad.size else 0.0,
        nan_count=int(np.isnan(out).sum()),
        inf_count=int(np.isinf(out).sum()),
    )


def compare_outputs(actual: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                    atol: float, rtol: float) -> tuple[str, dict, list[OutputMetrics]]:
    """Return (verdict, worst metrics over outputs, per-output metrics)."""
    missing = set(reference) - set(actual)
    if missing:
        raise ValueError(f"engine returned no value for outputs {sorted(missing)}")
    per_output = [compare_output(n, actual[n], reference[n], atol, rtol) for n in reference]
    worst = {key: pick(getattr(m, key) for m in per_output) for key, pick in WORST.items()}
    bad = worst["mismatch_frac"] > 0 or worst["nan_count"] > 0 or worst["inf_count"] > 0
    return ("fail" if bad else "pass"), worst, per_output


def compare_files(outputs: Path, reference: Path, atol: float, rtol: float) -> tuple[str, dict]:
    """Verdict and record fields (worst metrics, per-output metrics as JSON) from stored .npz
    files: the same judgement after a run and when `trtmatrix report` re-judges a stored one."""
    with np.load(outputs) as out, np.load(reference) as ref:
        verdict, worst, per_output = compare_outputs(dict(out), dict(ref), atol, rtol)
    return verdict, {**worst, "outputs": json.dumps([m.to_dict() for m in per_output])}
