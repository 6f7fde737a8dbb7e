"""Per-layer parity of a converted IR: which layer is the first to leave tolerance?

OpenVINO runs with IR layer outputs exposed, onnxruntime with the tensors the converter
recorded for them (``ConversionResult.ports``); ports are compared in the IR's
topological order, each against a tolerance of its own (:mod:`layer_tolerance`). A port
that leaves tolerance while every input it was fed agreed is the culprit.

Cost stays bounded: the bytes of every exposed tensor (both runtimes) are estimated from
the IR's declared shapes; when they exceed ``budget`` the ports are compared in chunks of
consecutive layers, one pair of runs per chunk, stopping after the chunk where the first
divergence shows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from b2s_onnx.ir.port_map import CONSTANT, TENSOR, PortMap, PortRecord
from b2s_onnx.ir.reader import IRModel, Layer, read_ir_xml, topological_order
from b2s_onnx.parity.exposure import exposable, run_exposed
from b2s_onnx.parity.layer_tolerance import BASE_REL, InputError, PortError, judge, scale_of
from b2s_onnx.parity.openvino_layers import OpenVINOLayers

#: Exposed tensors may take this much memory at least (both runtimes together).
MIN_BUDGET = 256 << 20
#: Layers listed in ``first``: the first ones that leave tolerance.
FIRST_LIMIT = 10
#: Epsilon of the element types a folded constant may be declared in (IR precision names).
_EPS = {"fp16": 2.0**-10, "f16": 2.0**-10, "bf16": 2.0**-7}
_ITEMSIZE = {"u8": 1, "i8": 1, "boolean": 1, "u16": 2, "i16": 2, "i64": 8, "u64": 8, "f64": 8}


@dataclass
class LayerReport:
    """One IR output port compared (or why it was not)."""

    layer_id: str
    name: str
    type: str
    port: int
    tensor: str | None
    status: str
    expected_shape: list[int] | None = None
    actual_shape: list[int] | None = None
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mean_abs_error: float = 0.0
    scale: float = 0.0
    tolerance: float = 0.0
    fraction_outside: float = 0.0
    max_steps: float | None = None
    #: Did every input this layer was fed agree with OpenVINO? (None: nothing compared)
    inputs_agree: bool | None = None
    input_rel_error: float = 0.0
    reason: str = ""


@dataclass
class PerLayerResult:
    """What ``check(..., per_layer=True)`` adds under the JSON key ``per_layer``."""

    strategy: str
    runs: int
    budget_bytes: int
    estimated_bytes: int
    compared: int
    diverged: int
    #: The first layers that leave tolerance, in topological order.
    first: list[LayerReport]
    #: Ids of diverged layers whose inputs all agreed.
    culprits: list[str]
    #: Ports with no counterpart to compare, and why.
    not_compared: list[LayerReport]
    layers: list[LayerReport] = field(default_factory=list)
    #: Largest change of OpenVINO's final outputs when layer outputs are exposed.
    reference_drift: float = 0.0
    stopped_early: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _port_bytes(layer: Layer, port_id: int, fallback: int) -> int:
    port = layer.output_port(port_id)
    if port.dims is None or any(d is None for d in port.dims):
        count = fallback
    else:
        count = int(np.prod(port.dims, dtype=np.int64))
    itemsize = _ITEMSIZE.get((port.precision or "f32").lower(), 4)
    return count * itemsize


def _quant_steps(ovl: OpenVINOLayers, layer: Layer) -> tuple[float | None, float | None]:
    """(input step, output step) of a FakeQuantize whose ranges are constants."""
    if layer.type != "FakeQuantize" or "levels" not in layer.data:
        return None, None
    levels = int(layer.data["levels"])
    if levels < 2:
        return None, None
    ranges = [ovl.constant_input(layer, k) for k in (1, 2, 3, 4)]
    if any(r is None for r in ranges):
        return None, None
    steps = []
    for low, high in (ranges[0:2], ranges[2:4]):
        width = np.abs(np.broadcast_arrays(high, low)[0] - low) / (levels - 1)
        width = width[width > 0]
        steps.append(float(width.min()) if width.size else None)
    return steps[0], steps[1]


class _Comparison:
    def __init__(
        self,
        ir: IRModel,
        order: list[Layer],
        ports: PortMap,
        model: onnx.ModelProto,
        ovl: OpenVINOLayers,
        feeds: Mapping[str, np.ndarray],
        plain: Mapping[str, np.ndarray],
    ) -> None:
        self.ir, self.order, self.ports, self.model, self.ovl = ir, order, ports, model, ovl
        self.feeds, self.plain = feeds, plain
        self.infos = exposable(model)
        self.initializers = {t.name: t for t in model.graph.initializer}
        self.errors: dict[tuple[str, int], tuple[PortError, InputError]] = {}
        self.reports: list[LayerReport] = []
        self.not_compared: list[LayerReport] = []
        self.drift = 0.0
        self.runs = 0
        self.feed_scale = {name: scale_of(np.asarray(v)) for name, v in feeds.items()}

    def plan(self) -> list[tuple[Layer, PortRecord]]:
        """Ports to compare, in topological order; the rest go to ``not_compared``."""
        planned = []
        for layer in self.order:
            for port in layer.outputs:
                record = self.ports.get((layer.id, port.id))
                if record is None or record.status not in (TENSOR, CONSTANT):
                    if record is not None and record.status in ("fused", "removed"):
                        self._skip(record, f"{record.status} in the converted model")
                    continue
                if not self.ovl.has(layer):
                    self._skip(record, "no counterpart in OpenVINO's model")
                elif record.status == CONSTANT and record.tensor not in self.initializers:
                    self._skip(record, "folded to a constant the converted model no longer holds")
                elif record.status == TENSOR and record.tensor not in self.infos:
                    self._skip(record, "onnxruntime cannot expose it (element type unknown)")
                else:
                    planned.append((layer, record))
        return planned

    def _skip(self, record: PortRecord, reason: str) -> None:
        self.not_compared.append(
            LayerReport(
                record.layer_id,
                record.name,
                record.label,
                record.port,
                record.tensor,
                "not-compared",
                reason=reason,
            )
        )

    def _input_error(self, layer: Layer, seen: set | None = None) -> tuple[InputError, bool | None]:
        """Combined error of the ports feeding ``layer`` (looking through ports that were
        not compared to their own inputs), and whether they all agreed."""
        seen = set() if seen is None else seen
        rel = abs_ = mean = scale = 0.0
        exact = True
        agree: bool | None = None
        for port in layer.inputs:
            source = self.ir.sources.get((layer.id, port.id))
            if source is None or source in seen:
                continue
            seen.add(source)
            found = self.errors.get(source)
            producer = self.ir.layers[source[0]]
            if found is not None:
                error, _ = found
                rel, abs_ = max(rel, error.max_rel_error), max(abs_, error.max_abs_error)
                mean, scale = max(mean, error.mean_abs_error), max(scale, error.scale)
                exact = exact and error.max_abs_error == 0
                agree = error.passed and (agree is not False)
            elif producer.type == "Parameter":
                record = self.ports.get(source)
                if record is not None and record.tensor in self.feed_scale:
                    scale = max(scale, self.feed_scale[record.tensor])
                agree = agree is not False
            elif producer.type != "Const":
                inner, inner_agree = self._input_error(producer, seen)
                rel, abs_ = max(rel, inner.rel), max(abs_, inner.abs)
                mean, scale = max(mean, inner.mean_abs), max(scale, inner.scale)
                exact = exact and inner.exact
                if inner_agree is not None:
                    agree = inner_agree and (agree is not False)
        return InputError(rel, abs_, mean, scale, exact), agree

    def compare_chunk(self, chunk: list[tuple[Layer, PortRecord]]) -> None:
        keys = [record.key for _, record in chunk]
        expected, finals, request = self.ovl.run(self.feeds, keys)
        tensors = [r.tensor for _, r in chunk if r.status == TENSOR]
        actual = run_exposed(self.model, self.feeds, tensors, self.infos)
        self.runs += 1
        self._drift(finals)
        for layer, record in chunk:
            if record.status == CONSTANT:
                value = numpy_helper.to_array(self.initializers[record.tensor])
            else:
                value = actual[record.tensor]
            self._compare(layer, record, expected[record.key], value)
        del expected, finals, request, actual

    def _drift(self, finals: Mapping[str, np.ndarray]) -> None:
        for name, value in finals.items():
            base = self.plain.get(name)
            if base is not None and np.shape(base) == np.shape(value):
                with np.errstate(all="ignore"):
                    diff = np.abs(np.asarray(base, np.float64) - np.asarray(value, np.float64))
                if diff.size:
                    self.drift = max(self.drift, float(np.nanmax(diff)))

    def _compare(
        self, layer: Layer, record: PortRecord, expected: np.ndarray, actual: np.ndarray
    ) -> None:
        inputs, agree = self._input_error(layer)
        in_step, out_step = _quant_steps(self.ovl, layer)
        if in_step is not None:
            inputs = InputError(
                inputs.rel, inputs.abs, inputs.mean_abs, inputs.scale, inputs.exact, in_step
            )
        base_rel = BASE_REL
        if record.status == CONSTANT:
            precision = (layer.output_port(record.port).precision or "").lower()
            base_rel = max(BASE_REL, 2 * _EPS.get(precision, 0.0))
        error = judge(expected, actual, inputs, step=out_step, base_rel=base_rel)
        self.errors[record.key] = (error, inputs)
        self.reports.append(
            LayerReport(
                record.layer_id,
                record.name,
                record.label,
                record.port,
                record.tensor,
                "ok" if error.passed else "diverged",
                list(np.shape(expected)),
                list(np.shape(actual)),
                error.max_abs_error,
                error.max_rel_error,
                error.mean_abs_error,
                error.scale,
                error.tolerance,
                error.fraction_outside,
                error.max_steps,
                agree,
                inputs.rel,
                error.reason,
            )
        )


def budget_for(xml: str | os.PathLike, bin_path: str | os.PathLike | None) -> int:
    """Exposed tensors may take as much as the weights twice over, and never less than
    :data:`MIN_BUDGET`: with the weights held by both runtimes and the model, that keeps
    the peak within about twice a plain check's."""
    weights = os.fspath(bin_path) if bin_path is not None else os.path.splitext(xml)[0] + ".bin"
    size = os.path.getsize(weights) if os.path.isfile(weights) else 0
    return max(MIN_BUDGET, 2 * size)


def _chunks(
    planned: list[tuple[Layer, PortRecord]], sizes: list[int], budget: int
) -> list[list[tuple[Layer, PortRecord]]]:
    chunks: list[list[tuple[Layer, PortRecord]]] = [[]]
    used = 0
    for item, size in zip(planned, sizes, strict=True):
        if chunks[-1] and used + size > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(item)
        used += size
    return chunks


def compare_layers(
    xml: str | os.PathLike,
    converted: onnx.ModelProto,
    ports: PortMap,
    feeds: Mapping[str, np.ndarray],
    *,
    bin_path: str | os.PathLike | None = None,
    reference_outputs: Mapping[str, np.ndarray] | None = None,
    budget: int | None = None,
) -> PerLayerResult:
    """Compares every IR layer output OpenVINO and ``converted`` both compute.

    ``reference_outputs`` (OpenVINO's final outputs of the plain run) measure how much
    exposing the layers changed OpenVINO's own result. ``budget`` (bytes) bounds the
    exposed tensors of one run (default: :func:`budget_for`).
    """
    start = time.perf_counter()
    ir = read_ir_xml(xml)
    order = topological_order(ir)
    ports.sync(converted)
    ovl = OpenVINOLayers(ir, xml, bin_path)
    comparison = _Comparison(ir, order, ports, converted, ovl, feeds, reference_outputs or {})
    planned = comparison.plan()
    fallback = max((int(np.asarray(v).size) for v in feeds.values()), default=1)
    sizes = [2 * _port_bytes(layer, record.port, fallback) for layer, record in planned]
    budget = budget if budget is not None else budget_for(xml, bin_path)
    chunks = _chunks(planned, sizes, budget)
    stopped = False
    for index, chunk in enumerate(chunks):
        comparison.compare_chunk(chunk)
        if any(r.status == "diverged" for r in comparison.reports) and index < len(chunks) - 1:
            stopped = True
            break
    reports = comparison.reports
    diverged = [r for r in reports if r.status == "diverged"]
    return PerLayerResult(
        strategy="single-run" if len(chunks) == 1 else "chunked",
        runs=comparison.runs,
        budget_bytes=budget,
        estimated_bytes=sum(sizes),
        compared=len(reports),
        diverged=len(diverged),
        first=diverged[:FIRST_LIMIT],
        culprits=[r.layer_id for r in diverged if r.inputs_agree is not False],
        not_compared=comparison.not_compared,
        layers=reports,
        reference_drift=comparison.drift,
        stopped_early=stopped,
        seconds=time.perf_counter() - start,
    )
