"""Comparing two output arrays: exactly (bit for bit) or within tolerances.

Data movement must reproduce every bit, NaN payloads and signed zeros included, so the
default is a comparison of the raw bytes. Tolerances exist for models that also contain
floating-point math, where two runtimes may round differently; they apply to finite values:
an infinity must meet the same infinity and a NaN a NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class Difference:
    passed: bool
    mismatches: int
    max_abs_error: float
    max_rel_error: float
    reason: str = ""


def _as_float(array: np.ndarray) -> np.ndarray:
    if array.dtype == ml_dtypes.bfloat16 or array.dtype == np.float16:
        return array.astype(np.float32)
    if array.dtype == np.bool_:
        return array.astype(np.int8)
    return array


def compare(expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> Difference:
    if expected.dtype != actual.dtype:
        return Difference(
            False,
            -1,
            float("inf"),
            float("inf"),
            f"dtype {actual.dtype} != expected {expected.dtype}",
        )
    if expected.shape != actual.shape:
        return Difference(
            False,
            -1,
            float("inf"),
            float("inf"),
            f"shape {list(actual.shape)} != expected {list(expected.shape)}",
        )
    if expected.size == 0:
        return Difference(True, 0, 0.0, 0.0)
    exp = _as_float(expected).astype(np.float64)
    act = _as_float(actual).astype(np.float64)
    with np.errstate(all="ignore"):
        # Equal values (infinities of one sign included) and NaN against NaN agree exactly.
        same = (exp == act) | (np.isnan(exp) & np.isnan(act))
        diff = np.where(same, 0.0, np.abs(exp - act))
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = diff / np.maximum(np.abs(exp), np.finfo(np.float64).tiny)
        rel = np.where(np.isnan(rel), np.inf, rel)  # an infinite difference from infinity
    max_abs = float(diff.max())
    max_rel = float(np.where(diff == 0, 0.0, rel).max())
    if atol == 0 and rtol == 0:
        e_bytes = np.ascontiguousarray(expected).view(np.uint8).reshape(expected.size, -1)
        a_bytes = np.ascontiguousarray(actual).view(np.uint8).reshape(actual.size, -1)
        bad = int(np.any(e_bytes != a_bytes, axis=1).sum())
        return Difference(bad == 0, bad, max_abs, max_rel, "" if bad == 0 else "bits differ")
    # A tolerance applies to finite values only: an infinite or NaN expected value must be
    # met exactly (its tolerance would be infinite or NaN, passing anything).
    finite = np.isfinite(exp) & np.isfinite(act)
    with np.errstate(all="ignore"):
        outside = diff > atol + rtol * np.abs(np.where(finite, exp, 0.0))
    bad = int((~same & (~finite | outside)).sum())
    return Difference(bad == 0, bad, max_abs, max_rel, "" if bad == 0 else "outside tolerance")
