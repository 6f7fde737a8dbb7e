"""Tolerances apply to finite values: an infinity must meet the same infinity and a NaN a
NaN (a tolerance around an infinite or NaN expected value passed anything)."""

from __future__ import annotations

import numpy as np
import pytest

from b2s_onnx.parity.compare import compare

INF, NAN = np.inf, np.nan


@pytest.mark.parametrize(
    ("expected", "actual"),
    [(-INF, NAN), (INF, -INF), (NAN, 1.0), (1.0, INF), (6e4, INF), (INF, 6e4), (-INF, 0.0)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_non_finite_values_must_match_exactly(expected, actual, dtype):
    result = compare(np.array([expected, 1.0], dtype), np.array([actual, 1.0], dtype), 1e-4, 1e-3)
    assert not result.passed
    assert result.mismatches == 1
    assert result.max_abs_error == np.inf
    assert result.max_rel_error == np.inf


@pytest.mark.parametrize("value", [INF, -INF, NAN])
def test_equal_non_finite_values_pass_with_tolerances(value):
    result = compare(np.array([value, 2.0]), np.array([value, 2.001]), 1e-4, 1e-3)
    assert result.passed
    assert result.max_abs_error == pytest.approx(0.001)


def test_finite_values_keep_their_tolerance():
    assert compare(np.float32([100.0]), np.float32([100.09]), 1e-4, 1e-3).passed
    assert not compare(np.float32([100.0]), np.float32([100.2]), 1e-4, 1e-3).passed
