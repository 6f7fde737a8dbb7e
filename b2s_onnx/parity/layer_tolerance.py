"""How far may one layer's output in onnxruntime stray from OpenVINO's and still be right?

A global atol cannot answer it: a layer's rounding noise scales with its own magnitude, and
error that entered upstream grows as it flows through the network. So each port is judged
against its own scale and against how much its inputs already differed:

    tolerance = (BASE_REL + resolution) * scale + EPS_SUM * eps * summed
              + GROWTH * max(input_rel * scale, input_abs)

- ``scale``: the largest magnitude OpenVINO produced on that port.
- ``resolution``: float16's epsilon when either side returns the port as f16 (OpenVINO
  returns an exposed layer of an FP16 IR as f16, whatever precision it computed in), else 0.
- ``summed``: the magnitude the layer adds up before any cancellation, with ``eps`` float32's
  epsilon: the largest input magnitude times the largest sum of |weights| of one output for
  a convolution or a MatMul with constant weights, the largest input magnitude for additions
  and means, 0 otherwise. A convolution whose output cancels to 0.07 from inputs of 255
  leaves rounding noise of the inputs' size, not the output's.
- ``input_rel`` / ``input_abs``: the largest relative / absolute error measured on the
  layer's inputs (through inputs that were not compared, the nearest ones that were).
  ``GROWTH`` bounds how much a correct layer amplifies error it was fed.

When the inputs were not bit-identical, a discontinuous op (a comparison, Floor, TopK) may
flip a few elements: up to ``OUTLIER_FRACTION`` of them may then fall outside. Integer and
boolean outputs must match exactly (with the same allowance).

INT8 layers (FakeQuantize outputs) are judged in quantization steps. An input error of
``d`` input steps moves an output by at most ``d`` steps after rounding, and an element
flips by one step when its error straddles a rounding boundary, which for values spread
over the steps happens with probability (mean input error / input step). Measured on the
corpus's INT8 model, both hold with a margin below 2. So an element may move by
``1 + QUANT_GROWTH * d`` steps, and ``QUANT_FRACTION + FLIP_MARGIN * mean_d`` of the
elements may move at all; a wrong rounding mode moves about half of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BASE_REL = 1e-4
EPS_SUM = 64.0
GROWTH = 16.0
OUTLIER_FRACTION = 0.01
QUANT_FRACTION = 0.002
QUANT_GROWTH = 2.0
FLIP_MARGIN = 3.0
#: Elements compared at a time: bounds the temporaries of huge tensors.
SLICE = 1 << 22


@dataclass(frozen=True)
class InputError:
    """What a port's inputs already carried: the growth terms of its tolerance."""

    rel: float = 0.0
    abs: float = 0.0
    mean_abs: float = 0.0
    scale: float = 0.0
    exact: bool = True
    #: Magnitude of what the layer sums before cancellation (see the module docstring).
    summed: float = 0.0
    #: For a FakeQuantize: the input quantization step.
    step: float | None = None


@dataclass(frozen=True)
class PortError:
    passed: bool
    max_abs_error: float
    mean_abs_error: float
    max_rel_error: float
    scale: float
    tolerance: float
    outside: int
    size: int
    #: INT8 ports: the largest error in quantization steps.
    max_steps: float | None = None
    reason: str = ""

    @property
    def fraction_outside(self) -> float:
        return self.outside / self.size if self.size else 0.0


def _numeric(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.bool_:
        return array.astype(np.int8)
    if array.dtype.kind == "f" and array.dtype.itemsize < 4:
        return array.astype(np.float32)
    return array


def _work_dtype(expected: np.ndarray, actual: np.ndarray) -> type:
    if expected.dtype.kind == "f" and actual.dtype.kind == "f":
        return np.float64 if np.float64 in (expected.dtype, actual.dtype) else np.float32
    return np.float64


def _abs_diff(e: np.ndarray, a: np.ndarray, dtype: type) -> np.ndarray:
    """|e - a| with equal values (infinities, NaN with NaN) at 0 and other NaN at inf; one
    subtraction in the common case of finite values."""
    with np.errstate(all="ignore"):
        diff = np.subtract(e, a, dtype=dtype)
        np.abs(diff, out=diff)
        if np.isfinite(diff.max(initial=0)):
            return diff
        e, a = e.astype(dtype, copy=False), a.astype(dtype, copy=False)
        same = (e == a) | (np.isnan(e) & np.isnan(a))
    diff[same] = 0
    diff[np.isnan(diff)] = np.inf
    return diff


def _resolution(expected: np.ndarray, actual: np.ndarray) -> float:
    """float16's epsilon when either side is f16, else 0."""
    if np.float16 in (expected.dtype, actual.dtype):
        return float(np.finfo(np.float16).eps)
    return 0.0


def scale_of(array: np.ndarray) -> float:
    """The largest finite magnitude (0 for an empty or non-finite array)."""
    flat = _numeric(np.asarray(array)).reshape(-1)
    best = 0.0
    for start in range(0, flat.size, SLICE):
        part = flat[start : start + SLICE]
        high, low = float(part.max()), float(part.min())
        if not (np.isfinite(high) and np.isfinite(low)):
            part = part[np.isfinite(part)]
            if not part.size:
                continue
            high, low = float(part.max()), float(part.min())
        best = max(best, abs(high), abs(low))
    return best


def judge(
    expected: np.ndarray,
    actual: np.ndarray,
    inputs: InputError,
    *,
    step: float | None = None,
) -> PortError:
    """Compares one port; ``step`` is its quantization step when it is an INT8 layer."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if tuple(expected.shape) != tuple(actual.shape):
        return PortError(
            False,
            float("inf"),
            float("inf"),
            float("inf"),
            0.0,
            0.0,
            int(expected.size),
            int(expected.size),
            reason=f"shape {list(actual.shape)} != expected {list(expected.shape)}",
        )
    e_flat = _numeric(expected).reshape(-1)
    a_flat = _numeric(actual).reshape(-1)
    dtype = _work_dtype(e_flat, a_flat)
    scale = scale_of(e_flat)
    exact_kind = e_flat.dtype.kind in "biu" and a_flat.dtype.kind in "biu"
    if exact_kind:
        tolerance = 0.0
    else:
        eps = float(np.finfo(np.float32).eps)
        tolerance = (
            (BASE_REL + _resolution(expected, actual)) * scale
            + EPS_SUM * eps * inputs.summed
            + GROWTH * max(inputs.rel * scale, inputs.abs)
        )
    quant_tolerance = None
    if step is not None and step > 0:
        carried = inputs.abs / inputs.step if inputs.step else 0.0
        quant_tolerance = step * (1.0 + QUANT_GROWTH * carried) + BASE_REL * scale
        tolerance = step / 2
    max_abs = 0.0
    total = 0.0
    outside = 0
    for start in range(0, e_flat.size, SLICE):
        diff = _abs_diff(e_flat[start : start + SLICE], a_flat[start : start + SLICE], dtype)
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            total += float(diff.sum(dtype=np.float64))
            if max_abs > tolerance:
                outside += int(np.count_nonzero(diff > tolerance))
    size = int(e_flat.size)
    mean_abs = total / size if size else 0.0
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    if quant_tolerance is not None:
        in_fraction = inputs.mean_abs / inputs.step if inputs.step else 0.0
        allowed = (QUANT_FRACTION + FLIP_MARGIN * in_fraction) * size
        passed = max_abs <= quant_tolerance and outside <= allowed
        reason = "" if passed else "outside quantization tolerance"
        return PortError(
            passed,
            max_abs,
            mean_abs,
            max_rel,
            scale,
            quant_tolerance,
            outside,
            size,
            max_steps=max_abs / step,
            reason=reason,
        )
    allowed = 0 if inputs.exact else int(OUTLIER_FRACTION * size)
    passed = outside <= allowed
    return PortError(
        passed,
        max_abs,
        mean_abs,
        max_rel,
        scale,
        tolerance,
        outside,
        size,
        reason="" if passed else "outside tolerance",
    )
