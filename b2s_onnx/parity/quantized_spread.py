"""How far OpenVINO's own two executions of a quantized IR disagree, as a tolerance.

OpenVINO runs an IR's FakeQuantize layers in integer arithmetic, its float steps (scales,
biases, activations, the requantization) fused into its convolution kernels in an order
that depends on the CPU (AMX, AVX-512 VNNI, AVX2 kernels). A value that lands within a last
bit of a quantization boundary moves one level between two orders of the same arithmetic,
and later layers amplify the move: a 9-layer network of random weights (`models/int8/
yolo_tiny`) converted with `int8="qdq"` matched OpenVINO INT8 bit for bit on an AMX CPU and
differed by 0.23 on an AVX-512 one, where OpenVINO's INT8 and its own float simulation
(``LP_TRANSFORMS_MODE=NO``) differ by 0.18 from each other.

So an output of a quantized IR that misses the quantized tolerance is compared again with
its tolerance widened by that spread, measured on the same inputs: an output no further
from OpenVINO's INT8 result than OpenVINO's float simulation is, plus the usual quantized
tolerance, is not a conversion error. The report names the spread. Only the default
tolerance widens; a tolerance given on the command line is kept as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from b2s_onnx.parity.check import OutputReport

#: The CPU plugin's switch that keeps FakeQuantize layers as float math (no low-precision
#: transformations), the simulation the spread is measured against.
FLOAT_SIMULATION_CONFIG = {"LP_TRANSFORMS_MODE": "NO"}
#: How the tolerance was widened, as the report says it.
WIDENED = "atol widened by that spread"


def spread(expected: np.ndarray, simulated: np.ndarray) -> float | None:
    """The largest absolute difference between OpenVINO's INT8 and float-simulation results
    for one output, or None where they cannot be compared (shapes, types, non-finite)."""
    if expected.shape != simulated.shape or expected.dtype != simulated.dtype:
        return None
    if not np.issubdtype(expected.dtype, np.floating) or expected.size == 0:
        return None
    with np.errstate(all="ignore"):
        difference = np.abs(expected.astype(np.float64) - simulated.astype(np.float64))
    largest = float(difference.max())
    return largest if np.isfinite(largest) else None


def widen_by_spread(
    reports: Sequence[OutputReport],
    expected: Mapping[str, np.ndarray],
    simulated: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
) -> None:
    """Compares each failed element-wise output again within ``atol + spread`` and records
    the outcome in its report (in place). Task-level comparisons (``--compare``) and
    outputs without a float-simulation counterpart keep their verdict."""
    for report in reports:
        if report.passed or report.comparison is not None or report.name not in actual:
            continue
        if report.name not in simulated:
            continue
        exp = np.asarray(expected[report.name])
        width = spread(exp, np.asarray(simulated[report.name]))
        if width is None:
            continue
        what = (
            f"OpenVINO's own float simulation of the FakeQuantize layers differs from its "
            f"INT8 run by up to {width:.3g} here"
        )
        report.judge_again(exp, np.asarray(actual[report.name]), report.atol + width, what, WIDENED)
