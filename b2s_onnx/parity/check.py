"""``check``: does the lowered model compute what the original model means?

The original runs in ``onnx.reference.ReferenceEvaluator`` with our numpy ops standing in
for the custom nodes; the lowered model runs in onnxruntime; outputs are compared exactly
unless tolerances are given.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from b2s_onnx.errors import B2SError
from b2s_onnx.lowering import DEFAULT_DOMAINS, LoweringOptions, lower_model
from b2s_onnx.parity.compare import compare
from b2s_onnx.parity.inputs import make_inputs
from b2s_onnx.parity.reference_ops import reference_ops
from b2s_onnx.parity.runtime import run_onnxruntime

Tolerance = float | Mapping[str, float]


@dataclass
class OutputReport:
    name: str
    dtype: str
    shape: list[int]
    passed: bool
    mismatches: int
    max_abs_error: float
    max_rel_error: float
    atol: float
    rtol: float
    reason: str = ""


@dataclass
class CheckResult:
    """The outcome of one parity check; ``to_dict`` is the JSON report's body."""

    passed: bool
    seed: int
    outputs: list[OutputReport]
    input_shapes: dict[str, list[int]]
    lowered_nodes: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    #: What produced the expected outputs: "onnx-reference" or "openvino-cpu".
    reference: str = "onnx-reference"
    #: With ``per_layer``: the per-layer comparison (b2s_onnx.parity.per_layer).
    per_layer: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _tolerance(value: Tolerance, output: str) -> float:
    if isinstance(value, Mapping):
        return float(value.get(output, value.get("*", 0.0)))
    return float(value)


def _load(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise B2SError(f"{path}: no such file")
    try:
        return onnx.load(str(path))
    except Exception as exc:
        raise B2SError(f"{path}: not a readable ONNX model ({type(exc).__name__})") from exc


def compare_outputs(
    names, expected, actual, atol: Tolerance, rtol: Tolerance
) -> list[OutputReport]:
    """One report per output name, comparing ``actual`` with ``expected``."""
    reports = []
    for name in names:
        a, r = _tolerance(atol, name), _tolerance(rtol, name)
        if name not in actual:
            reports.append(
                OutputReport(
                    name,
                    str(expected[name].dtype),
                    list(expected[name].shape),
                    False,
                    -1,
                    float("inf"),
                    float("inf"),
                    a,
                    r,
                    "missing from the lowered model",
                )
            )
            continue
        exp = np.asarray(expected[name])
        diff = compare(exp, actual[name], a, r)
        reports.append(
            OutputReport(
                name,
                str(exp.dtype),
                list(exp.shape),
                diff.passed,
                diff.mismatches,
                diff.max_abs_error,
                diff.max_rel_error,
                a,
                r,
                diff.reason,
            )
        )
    return reports


def finish_check(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    names: Sequence[str],
    expected: Mapping[str, np.ndarray],
    atol: Tolerance,
    rtol: Tolerance,
    seed: int,
    timings: dict[str, float],
    **fields,
) -> CheckResult:
    """The end every parity check shares: run ``model`` in onnxruntime on ``feeds``, compare
    with ``expected``, and report. A model onnxruntime cannot run is bad input (exit 2)."""
    start = time.perf_counter()
    try:
        actual = run_onnxruntime(model, feeds)
    except Exception as exc:
        raise B2SError(f"onnxruntime could not run the model under check: {exc}") from exc
    timings["onnxruntime_s"] = time.perf_counter() - start
    reports = compare_outputs(names, expected, actual, atol, rtol)
    return CheckResult(
        passed=all(r.passed for r in reports),
        seed=seed,
        outputs=reports,
        input_shapes={k: list(v.shape) for k, v in feeds.items()},
        timings=timings,
        **fields,
    )


def check(
    model: onnx.ModelProto | str | Path,
    *,
    lowered: onnx.ModelProto | str | Path | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    dim_sizes: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    atol: Tolerance = 0.0,
    rtol: Tolerance = 0.0,
    domains: Sequence[str] = DEFAULT_DOMAINS,
    opset: int | None = None,
    per_layer: bool = False,
) -> CheckResult:
    """Runs ``model`` (reference) and its lowering (onnxruntime) on the same inputs.

    ``lowered`` defaults to ``lower(model)``. Inputs not given are seeded random arrays;
    symbolic dims take ``dim_sizes`` (default: 1, or the block product for a batch that
    feeds a BatchToSpace). Tolerances may be one number or per output name (``"*"`` for
    the rest); both 0 (the default) means bit-for-bit equality. ``per_layer`` also
    compares each lowered subgraph with its op's reference on the inputs it was fed.
    """
    original = _load(model)
    timings: dict[str, float] = {}
    lowered_nodes: list[dict] = []
    start = time.perf_counter()
    if lowered is None:
        result = lower_model(original, opset=opset, domains=domains, options=LoweringOptions())
        lowered_model = result.model
        lowered_nodes = [asdict(n) for n in result.lowered]
    else:
        lowered_model = _load(lowered)
    timings["lower_s"] = time.perf_counter() - start

    feeds = make_inputs(
        original,
        seed=seed,
        given=inputs,
        dim_sizes=dim_sizes,
        input_shapes=input_shapes,
        domains=domains,
    )
    start = time.perf_counter()
    try:
        evaluator = ReferenceEvaluator(original, new_ops=reference_ops(domains))
        expected_list = evaluator.run(None, feeds)
    except B2SError:
        raise
    except Exception as exc:
        raise B2SError(f"the reference run of the original model failed: {exc}") from exc
    timings["reference_s"] = time.perf_counter() - start
    names = [o.name for o in original.graph.output]
    expected = dict(zip(names, expected_list, strict=True))

    result = finish_check(
        lowered_model,
        feeds,
        names,
        expected,
        atol,
        rtol,
        seed,
        timings,
        lowered_nodes=lowered_nodes,
    )
    if per_layer:
        from b2s_onnx.parity.per_node import compare_nodes

        result.per_layer = compare_nodes(original, lowered_model, feeds, domains).to_dict()
    return result
