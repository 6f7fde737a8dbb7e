"""``check``: does the lowered model compute what the original model means?

By default the original's standard ops run in onnxruntime and its custom nodes through our
numpy references (:mod:`b2s_onnx.parity.partitioned`); the lowered model runs in
onnxruntime; outputs are compared bit for bit unless tolerances are given, or compared at
the task level (detections, top-K) where asked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

if TYPE_CHECKING:
    from b2s_onnx.rewrites import RewriteReport

from b2s_onnx.errors import B2SError
from b2s_onnx.io import load_model
from b2s_onnx.lowering import DEFAULT_DOMAINS, LoweringOptions, lower_model
from b2s_onnx.parity.compare import compare as compare_arrays
from b2s_onnx.parity.inputs import ValueRange, make_inputs, option_warnings
from b2s_onnx.parity.references import run_reference
from b2s_onnx.parity.rewrite_tolerance import tolerance_reasons, with_rewrite_tolerances
from b2s_onnx.parity.runtime import first_line, run_onnxruntime
from b2s_onnx.parity.task_compare import TaskComparison, compare_task, parse_task

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
    #: The task-level comparison that decided ``passed`` (``--compare``), if any.
    comparison: dict | None = None
    #: Why ``atol``/``rtol`` are not zero though none was given ("" otherwise): a rewrite
    #: that changes float rounding reaches this output.
    tolerance_reason: str = ""

    def judge_again(
        self, expected: np.ndarray, actual: np.ndarray, atol: float, why: str, how: str
    ) -> None:
        """Compares a failed output again within ``atol`` (a default tolerance widened for
        ``why``, done ``how``): a pass records both, a failure says it is still outside."""
        if compare_arrays(expected, actual, atol, self.rtol).passed:
            self.passed = True
            self.mismatches = 0
            self.reason = ""
            self.atol = atol
            self.tolerance_reason = f"{why}; {how}"
        else:
            self.reason = f"{self.reason}; {why}, still outside with atol {atol:.3g}"


@dataclass
class CheckResult:
    """The outcome of one parity check; ``to_dict`` is the JSON report's body."""

    passed: bool
    seed: int
    outputs: list[OutputReport]
    input_shapes: dict[str, list[int]]
    lowered_nodes: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    #: What produced the expected outputs: "onnxruntime+numpy-ops", "onnx-reference" or
    #: "openvino-cpu"; ``reference_detail`` says how it ran (stages, or why it fell back).
    reference: str = "onnx-reference"
    reference_detail: str = ""
    #: Options that did nothing for this model (e.g. a --dim naming no dimension).
    warnings: list[str] = field(default_factory=list)
    #: With ``per_layer``: the per-layer comparison (b2s_onnx.parity.per_layer).
    per_layer: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _tolerance(value: Tolerance, output: str) -> float:
    if isinstance(value, Mapping):
        return float(value.get(output, value.get("*", 0.0)))
    return float(value)


Tasks = str | Mapping[str, str] | None


def load_onnx(model: onnx.ModelProto | str | os.PathLike, what: str = "model") -> onnx.ModelProto:
    """A ModelProto as given, or loaded from a path; anything else is a :class:`B2SError`."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load_model(Path(model))
    raise B2SError(f"{what} must be an onnx.ModelProto or a path, not {type(model).__name__}")


def _task_for(tasks: Tasks, output: str) -> str | None:
    if isinstance(tasks, Mapping):
        return tasks.get(output, tasks.get("*"))
    return tasks


def _with_task(
    report: OutputReport, task: str, expected: np.ndarray, actual: np.ndarray
) -> OutputReport:
    spec = parse_task(task)
    outcome: TaskComparison = compare_task(spec, expected, actual, report.atol, report.rtol)
    report.comparison = outcome.to_dict()
    report.passed = outcome.passed
    report.reason = outcome.summary
    return report


def compare_outputs(
    names,
    expected,
    actual,
    atol: Tolerance,
    rtol: Tolerance,
    tasks: Tasks = None,
    tolerance_reasons: Mapping[str, str] | None = None,
) -> list[OutputReport]:
    """One report per output name, comparing ``actual`` with ``expected``."""
    reports = []
    tolerance_reasons = tolerance_reasons or {}
    for name in names:
        a, r = _tolerance(atol, name), _tolerance(rtol, name)
        if name not in actual or name not in expected:
            side = actual if name not in expected else expected
            known = np.asarray(side[name]) if name in side else np.zeros(0)
            reports.append(
                OutputReport(
                    name,
                    str(known.dtype),
                    list(known.shape),
                    False,
                    -1,
                    float("inf"),
                    float("inf"),
                    a,
                    r,
                    "missing from the lowered model"
                    if name not in actual
                    else "the reference returned no output matching it",
                )
            )
            continue
        exp = np.asarray(expected[name])
        diff = compare_arrays(exp, actual[name], a, r)
        report = OutputReport(
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
        report.tolerance_reason = tolerance_reasons.get(name, "")
        task = _task_for(tasks, name)
        if task is not None and exp.shape == actual[name].shape:
            report = _with_task(report, task, exp, actual[name])
        reports.append(report)
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
    tasks: Tasks = None,
    tolerance_reasons: Mapping[str, str] | None = None,
    revise: Callable[[list[OutputReport], Mapping[str, np.ndarray]], None] | None = None,
    **fields,
) -> CheckResult:
    """The end every parity check shares: run ``model`` in onnxruntime on ``feeds``, compare
    with ``expected``, and report. A model onnxruntime cannot run is bad input (exit 2).
    ``revise`` may judge failed outputs again, given onnxruntime's results (a quantized
    IR's outputs against OpenVINO's own spread)."""
    start = time.perf_counter()
    try:
        actual = run_onnxruntime(model, feeds)
    except Exception as exc:
        message = first_line(exc)
        raise B2SError(f"onnxruntime could not run the model under check: {message}") from exc
    timings["onnxruntime_s"] = time.perf_counter() - start
    reports = compare_outputs(names, expected, actual, atol, rtol, tasks, tolerance_reasons)
    if revise is not None and not all(r.passed for r in reports):
        revise(reports, actual)
    return CheckResult(
        passed=all(r.passed for r in reports),
        seed=seed,
        outputs=reports,
        input_shapes={k: list(v.shape) for k, v in feeds.items()},
        timings=timings,
        **fields,
    )


def check(
    model: onnx.ModelProto | str | os.PathLike,
    *,
    lowered: onnx.ModelProto | str | os.PathLike | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    dim_sizes: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    atol: Tolerance = 0.0,
    rtol: Tolerance = 0.0,
    domains: Sequence[str] = DEFAULT_DOMAINS,
    opset: int | None = None,
    reference: str = "auto",
    val_range: Mapping[str, ValueRange] | None = None,
    compare: Tasks = None,
    progress: Callable[[str], None] | None = None,
    per_layer: bool = False,
    rewrites: RewriteReport | None = None,
) -> CheckResult:
    """Runs ``model`` (reference) and its lowering (onnxruntime) on the same inputs.

    ``lowered`` defaults to ``lower(model)``. Inputs not given are seeded random arrays
    (``val_range``: ``{name or "*": (lo, hi)}``); symbolic dims take ``dim_sizes`` (default:
    1, or the block product for a batch that feeds a BatchToSpace). ``reference``: "auto" /
    "onnxruntime" (standard ops in onnxruntime, custom nodes in numpy) or "onnx" (onnx's
    reference evaluator). Tolerances may be one number or per output name (``"*"`` for the
    rest); both 0 (the default) means bit-for-bit equality, which is what a pure
    data-movement lowering must meet under the default reference. ``compare`` ("detections",
    "topk:K", or per output name) judges outputs at the task level instead. ``per_layer``
    also compares each lowered subgraph with its op's reference on the inputs it was fed.

    Outputs that a rewrite changing float rounding reaches (``rewrites``: what fired when
    ``lowered`` was made; found here when ``lowered`` is None) are compared within
    :mod:`b2s_onnx.parity.rewrite_tolerance`'s tolerance where no tolerance was given, and
    their reports say why (``tolerance_reason``).

    An OpenVINO IR (a path ending in ``.xml``, its weights beside it) is converted and the
    conversion checked against OpenVINO's CPU plugin (``reference`` "auto"/"openvino", or
    "onnx"), as ``b2s-onnx check model.xml`` does; tolerances left at 0 take the IR
    defaults, and ``domains``/``rewrites`` do not apply.
    """
    if isinstance(model, (str, os.PathLike)) and Path(model).suffix.lower() == ".xml":
        from b2s_onnx.parity.ir_check import check_ir_file

        return check_ir_file(
            model,
            lowered=lowered,
            opset=opset,
            inputs=inputs,
            seed=seed,
            dim_sizes=dim_sizes,
            input_shapes=input_shapes,
            atol=atol,
            rtol=rtol,
            reference=reference,
            val_range=val_range,
            compare=compare,
            progress=progress,
            per_layer=per_layer,
        )
    step = progress or (lambda _stage: None)
    original = load_onnx(model)
    timings: dict[str, float] = {}
    lowered_nodes: list[dict] = []
    start = time.perf_counter()
    step("lowering")
    if lowered is None:
        result = lower_model(original, opset=opset, domains=domains, options=LoweringOptions())
        lowered_model = result.model
        lowered_nodes = [asdict(n) for n in result.lowered]
        rewrites = result.rewrites
    else:
        lowered_model = load_onnx(lowered, "lowered")
    timings["lower_s"] = time.perf_counter() - start

    feeds = make_inputs(
        original,
        seed=seed,
        given=inputs,
        dim_sizes=dim_sizes,
        input_shapes=input_shapes,
        domains=domains,
        val_range=val_range,
    )
    start = time.perf_counter()
    step("running the reference")
    expected = run_reference(original, feeds, domains, reference)
    timings["reference_s"] = time.perf_counter() - start
    names = [o.name for o in original.graph.output]
    reasons = tolerance_reasons(original, rewrites.fired if rewrites else [], names)
    atol, rtol, reasons = with_rewrite_tolerances(atol, rtol, reasons, names)
    step("running the lowered model")
    result = finish_check(
        lowered_model,
        feeds,
        names,
        expected.outputs,
        atol,
        rtol,
        seed,
        timings,
        tasks=compare,
        tolerance_reasons=reasons,
        lowered_nodes=lowered_nodes,
        reference=expected.label,
        reference_detail=expected.detail,
        warnings=option_warnings(original, dim_sizes, compare),
    )
    if per_layer:
        from b2s_onnx.parity.per_node import compare_nodes

        result.per_layer = compare_nodes(original, lowered_model, feeds, domains).to_dict()
    return result
