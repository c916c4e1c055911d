"""Metrics, verdicts and drift on arrays whose answers are known by hand."""

import math
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from matrix.compare import compare_files, compare_output, compare_outputs, compare_runs, drift
from matrix.report.error_text import drift_text, worst_error
from matrix.worker.cell import save_runs
from matrix.worker.files import OUTPUTS, REPEATS


def test_one_element_out_of_atol():
    ref = np.array([1.0, 2.0, 3.0, 4.0])
    out = np.array([1.0, 2.0, 3.3, 4.0], dtype=np.float32)
    m = compare_output("y", out, ref, atol=0.1, rtol=0.0)
    assert m.max_abs == pytest.approx(0.3, rel=1e-6)
    assert m.max_rel == pytest.approx(0.1, rel=1e-6)
    assert m.mean_abs == pytest.approx(0.075, rel=1e-6)
    assert m.rmse == pytest.approx(math.sqrt(0.09 / 4), rel=1e-6)
    assert m.mismatch_frac == 0.25
    verdict, worst, _ = compare_outputs({"y": out}, {"y": ref}, atol=0.1, rtol=0.0)
    assert verdict == "fail" and worst["max_abs"] == pytest.approx(0.3, rel=1e-6)


def test_rtol_scales_with_the_reference():
    ref, out = np.array([100.0, 0.0]), np.array([100.5, 0.0])
    assert compare_outputs({"y": out}, {"y": ref}, atol=0.0, rtol=0.01)[0] == "pass"
    assert compare_outputs({"y": out}, {"y": ref}, atol=0.0, rtol=0.001)[0] == "fail"


def test_nan_fails_whatever_the_tolerance():
    ref = np.ones(8)
    out = ref.copy()
    out[3] = np.nan
    verdict, worst, per_output = compare_outputs({"y": out}, {"y": ref}, atol=1e9, rtol=1e9)
    assert verdict == "fail"
    assert worst["nan_count"] == 1 and per_output[0].mismatch_frac == 1 / 8
    # The finite elements are exact, but a NaN must never show as a small error.
    assert worst["max_abs"] == worst["max_rel"] == worst["rmse"] == math.inf
    assert math.isnan(worst["cosine"])
    assert worst_error(worst) == "NaN×1"


def test_nan_where_the_reference_is_nan_is_not_counted():
    ref = np.array([1.0, np.nan, 3.0])
    out = np.array([1.0, np.nan, 3.0])
    verdict, worst, _ = compare_outputs({"y": out}, {"y": ref}, atol=0.0, rtol=0.0)
    assert verdict == "pass" and worst["nan_count"] == 0 and worst["max_abs"] == 0.0


def test_judged_on_the_worst_run_not_the_last():
    ref = np.linspace(-1, 1, 10)
    wrong = ref.copy()
    wrong[4] += 5.0
    verdict, worst, per_output = compare_runs([{"y": wrong}, {"y": ref}, {"y": ref}], {"y": ref}, 1e-3, 0.0)
    assert verdict == "fail"
    assert worst["max_abs"] == pytest.approx(5.0) and per_output[0].mismatch_frac == pytest.approx(0.1)
    nan_run = {"y": np.full_like(ref, np.nan)}
    verdict, worst, _ = compare_runs([{"y": ref}, nan_run], {"y": ref}, 1e-3, 0.0)
    assert verdict == "fail" and worst["nan_count"] == 10 and math.isnan(worst["cosine"])


def test_drift_is_the_largest_difference_from_the_first_run():
    first = {"y": np.array([1.0, 2.0, np.nan])}
    assert drift(first, {}) == (0.0, None)
    later = {3: {"y": np.array([1.0, 2.5, np.nan])}, 5: {"y": np.array([1.25, 2.0, np.nan])}}
    assert drift(first, later) == (0.5, 3)
    assert drift(first, {2: {"y": np.array([1.0, 2.0, 7.0])}}) == (math.inf, 2)  # a NaN that went away


def test_worker_keeps_only_distinct_runs_and_the_host_reads_them_back(tmp_path):
    good = {"y": np.arange(6, dtype=np.float32)}
    bad = {"y": good["y"] + 1}
    save_runs(str(tmp_path), [good, bad, bad, bad, good, bad])
    with np.load(tmp_path / REPEATS) as repeats:
        assert repeats.files == ["1/y"]  # runs 3-6 equal runs already kept
    np.savez(tmp_path / "reference.npz", y=good["y"].astype(np.float64))
    verdict, fields = compare_files(tmp_path / OUTPUTS, tmp_path / "reference.npz", 1e-3, 0.0)
    assert verdict == "fail" and fields["max_abs"] == 1.0
    assert (fields["drift_max_abs"], fields["drift_run"]) == (1.0, 2)  # run 2 of 6 (run 1: warm-up)
    assert drift_text(fields) == "drift 1.0e+00 from inference 2"

    (tmp_path / "same").mkdir()
    save_runs(str(tmp_path / "same"), [good] * 6)
    assert not (tmp_path / "same" / REPEATS).exists()
    assert compare_files(tmp_path / "same" / OUTPUTS, tmp_path / "reference.npz", 1e-3, 0.0)[1]["drift_max_abs"] == 0.0


def test_scaled_output_has_cosine_one_but_fails():
    ref = np.linspace(-1, 1, 50)
    m = compare_output("y", ref * 2, ref, atol=1e-3, rtol=1e-3)
    assert m.cosine == pytest.approx(1.0)
    assert m.max_abs == pytest.approx(1.0)


def test_worst_over_outputs_and_missing_output():
    ref = {"a": np.zeros(3), "b": np.ones(3)}
    out = {"a": np.array([0.0, 0.5, 0.0]), "b": np.array([1.0, 1.0, 0.0])}
    verdict, worst, per_output = compare_outputs(out, ref, atol=0.6, rtol=0.0)
    assert verdict == "fail"
    assert worst["max_abs"] == 1.0 and [m.name for m in per_output] == ["a", "b"]
    assert per_output[1].cosine == pytest.approx(2 / math.sqrt(6))
    assert worst["cosine"] == 0.0  # "a": zero reference, non-zero output
    with pytest.raises(ValueError, match="no value for outputs"):
        compare_outputs({"a": out["a"]}, ref, atol=1, rtol=1)


def test_an_output_of_another_shape_fails_with_both_shapes_and_no_number():
    """Issue 41, sweep 5 leftovers 1: a wrong shape is a wrong answer (fail), not an error; no
    max_abs measures it, even where another output of the cell has one (Python's max(0.1, nan) is 0.1)."""
    verdict, worst, _ = compare_outputs({"a": np.full(2, 0.1), "y": np.zeros((2, 3))},
                                        {"a": np.zeros(2), "y": np.zeros((3, 2))}, 1e-3, 0)
    assert verdict == "fail" and worst["wrong_shape"] == "y has shape (2, 3), the reference (3, 2)"
    assert math.isnan(worst["max_abs"]) and math.isinf(worst["atol_needed"]) and worst["mismatch_frac"] == 1.0


def test_equal_infinities_match_and_anything_else_against_non_finite_mismatches():
    ref = np.array([-np.inf, np.inf, np.nan, np.nan, 1.0])
    verdict, worst, _ = compare_outputs({"y": np.array([-np.inf, np.inf, np.nan, np.nan, 1.0])}, {"y": ref}, 0, 0)
    assert verdict == "pass" and worst["ref_nonfinite"] == 4 and worst["max_abs"] == 0.0
    for wrong in ([-np.inf, 5.0, np.nan, np.nan, 1.0], [-np.inf, np.inf, 123.0, np.nan, 1.0],
                  [np.inf, np.inf, np.nan, np.nan, 1.0]):
        verdict, worst, _ = compare_outputs({"y": np.array(wrong)}, {"y": ref}, 1e9, 1e9)
        assert verdict == "fail" and worst["mismatch_frac"] == 0.2 and math.isinf(worst["max_abs"]), wrong


def test_outputs_beyond_the_reference_are_listed():
    verdict, worst, _ = compare_outputs({"y": np.ones(2), "debug": np.zeros(1)}, {"y": np.ones(2)}, 0, 0)
    assert verdict == "pass" and worst["extra_outputs"] == ["debug"]


def _oracle(out: float, ref: float, atol: float, rtol: float) -> bool:
    """The rule of matrix/compare.py, one element at a time, written as plainly as possible."""
    if math.isnan(ref):
        return math.isnan(out)
    if math.isinf(ref):
        return out == ref
    return math.isfinite(out) and abs(out - ref) <= atol + rtol * abs(ref)


VALUES = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, -math.inf, 0.0]))


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=30),
       atol=st.sampled_from([0.0, 1e-3, 1.0]), rtol=st.sampled_from([0.0, 1e-2]))
def test_matches_the_element_by_element_oracle(pairs, atol, rtol):
    out = np.array([o for o, _ in pairs])
    ref = np.array([r for _, r in pairs])
    m = compare_output("y", out, ref, atol, rtol)
    matches = [_oracle(o, r, atol, rtol) for o, r in pairs]
    assert m.mismatch_frac == pytest.approx(matches.count(False) / len(pairs))
    assert m.nan_count == sum(math.isnan(o) and not math.isnan(r) for o, r in pairs)
    assert m.inf_count == sum(math.isinf(o) and o != r for o, r in pairs)
    assert m.ref_nonfinite == sum(not math.isfinite(r) for r in ref)
    nonfinite_mismatch = any(not ok and not (math.isfinite(o) and math.isfinite(r))
                             for ok, (o, r) in zip(matches, pairs))
    if nonfinite_mismatch:
        assert math.isinf(m.max_abs) and math.isnan(m.cosine)
    else:
        finite_ref = [abs(o - r) for o, r in pairs if math.isfinite(r)]
        assert m.max_abs == (max(finite_ref) if finite_ref else 0.0)


FINITE = st.floats(-1e3, 1e3, allow_subnormal=False)


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(FINITE, FINITE), min_size=1, max_size=30),
       atol=st.sampled_from([0.0, 1e-4, 1e-2]), rtol=st.sampled_from([0.0, 1e-3, 1e-2]))
@example(pairs=[(4.0, 2.2250738585072014e-308)], atol=0.0, rtol=0.0)  # 4 / 2**-1022 overflows: no rtol covers it
def test_the_tolerance_needed_is_the_smallest_that_passes(pairs, atol, rtol):
    """Judged again with atol_needed (at the same rtol), or rtol_needed (at the same atol), every
    element passes the oracle; with a little less, where more than the configured one is needed,
    some element fails."""
    out, ref = np.array([o for o, _ in pairs]), np.array([r for _, r in pairs])
    m = compare_output("y", out, ref, atol, rtol)
    assert all(_oracle(o, r, m.atol_needed * (1 + 1e-12) + 1e-300, rtol) for o, r in pairs)
    if m.atol_needed > atol:
        assert not all(_oracle(o, r, m.atol_needed * (1 - 1e-9), rtol) for o, r in pairs)
    if math.isinf(m.rtol_needed):  # an error beyond atol where the reference is 0, or so small no rtol covers it
        assert any(abs(o - r) - atol > abs(r) * sys.float_info.max for o, r in pairs)
    else:
        assert all(_oracle(o, r, atol, m.rtol_needed * (1 + 1e-9) + 1e-300) for o, r in pairs)
        if m.rtol_needed > rtol:
            assert not all(_oracle(o, r, atol, m.rtol_needed * (1 - 1e-6)) for o, r in pairs)


def test_no_tolerance_is_needed_that_a_nan_would_pass():
    m = compare_output("y", np.array([1.0, np.nan]), np.array([1.0, 2.0]), 1e-4, 1e-3)
    assert math.isinf(m.atol_needed) and math.isinf(m.rtol_needed)


def test_an_integer_output_against_a_float_file_is_exact_whatever_the_tolerance():
    """Issue 41, third sweep, finding 2: an argmax (int64) judged against a float expected file passed
    with an index off by one (`pass 1.00e+00` under atol 1), where an int64 file failed it."""
    indices = np.array([3, 1, 4], np.int64)
    off = compare_output("argmax", indices, np.array([3.0, 1.0, 5.0]), atol=1.0, rtol=0.5)
    assert off.mismatch_frac == pytest.approx(1 / 3) and off.max_abs == 1.0
    same = compare_output("argmax", indices, np.array([3.0, 1.0, 4.0]), atol=1.0, rtol=0.5)
    assert same.mismatch_frac == 0.0
    # issue 41, sweep 5 #1: an index one off "needed atol 1" (suggest wrote atol = 2.0): none passes it
    exact = compare_output("argmax", indices, np.array([3, 1, 5], np.int64), atol=1.0, rtol=0.5)
    assert math.isinf(off.atol_needed) and math.isinf(exact.atol_needed) and exact.max_abs == 1.0
    assert same.atol_needed == 0.0


def test_strings_match_exactly_whatever_the_tolerance():
    """A string tensor (onnxruntime's StringNormalizer, RegexFullMatch's inputs) is text: one changed
    character fails however wide the tolerance, and the error says how many elements differ."""
    reference = np.array(["monday", "tuesday", "wednesday", "thursday"])
    same = compare_output("y", np.array(["monday", "tuesday", "wednesday", "thursday"], dtype=object), reference, 1e9, 1e9)
    assert (same.mismatch_frac, same.max_abs, same.atol_needed) == (0.0, 0.0, 0.0)
    verdict, worst, _ = compare_outputs({"y": np.array(["monday", "Tuesday", "wednesday", "thursday"])},
                                        {"y": reference}, atol=1e9, rtol=1e9)
    assert verdict == "fail" and worst["mismatch_frac"] == 0.25 and math.isinf(worst["atol_needed"])


def test_a_sequence_is_judged_item_by_item_and_by_its_length(tmp_path):
    """The worker keeps a sequence output as its items and its length; a missing item, or one more
    than the reference has, is not a pass."""
    from matrix.worker.values import flatten

    reference = flatten({"s": [np.zeros(2), np.ones(3)]})
    assert sorted(reference) == ["s[0]", "s[1]", "s[]"]
    save_runs(str(tmp_path), [{"s": [np.zeros(2, np.float32), np.ones(3, np.float32)]}])
    assert compare_files(tmp_path / OUTPUTS, _saved(tmp_path, reference), 1e-7, 1e-3)[0] == "pass"
    save_runs(str(tmp_path), [{"s": [np.zeros(2, np.float32), np.ones(3, np.float32), np.ones(1, np.float32)]}])
    verdict, fields = compare_files(tmp_path / OUTPUTS, _saved(tmp_path, reference), 1e-7, 1e-3)
    assert verdict == "fail" and "s[2]" in fields["extra_outputs"]
    save_runs(str(tmp_path), [{"s": [np.zeros(2, np.float32)]}])
    with pytest.raises(ValueError, match=r"no value for outputs \['s\[1\]'\]"):
        compare_files(tmp_path / OUTPUTS, _saved(tmp_path, reference), 1e-7, 1e-3)


def _saved(folder, arrays):
    path = folder / "reference.npz"
    np.savez(path, **arrays)
    return path
