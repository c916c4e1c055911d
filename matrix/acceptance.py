"""How a case's users judge an output, beside element-wise closeness: which elements count (a
mask input's zeros, padding, are left out) and acceptance rules (cosine, top-k agreement), taken
over the whole output or per slice along an axis (per sentence, per query), where the worst slice
decides and is named.

A mask of shape M applies to every output whose leading dimensions are M (attention_mask [B, T]:
last_hidden_state [B, T, H] yes, a pooled embedding [B, H] no, unless H happens to equal T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import Acceptance


def exact_kind(array: np.ndarray) -> bool:
    """Integers and booleans (indices, counts, masks) are compared exactly: no tolerance and no rule
    makes an argmax off by one, or a flipped mask element, right."""
    return np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_


def whole_numbers(array: np.ndarray) -> bool:
    """Whether a floating array holds only finite whole numbers: an expected file's float64 2**62
    for an integer output, which is compared as the integer it is."""
    return np.issubdtype(array.dtype, np.floating) and bool(np.isfinite(array).all() and (np.floor(array) == array).all())


def exact_values(array: np.ndarray) -> np.ndarray:
    """Integers or whole floats as Python integers (an object array): an int64 output held against a
    float file through float64 loses what lies past 2**53 (2**62 + 1 is 2**62 there), and numpy
    compares an int64 with a float as floats; Python integers compare exactly."""
    return np.array([int(v) for v in array.ravel().tolist()], dtype=object).reshape(array.shape)


class OutputMask(np.ndarray):
    """A case's mask that leaves some outputs alone though their leading dimensions are its shape:
    those whose axes the model names otherwise (a pooled [N, 384] of hidden units under a mask
    [N, 384] of tokens: issue 41, sweep 18 L20). `left_alone`: {output: why}."""

    left_alone: dict[str, str] = {}

    def __array_finalize__(self, obj) -> None:
        self.left_alone = getattr(obj, "left_alone", {})


def with_left_alone(mask: np.ndarray, left_alone: dict[str, str]) -> np.ndarray:
    if not left_alone:
        return mask
    masked = np.asarray(mask).view(OutputMask)
    masked.left_alone = dict(left_alone)
    return masked


def judged_positions(mask: np.ndarray | None, shape: tuple[int, ...], name: str | None = None) -> np.ndarray | None:
    """Where output `name` of `shape` is judged (True) under the mask, or None: all of it."""
    if mask is None or len(shape) < mask.ndim or tuple(shape[:mask.ndim]) != mask.shape \
            or name in getattr(mask, "left_alone", {}):
        return None
    kept = (mask != 0).reshape(mask.shape + (1,) * (len(shape) - mask.ndim))
    return np.broadcast_to(kept, shape)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two vectors as 1 - |â - b̂|²/2 over their unit vectors: bit-identical (or
    exactly proportional) vectors give exactly 1, where a dot product over norms gives
    0.9999999999999998 and fails `cosine = 1.0`. Each is scaled by its largest magnitude first, so
    no norm overflows or underflows. The zero vector has no direction: 1 against another zero
    vector, else 0 (a rule judges such a slice element-wise instead: judge_slices). Sums of
    products by einsum, not BLAS (np.dot, np.linalg.norm): a threaded BLAS wakes its whole pool
    for each call and lets one caller in at a time, which held the host's judging to about 20
    cells a second on a 64-core host whatever its threads (issue 43)."""
    a, b = a.ravel(), b.ravel()
    units = []
    for v in (a, b):
        largest = float(np.abs(v).max()) if v.size else 0.0
        if largest == 0.0:
            units.append(None)
            continue
        scaled = v / largest
        units.append(scaled / np.sqrt(np.einsum("i,i->", scaled, scaled)))
    if units[0] is None or units[1] is None:
        return 1.0 if units[0] is None and units[1] is None else 0.0
    apart = units[0] - units[1]
    return float(np.clip(1.0 - np.einsum("i,i->", apart, apart) / 2.0, -1.0, 1.0))


def _direction_free(out: np.ndarray, ref: np.ndarray) -> bool:
    """Whether a slice's output or reference is the zero vector (a direction is undefined there)."""
    return not out.any() or not ref.any()


def real_valued(name: str, array: np.ndarray) -> np.ndarray:
    """An acceptance rule's measures (a direction, a ranking) are of real vectors: a complex
    output is refused by name, never cast to its real part in silence."""
    if np.iscomplexobj(array):
        raise ValueError(f"output {name!r} is complex: cosine and top-k rules take real values; judge it "
                         "element-wise (atol/rtol), which compares real and imaginary parts")
    return array


def _slices(actual: np.ndarray, reference: np.ndarray, kept: np.ndarray | None,
            axis: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(output, reference) as float64 vectors of the judged elements: one pair for the whole
    output, or one per index along `axis`."""
    out, ref = actual.astype(np.float64), reference.astype(np.float64)
    keep = np.ones(out.shape, bool) if kept is None else kept
    if axis is None:
        return [(out[keep], ref[keep])]
    return [(np.take(out, i, axis)[np.take(keep, i, axis)], np.take(ref, i, axis)[np.take(keep, i, axis)])
            for i in range(out.shape[axis])]


def _rows(actual: np.ndarray, reference: np.ndarray, kept: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Top-k rows without an axis: all axes but the last; a last axis of size 1 (a score per
    item) makes one row, ranked across items. Left-out elements are not ranked."""
    def rows(a: np.ndarray) -> np.ndarray:
        return a.reshape(1, -1) if a.ndim == 0 or a.shape[-1] == 1 else a.reshape(-1, a.shape[-1])

    out, ref = rows(actual.astype(np.float64)), rows(reference.astype(np.float64))
    keep = rows(np.ones(actual.shape, bool) if kept is None else kept)
    return [(o[k], r[k]) for o, r, k in zip(out, ref, keep)]


# How close to the reference's largest value an item still ties with it: a few float32 units of
# its magnitude, a ranking no float32 output can hold (sigmoid(20) and sigmoid(25) are both 1.0f).
TIED_UNITS = 4 * float(np.finfo(np.float32).eps)


def _agrees(out: np.ndarray, ref: np.ndarray, k: int) -> bool:
    """Whether one of the reference's largest items (all of them where the reference ties, or ranks
    them only within float32's rounding: issue 41, sweep 7 N4) is among the output's k largest.
    Ties in the output are counted against it, except with other reference-largest items: a
    constant output ranks nothing. An infinity agrees only where the reference holds the same one
    (masked logits at -inf); a NaN only where the reference holds NaN, which ranks nothing (a fully
    masked row: sweep 9 B1), any other NaN never."""
    both = np.isnan(out) & np.isnan(ref)
    out, ref = out[~both], ref[~both]
    if not ref.size:
        return True
    if np.isnan(out).any() or (np.isinf(out) & (out != ref)).any():
        return False
    top = ref.max()
    tops = ref >= top - TIED_UNITS * abs(top) if np.isfinite(top) else ref == top
    return any(int((~tops & (out >= out[i])).sum()) < k for i in np.flatnonzero(tops))


def top_agreement(actual: np.ndarray, reference: np.ndarray, k: int, kept: np.ndarray | None = None) -> float:
    """Share of rows whose reference argmax is among the output's k largest values (see _rows)."""
    pairs = [(o, r) for o, r in _rows(actual, reference, kept) if r.size]
    return sum(_agrees(o, r, k) for o, r in pairs) / len(pairs) if pairs else 1.0


@dataclass
class Worst:
    """The worst value of one measure over outputs, inferences and slices, and where it was."""

    value: float | None = None
    where: str | None = None

    def offer(self, value: float, where: str) -> None:
        if self.value is None or not value >= self.value:  # NaN is the worst of all
            self.value, self.where = value, where


def _can_fail(accept: Acceptance, pairs: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Whether top-k agreement can fail on these rows: over k or fewer items it holds whatever
    the output (a reranker's one score at batch 1)."""
    return not pairs or any(r.size > accept.topk for _, r in pairs)


def _where(accept: Acceptance, index: int, ref: np.ndarray, name: str) -> str:
    if accept.axis is None:
        return name
    return f"{name}, {accept.axis_name} {index + 1} of {ref.shape[accept.axis]}"


def cosine_text(value: float | None) -> str:
    """'1 − 3.2e-07' rather than a rounded '1': near 1 the distance is the news."""
    if value is None or math.isnan(value):
        return "undefined (NaN/Inf)"
    if value == 1.0:
        return "1 (exactly)"
    return f"1 − {1 - value:.1e}" if value > 0.999 else f"{value:.5f}"


def _non_finite(count: int) -> str:
    return "infinities or NaNs" if count > 1 else "infinity or NaN"


def _slice_cosine(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> tuple[float, str]:
    """A slice's cosine and its text. Where the output or the reference is the zero vector (an
    exact-zero output against a 1e-30 reference) no direction can be compared: the slice holds
    when its elements are within atol + rtol·|ref|, and says so. Elements where the output holds the
    same infinity as the reference (an additive attention mask's -inf), or NaN where it holds NaN (a
    fully masked row's softmax), are equal, as the element-wise table takes them, and left out of
    the cosine (issue 41, sweep 8 A7, sweep 9 B1); any other infinity or NaN leaves the cosine
    undefined, which never holds."""
    same = (np.isinf(out) & (out == ref)) | (np.isnan(out) & np.isnan(ref))
    out, ref = out[~same], ref[~same]
    count = int(same.sum())
    left = f" ({count} equal {_non_finite(count)} left out)" if count else ""
    if not out.size:
        return 1.0, f"equal {_non_finite(2)} only"
    if not (np.isfinite(out).all() and np.isfinite(ref).all()):
        return math.nan, cosine_text(math.nan)
    if _direction_free(out, ref):
        with np.errstate(over="ignore"):
            close = bool((np.abs(out - ref) <= atol + rtol * np.abs(ref)).all())
        value = 1.0 if close else cosine(out, ref)
        return value, f"no direction (a zero vector), {'within' if close else 'outside'} atol/rtol{left}"
    value = cosine(out, ref)
    return value, f"cosine {cosine_text(value)}{left}"


def _differing(runs: list[dict[str, np.ndarray]], name: str, ref: np.ndarray, kept: np.ndarray | None) -> int:
    """How many judged elements of an exact (integer or boolean) output differ, in the worst run."""
    keep = np.ones(ref.shape, bool) if kept is None else kept
    if whole_numbers(ref):  # a float file's 2**62 against an int64 2**62 + 1: compared as integers
        ref = exact_values(ref)
        return max(int((exact_values(outputs[name]) != ref)[keep].sum()) for outputs in runs)
    return max(int((outputs[name] != ref)[keep].sum()) for outputs in runs)


def judge_slices(runs: list[dict[str, np.ndarray]], reference: dict[str, np.ndarray], mask: np.ndarray | None,
                 accept: Acceptance, atol: float, rtol: float) -> tuple[Worst, Worst, set[str], dict[str, int]]:
    """(worst cosine, worst top-k agreement) of the rule's measures, each with where it was, the
    outputs top-k cannot fail on (not judged by it), and {exact output: elements that differ}: the
    rule judges the floating outputs; integer and boolean ones are compared exactly (exact_kind).
    Slices the mask leaves empty are not judged; atol/rtol judge the slices that have no direction
    (_slice_cosine)."""
    cosines, agreement, vacuous, exact = Worst(), Worst(), set(), {}
    for name, ref in reference.items():
        real_valued(name, ref)
        if accept.axis is not None and accept.axis >= ref.ndim:
            raise ValueError(f"the rule's axis {accept.axis} is not an axis of output {name!r} (shape {ref.shape})")
        kept = judged_positions(mask, ref.shape, name)
        if any(exact_kind(outputs[name]) for outputs in runs):
            exact[name] = _differing(runs, name, ref, kept)
            continue
        for outputs in runs:
            slices = _slices(real_valued(name, outputs[name]), ref, kept, accept.axis)
            if accept.cosine is not None:
                for index, (out, r) in enumerate(slices):
                    if r.size:
                        value, text = _slice_cosine(out, r, atol, rtol)
                        cosines.offer(value, f"{_where(accept, index, ref, name)}: {text}")
            if accept.top1 is not None:
                ranked = slices if accept.axis is not None else _rows(outputs[name], ref, kept)
                if not _can_fail(accept, ranked):
                    vacuous.add(name)
                    continue
                agree = [_agrees(o, r, accept.topk) for o, r in ranked if r.size]
                wrong = agree.index(False) if False in agree else None
                agreement.offer(sum(agree) / len(agree) if agree else 1.0,
                                f"{_where(accept, wrong, ref, name)}: top{accept.topk} disagrees"
                                if wrong is not None and accept.axis is not None else None)
    return cosines, agreement, vacuous, exact


def judge_by_rule(runs: list[dict[str, np.ndarray]], reference: dict[str, np.ndarray], accept: Acceptance,
                  atol: float, rtol: float, mask: np.ndarray | None = None) -> tuple[str, dict]:
    """The verdict of an acceptance rule over every output, run (and slice) and the record fields
    it sets: the rule, the worst cosine and top-k agreement it measured, and where the failing
    (else the worst) measure was."""
    cosines, agreement, vacuous, exact = judge_slices(runs, reference, mask, accept, atol, rtol)
    rule = accept.text()
    if vacuous:  # top-k over k or fewer items: no condition; a rule of nothing else cannot fail
        if accept.cosine is None and agreement.value is None and not exact:
            raise ValueError(f"topk = {accept.topk} covers every item of output {sorted(vacuous)[0]!r} (at most "
                             f"{accept.topk} per row): the rule cannot fail")
        items = f"{accept.topk} item{'s' * (accept.topk != 1)}"
        rule += f" (top{accept.topk} not applied to {', '.join(sorted(vacuous))}: {items} per row or fewer)"
    if exact:
        rule += f" ({', '.join(exact)} compared exactly: integers and booleans)"
    differ = [f"{name}: {n} of {reference[name].size} elements differ (compared exactly)"
              for name, n in exact.items() if n]
    # An undefined (NaN) cosine never holds; none at all (only exact outputs) leaves it to them.
    cosine_holds = accept.cosine is None or cosines.value is None or cosines.value >= accept.cosine
    top1_holds = accept.top1 is None or agreement.value is None or agreement.value >= accept.top1
    where = agreement.where if cosine_holds and not top1_holds else cosines.where or agreement.where
    # the rule's cosine, or none where it judged no floating output: never another output's (sweep 18 L16)
    fields = {"rule": rule, "top1": agreement.value, "worst_slice": differ[0] if differ else where,
              "cosine": cosines.value}
    return ("pass" if cosine_holds and top1_holds and not differ else "fail"), fields
