"""Comparing two output arrays: exactly (bit for bit) or within tolerances.

Data movement must reproduce every bit, NaN payloads and signed zeros included, so the
default is a comparison of the raw bytes. Tolerances exist for models that also contain
floating-point math, where two runtimes may round differently.
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
    exp, act = _as_float(expected), _as_float(actual)
    with np.errstate(all="ignore"):
        diff = np.abs(exp.astype(np.float64) - act.astype(np.float64))
        both_nan = np.isnan(exp) & np.isnan(act) if np.issubdtype(exp.dtype, np.floating) else 0
        diff = np.where(both_nan, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = diff / np.maximum(np.abs(exp.astype(np.float64)), np.finfo(np.float64).tiny)
    max_abs = float(diff.max())
    max_rel = float(np.where(diff == 0, 0.0, rel).max())
    if atol == 0 and rtol == 0:
        e_bytes = np.ascontiguousarray(expected).view(np.uint8).reshape(expected.size, -1)
        a_bytes = np.ascontiguousarray(actual).view(np.uint8).reshape(actual.size, -1)
        bad = int(np.any(e_bytes != a_bytes, axis=1).sum())
        return Difference(bad == 0, bad, max_abs, max_rel, "" if bad == 0 else "bits differ")
    bad = int((diff > atol + rtol * np.abs(exp.astype(np.float64))).sum())
    return Difference(bad == 0, bad, max_abs, max_rel, "" if bad == 0 else "outside tolerance")
