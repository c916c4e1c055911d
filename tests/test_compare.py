"""Metrics and verdicts on arrays whose answers are known by hand."""

import math

import numpy as np
import pytest

from matrix.compare import compare_output, compare_outputs


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
    assert worst["max_abs"] == 0.0  # the finite elements are exact


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


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="shape"):
        compare_output("y", np.zeros((2, 3)), np.zeros((3, 2)), 1, 1)
