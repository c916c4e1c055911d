"""Numbers and verdicts: every output of every inference against its float64 reference.

Element by element, against a reference value r (np.allclose's rule, made explicit for
non-finite values):
- r finite: the output matches when it is finite and |out - r| <= atol + rtol * |r|;
- r NaN: only NaN matches; r +Inf / -Inf: only the same infinity matches.
A cell passes when no element of any output mismatches. Any mismatch that involves a NaN or Inf
makes the output's error metrics (max_abs, max_rel, mean_abs, rmse) infinite and its cosine
undefined (NaN): a NaN never hides behind the small error of the finite elements. nan_count and
inf_count count the NaN and Inf values the reference does not have there. A reference that holds
NaN or Inf is itself suspect and is flagged (ref_nonfinite); outputs the engine returned beyond
the reference's are listed (extra_outputs), not silently dropped.

A cell keeps the outputs of its first inference and of every later one that differed from it
(worker: repeats.npz). It is judged on the worst of them, and their largest difference from the
first is its run-to-run drift.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from .acceptance import cosine, exact_kind, exact_values, judge_by_rule, judged_positions, whole_numbers
from .config import Acceptance
from .worker.files import REPEATS

# Relative error divides by |ref|; this keeps exact zeros in the reference from giving inf.
REL_FLOOR = 1e-12
INF = float("inf")


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
    ref_nonfinite: int = 0
    # Where the reference is NaN or Inf and the output is not the same: what was found there
    # ("-inf expected, -3.4e+38 (float32 lowest) found ×84").
    nonfinite_found: str | None = None
    # How far from passing: the smallest atol that passes at the configured rtol, and the smallest
    # rtol at the configured atol (infinite where NaN/Inf, or an error on an exact 0, needs more).
    atol_needed: float = 0.0
    rtol_needed: float = 0.0
    # Elements left out of judging by the case's mask (padding positions).
    left_out: int = 0
    # An output of another shape than its reference: "y has shape (1, 2), the reference (1, 3)".
    # Nothing is measured (the error metrics are NaN) and every element is a mismatch.
    wrong_shape: str | None = None
    # An output compared bit for bit (a type numpy lacks: float8…): how many elements differ. Its
    # max_abs 1 is no distance between two codes, and is never shown as one (issue 41, sweep 8 A9).
    bits_differ: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _max(values) -> float:
    """The largest; NaN (an output of the wrong shape: not measured) wherever one is NaN."""
    values = list(values)
    return math.nan if any(isinstance(v, float) and math.isnan(v) for v in values) else max(values)


def _min_cosine(values) -> float:
    """The worst cosine; an undefined one (NaN, from non-finite outputs) is the worst of all."""
    values = list(values)
    return math.nan if any(math.isnan(v) for v in values) else min(values)


# How each metric's worst is taken over the outputs of a cell.
def _texts(values) -> str | None:
    return "; ".join(dict.fromkeys(v for v in values if v)) or None


WORST = {"max_abs": _max, "max_rel": _max, "mean_abs": _max, "rmse": _max, "cosine": _min_cosine,
         "mismatch_frac": max, "nan_count": sum, "inf_count": sum, "ref_nonfinite": sum, "nonfinite_found": _texts,
         "atol_needed": max, "rtol_needed": max, "left_out": sum, "wrong_shape": _texts}
# ... and over the runs of one output (counts are per run, so the largest, not the sum).
WORST_RUN = {**WORST, "nan_count": max, "inf_count": max, "left_out": max}


def _value_text(value: float, dtype: np.dtype) -> str:
    """-3.4028235e+38 → '-3.4e+38 (float32 lowest)': the stand-in an engine writes for an infinity."""
    text = repr(value) if math.isinf(value) or math.isnan(value) else f"{value:.2g}"
    if np.issubdtype(dtype, np.floating):
        limits = np.finfo(dtype)
        name = {float(limits.min): "lowest", float(limits.max): "max"}.get(value)
        if name:
            text += f" ({dtype.name} {name})"
    return text.replace("nan", "NaN")


def _nonfinite_found(out: np.ndarray, ref: np.ndarray, missed: np.ndarray, dtype: np.dtype) -> str | None:
    """What the output holds where the reference is NaN or ±Inf and the output is not the same."""
    parts = []
    for expected in (-np.inf, np.inf, np.nan):
        where = missed & ((ref == expected) if not math.isnan(expected) else np.isnan(ref))
        if not where.any():
            continue
        found = np.unique(out[where])
        said = _value_text(float(found[0]), dtype) if found.size == 1 else \
            f"values from {_value_text(float(found.min()), dtype)} to {_value_text(float(found.max()), dtype)}"
        parts.append(f"{_value_text(expected, dtype)} expected, {said} found ×{int(where.sum())}")
    return "; ".join(parts) or None


def _compare_integers(name: str, shape: tuple[int, ...], out: np.ndarray, ref: np.ndarray, left_out: int) -> OutputMetrics:
    """Integers (indices, counts, masks) match exactly, as integers: through float64, 2**62 + 1
    and 2**62 would be equal. Differences are taken as Python integers, so none overflows. No
    tolerance passes one that differs: atol_needed is infinite, as for strings."""
    bad = out != ref
    diffs = [abs(int(a) - int(r)) for a, r in zip(out[bad], ref[bad])]
    size = max(out.size, 1)
    worst = float(max(diffs, default=0))
    rel = max((d / max(abs(int(r)), 1) for d, r in zip(diffs, ref[bad])), default=0.0)
    return OutputMetrics(name, shape, max_abs=worst, max_rel=float(rel), mean_abs=float(sum(diffs)) / size,
                         rmse=math.sqrt(sum(float(d) ** 2 for d in diffs) / size),
                         cosine=cosine(out.astype(np.float64), ref.astype(np.float64)),
                         mismatch_frac=float(bad.mean()) if bad.size else 0.0, nan_count=0, inf_count=0,
                         atol_needed=INF if diffs else 0.0, rtol_needed=INF if diffs else 0.0, left_out=left_out)


def _compare_strings(name: str, actual: np.ndarray, reference: np.ndarray) -> OutputMetrics:
    """Strings (a string tensor's elements) match exactly; no tolerance makes two texts equal."""
    return _compare_whole(name, tuple(actual.shape), actual.astype(str).ravel() != reference.astype(str).ravel())


def _compare_bits(name: str, shape: tuple[int, ...], actual: np.ndarray, reference: np.ndarray) -> OutputMetrics:
    """A tensor of a type numpy lacks (float8, bfloat16, int4…: ml_dtypes' types, or the raw bytes
    numpy saves them as, or the unsigned bits onnxruntime returns) matches its reference bit for bit:
    the type itself is not kept with the bytes, so no value is decoded (issue 41, sweep 7 N1)."""
    bits = np.dtype(f"u{reference.dtype.itemsize}")
    if actual.dtype.itemsize != bits.itemsize:
        raise ValueError(f"output {name!r} holds {actual.dtype.itemsize}-byte values, its reference "
                         f"{bits.itemsize}-byte values of a type numpy lacks")
    bad = actual.view(bits).ravel() != reference.view(bits).ravel()
    return replace(_compare_whole(name, shape, bad), bits_differ=int(bad.sum()))


def _compare_whole(name: str, shape: tuple[int, ...], bad: np.ndarray) -> OutputMetrics:
    """Elements that match exactly or not at all: each element's error is 0 (equal) or 1 (not):
    max_abs 1 and mismatch_frac the share that differ."""
    share = float(bad.mean()) if bad.size else 0.0
    worst = float(bad.any())
    return OutputMetrics(name, shape, max_abs=worst, max_rel=worst, mean_abs=share, rmse=math.sqrt(share),
                         cosine=1.0 - share, mismatch_frac=share, nan_count=0, inf_count=0,
                         atol_needed=INF if worst else 0.0, rtol_needed=INF if worst else 0.0)


def _parts(array: np.ndarray) -> np.ndarray:
    """Complex values as (real, imaginary) pairs of reals, a real array with imaginary parts 0: each
    part is judged like any real element, so a complex reference is never cast to its real part
    (numpy's ComplexWarning, and +5j gone unseen)."""
    return np.stack([array.real, array.imag], axis=-1) if np.iscomplexobj(array) else \
        np.stack([array, np.zeros_like(array)], axis=-1)


def compare_output(name: str, actual: np.ndarray, reference: np.ndarray, atol: float, rtol: float,
                   mask: np.ndarray | None = None) -> OutputMetrics:
    """`mask`: the case's mask input; where it is 0 this output's elements are left out (when
    its leading dimensions are the mask's shape: acceptance.judged_positions). Complex outputs or
    references: see _parts."""
    if actual.shape != reference.shape:  # a wrong answer, not a failure to judge: fail, with no number
        return OutputMetrics(name, tuple(reference.shape), *[math.nan] * 5, mismatch_frac=1.0, nan_count=0, inf_count=0,
                             atol_needed=INF, rtol_needed=INF,
                             wrong_shape=f"{name} has shape {tuple(actual.shape)}, the reference {tuple(reference.shape)}")
    if reference.dtype.kind in "USO" or actual.dtype.kind in "USO":
        return _compare_strings(name, actual, reference)
    shape = tuple(reference.shape)
    kept = judged_positions(mask, shape, name)
    left_out = 0 if kept is None else int(kept.size - kept.sum())
    if kept is not None:
        actual, reference = actual[kept], reference[kept]
    if reference.dtype.kind == "V" or actual.dtype.kind == "V":
        return replace(_compare_bits(name, shape, actual, reference), left_out=left_out)
    if np.iscomplexobj(actual) or np.iscomplexobj(reference):
        actual, reference = _parts(actual), _parts(reference)
    if exact_kind(actual) and exact_kind(reference):
        return _compare_integers(name, shape, actual.ravel(), reference.ravel(), left_out)
    if exact_kind(actual) and whole_numbers(reference):  # a float file holding whole numbers: compared as integers
        return _compare_integers(name, shape, exact_values(actual.ravel()), exact_values(reference.ravel()), left_out)
    if exact_kind(actual):  # a float file for an integer output, with a fraction, NaN or Inf (never equal to one):
        atol, rtol = 0.0, 0.0  # the output is still exact (an index off by one is wrong, whatever the tolerance)
    out = actual.astype(np.float64).ravel()
    ref = reference.astype(np.float64).ravel()
    judged = np.isfinite(ref)
    finite = np.isfinite(out)
    with np.errstate(invalid="ignore", over="ignore"):
        close = finite & (np.abs(out - ref) <= atol + rtol * np.abs(ref))
        same_nonfinite = (np.isnan(out) & np.isnan(ref)) | (np.isinf(ref) & (out == ref))
    bad = ~np.where(judged, close, same_nonfinite)
    counts = {"mismatch_frac": float(bad.mean()) if bad.size else 0.0,
              "nan_count": int((np.isnan(out) & ~np.isnan(ref)).sum()),
              "inf_count": int((np.isinf(out) & (out != ref)).sum()),
              "ref_nonfinite": int((~judged).sum()),
              "nonfinite_found": _nonfinite_found(out, ref, bad & ~judged, actual.dtype), "left_out": left_out}
    if (bad & ~(judged & finite)).any():  # a mismatch involving NaN or Inf: no finite error describes it
        return OutputMetrics(name, shape, INF, INF, INF, INF, math.nan, **counts,
                             atol_needed=INF, rtol_needed=INF)
    out, ref = out[judged], ref[judged]
    diff = np.abs(out - ref)
    over_atol = diff[diff > atol]  # what a larger rtol would have to cover
    with np.errstate(divide="ignore", over="ignore"):  # an error on an exact (or subnormal) 0: no rtol covers it
        rtol_needed = float(((over_atol - atol) / np.abs(ref[diff > atol])).max()) if over_atol.size else 0.0
        atol_needed = float(np.maximum(diff - rtol * np.abs(ref), 0).max()) if diff.size else 0.0
    if exact_kind(actual) and bad.any():  # an integer output: no tolerance passes it
        atol_needed = rtol_needed = INF
    return OutputMetrics(
        name=name,
        shape=shape,
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float((diff / np.maximum(np.abs(ref), REL_FLOOR)).max()) if diff.size else 0.0,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        rmse=float(np.sqrt((diff ** 2).mean())) if diff.size else 0.0,
        cosine=cosine(out, ref),
        **counts,
        atol_needed=atol_needed,
        rtol_needed=rtol_needed,
    )


def _worst_of(metrics: list[OutputMetrics], picks: dict) -> dict:
    return {key: pick(getattr(m, key) for m in metrics) for key, pick in picks.items()}


class MaskJudgesNothing(ValueError):
    """The case's mask applies to no output, or leaves out every element: the case's setting, said as
    such (it read as trtmatrix's own failure, "compare failed: ValueError"; issue 41, sweep 10 C8)."""


def _check_mask(mask: np.ndarray, reference: dict[str, np.ndarray]) -> None:
    """A mask decides what is judged: one that applies to no output, or leaves out every element
    there is, would turn "nothing judged" into a pass."""
    kept = {name: judged_positions(mask, ref.shape, name) for name, ref in reference.items()}
    if all(k is None for k in kept.values()):
        shapes = ", ".join(f"{name} {tuple(ref.shape)}" for name, ref in reference.items())
        raise MaskJudgesNothing(f"the mask input (shape {tuple(mask.shape)}) applies to no output (an output's leading "
                         f"dimensions must be the mask's shape; outputs: {shapes})")
    judged = sum(int(k.sum()) if k is not None else ref.size for k, ref in zip(kept.values(), reference.values()))
    if judged == 0 and any(ref.size for ref in reference.values()):
        raise MaskJudgesNothing(f"the mask input (shape {tuple(mask.shape)}) is 0 everywhere: it leaves out every element "
                         "of every output, nothing to judge")


class NothingToJudge(ValueError):
    """A reference output that is NaN everywhere: a NaN output would "match" it, so nothing is judged."""

    def __init__(self, output: str):
        self.output = output
        super().__init__(f"the reference of output {output!r} is NaN everywhere: nothing to judge against")


def judging_error(exc: Exception, reference: str | None) -> str:
    """A cell's `error` when judging it raised: a reference with nothing to judge against names the
    reference and the output (the model's evaluation, or the user's file, gives NaN there); anything
    else is trtmatrix's own failure."""
    if isinstance(exc, NothingToJudge):
        return (f"nothing to judge against: its reference ({reference or 'unknown'}) is NaN everywhere in output "
                f"{exc.output!r}")
    if isinstance(exc, MaskJudgesNothing):
        return f"nothing judged: {exc}; fix the case's `mask`"
    return f"compare failed: {type(exc).__name__}: {exc}"


def compare_outputs(actual: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                    atol: float, rtol: float) -> tuple[str, dict, list[OutputMetrics]]:
    """Return (verdict, worst metrics over outputs, per-output metrics)."""
    return compare_runs([actual], reference, atol, rtol)


def compare_runs(runs: list[dict[str, np.ndarray]], reference: dict[str, np.ndarray],
                 atol: float, rtol: float, mask: np.ndarray | None = None) -> tuple[str, dict, list[OutputMetrics]]:
    """Like compare_outputs, judged on the worst run: each metric of each output is its worst
    over the runs. `mask`: see compare_output."""
    missing = sorted({name for outputs in runs for name in reference if name not in outputs})
    if missing:
        raise ValueError(f"engine returned no value for outputs {missing}")
    for name, expected in reference.items():  # a NaN output would "match" it: no pass to be had from it
        kept = judged_positions(mask, tuple(expected.shape), name)  # the elements judged (sweep 15 H12: the mask's)
        judged = expected if kept is None else expected[kept]
        if judged.size and np.issubdtype(judged.dtype, np.inexact) and np.isnan(judged).all():
            raise NothingToJudge(name)
    if mask is not None:
        _check_mask(mask, reference)
    per_output = []
    for name in reference:
        each = [compare_output(name, outputs[name], reference[name], atol, rtol, mask) for outputs in runs]
        per_output.append(replace(each[0], **_worst_of(each, WORST_RUN)))
    worst = _worst_of(per_output, WORST)
    worst["extra_outputs"] = sorted({name for outputs in runs for name in outputs if name not in reference})
    return ("fail" if worst["mismatch_frac"] > 0 else "pass"), worst, per_output


def drift(first: dict[str, np.ndarray], later: dict[int, dict[str, np.ndarray]]) -> tuple[float, int | None]:
    """(largest |later - first| over runs and outputs, index of the first run that differed).
    Values that differ in being NaN or Inf count as an infinite difference."""
    largest = 0.0
    for outputs in later.values():
        for name, a in first.items():
            b = outputs.get(name)
            if b is None or b.shape != a.shape:
                return INF, min(later)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
            with np.errstate(invalid="ignore"):
                d = np.where(same, 0.0, np.nan_to_num(np.abs(a64 - b64), nan=INF))
            largest = max(largest, float(d.max()) if d.size else 0.0)
    return largest, (min(later) if later else None)


def load_runs(outputs: Path, repeats: Path) -> tuple[dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
    """The first run's outputs, and {run index: outputs} of the later runs that differed."""
    with np.load(outputs) as data:
        first = dict(data)
    later: dict[int, dict[str, np.ndarray]] = {}
    if repeats.is_file():
        with np.load(repeats) as data:
            for key in data.files:
                index, name = key.split("/", 1)
                later.setdefault(int(index), {})[name] = data[key]
    return first, later


def settle(reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
           marks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference with the elements `marks` marks holding the outputs' own values (a single True:
    the whole output, whatever its shape): elements a step float32 rounding decides, no one's to
    judge (prepare's DECIDES; issue 41, sweep 8 A16)."""
    def one(name: str, value: np.ndarray) -> np.ndarray:
        mark, own = marks.get(name), outputs.get(name)
        if mark is None or own is None:
            return value
        if mark.ndim == 0:
            return own if mark else value
        return np.where(mark, own, value).astype(value.dtype) if mark.shape == value.shape == own.shape else value
    return {name: one(name, value) for name, value in reference.items()}


def compare_files(outputs: Path, reference: Path, atol: float, rtol: float, accept: Acceptance | None = None,
                  repeats: Path | None = None, mask: np.ndarray | None = None,
                  settled: Path | None = None) -> tuple[str, dict]:
    """Verdict and record fields (worst metrics, drift, per-output metrics as JSON) from stored
    .npz files: the same judgement after a run and when `trtmatrix report` re-judges a stored one.
    With an acceptance rule the rule gives the verdict on the floating outputs, integers and booleans
    still match exactly (acceptance.judge_slices); atol/rtol still give the metrics.
    `repeats`: the later runs that differed (default: the worker's file beside `outputs`).
    `mask`: the case's mask input, whose zeros are left out of judging. `settled`: a file of
    booleans per output whose marked elements take the first run's values (no failure there)."""
    first, later = load_runs(outputs, repeats or outputs.with_name(REPEATS))
    with np.load(reference) as data:
        ref = dict(data)
    if settled is not None:
        with np.load(settled) as data:
            ref = settle(ref, first, dict(data))
    runs = [first, *later.values()]
    verdict, worst, per_output = compare_runs(runs, ref, atol, rtol, mask)
    rule = {"rule": None, "top1": None, "worst_slice": None}
    if accept is not None:
        verdict, rule = judge_by_rule(runs, ref, accept, atol, rtol, mask)
    drift_max_abs, drift_index = drift(first, later)
    return verdict, {**worst, **rule, "extra_outputs": ", ".join(worst["extra_outputs"]) or None,
                     "drift_max_abs": drift_max_abs,
                     "drift_run": None if drift_index is None else drift_index + 1,
                     "outputs": json.dumps([m.to_dict() for m in per_output])}


def judged_beside_a_step(outputs: Path, reference: Path, decides: Path, atol: float, rtol: float,
                         check: str, accept: Acceptance | None = None, repeats: Path | None = None,
                         mask: np.ndarray | None = None) -> tuple[str, dict]:
    """A cell whose float64 reference a step float32 rounding decides at some elements (`decides`;
    `check`: the reference check's words): judged at the others, where every reference agrees, so a
    fault there is the engine's (issue 41, sweep 17 K6: one flipped element hid a real fault); where
    it passes there, at every element against float64, and within tolerance of it either side of the
    step passes (K7: a flip moving the output by 1e-6 against a tolerance of 1e-4); else against the
    side each decided element is nearer to (the referee's float32 side beside `decides`): beyond both
    sides is a fail (sweep 19 M5: 17 where the step gives 6 or 7), within one `disputed`."""
    verdict, judged = compare_files(outputs, reference, atol, rtol, accept, repeats, mask, settled=decides)
    where = check.split(":")[0]
    if verdict == "fail":
        return verdict, {**judged, "error": f"{BESIDE_A_STEP}{where}; those elements are left out)"}
    verdict, judged = compare_files(outputs, reference, atol, rtol, accept, repeats, mask)
    if verdict == "pass":
        return "pass", {**judged, "error": None}
    side = decides.with_name(decides.name.removesuffix("decides.npz") + "side.npz")  # store.STEP_SIDE beside it
    if side.is_file() and compare_files(outputs, _nearer_sides(outputs, reference, decides, side), atol, rtol, accept,
                                        repeats, mask)[0] == "fail":
        return "fail", {**judged, "error": f"{BEYOND_BOTH}{where}, beyond the tolerance of both its sides)"}
    return "disputed", {**judged, "error": f"reference disputed: {check}"}


def _nearer_sides(outputs: Path, reference: Path, decides: Path, side: Path) -> io.BytesIO:
    """The reference with each element a step decides taken from the side the engine's output is
    nearer to (float64's or float32's); an output whose length the step decides, the side of the
    engine's length. An .npz in memory, as compare_files reads one."""
    with np.load(outputs) as own, np.load(reference) as ref, np.load(decides) as marks, np.load(side) as other:
        nearer = {}
        for name in ref.files:
            value = ref[name]
            if name in marks.files and name in other.files and name in own.files:
                mark, alt, mine = marks[name], other[name], own[name]
                if mark.ndim == 0 and value.ndim:  # a step decided its length: all of it
                    value = alt if mark and mine.shape == alt.shape != value.shape else value
                elif mine.shape == alt.shape == value.shape == mark.shape:
                    with np.errstate(invalid="ignore"):  # ±inf and NaN: the side that holds them as the engine does
                        closer = (mine == alt) if value.dtype.kind not in "fc" else (mine == alt) | (
                            np.isnan(mine) & np.isnan(alt)) | (np.abs(mine.astype(np.float64) - alt) < np.abs(
                                mine.astype(np.float64) - value))
                    value = np.where(mark & closer, alt.astype(value.dtype), value)
            nearer[name] = value
    memory = io.BytesIO()
    np.savez(memory, **nearer)
    memory.seek(0)
    return memory


BEYOND_BOTH = "fails at elements a step decides ("
BESIDE_A_STEP = "fails at elements no step decides ("
