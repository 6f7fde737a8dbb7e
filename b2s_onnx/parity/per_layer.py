"""Per-layer parity of a converted IR: which layer is the first to leave tolerance?

OpenVINO runs with IR layer outputs exposed, onnxruntime with the tensors the converter
recorded for them (``ConversionResult.ports``); ports are compared in the IR's
topological order, each against a tolerance of its own (:mod:`layer_tolerance`). A port
that leaves tolerance while every input it was fed agreed is the culprit.

Cost stays bounded: the bytes of every exposed tensor (both runtimes) are estimated from
the IR's declared shapes. When they fit ``budget`` one pair of runs compares every port;
otherwise evenly spaced ports that fit are compared and, if one diverges, the search
narrows to the ports before it ("bisect"), or every port is compared in chunks of
consecutive layers ("chunked", one pair of runs per chunk). The report says which ran.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.dead_code import restored
from b2s_onnx.ir.port_map import CONSTANT, TENSOR, PortMap, PortRecord
from b2s_onnx.ir.reader import IRModel, Layer, read_ir_xml, topological_order
from b2s_onnx.parity.exposure import exposable, run_exposed
from b2s_onnx.parity.layer_tolerance import InputError, PortError, judge, scale_of
from b2s_onnx.parity.openvino_layers import OpenVINOLayers

#: Exposed tensors may take this much memory at least (both runtimes together).
MIN_BUDGET = 128 << 20
#: Layers listed in ``first``: the first ones that leave tolerance.
FIRST_LIMIT = 10
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
    expected_dtype: str = ""
    actual_dtype: str = ""
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
    #: FakeQuantize layers between this port and the nearest compared inputs that have no
    #: counterpart to compare (the converted model quantizes in place, e.g. after a moved
    #: pool): a value one level apart there is first seen here.
    unmatched_quantizers: list[str] = field(default_factory=list)


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
    #: The port that added the most relative error of its own (output minus inputs).
    largest_own_error: LayerReport | None = None
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


#: Layers whose outputs sum over input elements with constant weights (input 1).
_WEIGHTED = {
    "Convolution",
    "GroupConvolution",
    "ConvolutionBackpropData",
    "GroupConvolutionBackpropData",
    "MatMul",
}
#: Layers that add or average their inputs: noise of the inputs' size survives cancellation.
_ADDITIVE = {"Add", "Subtract", "ReduceSum", "ReduceMean", "MVN", "NormalizeL2"}


def _per_output_weight_sums(layer: Layer, weights: np.ndarray) -> np.ndarray:
    """Sum of |weights| feeding each output element, for each output channel/column."""
    if layer.type == "MatMul":
        transposed = layer.data.get("transpose_b", "false").lower() == "true"
        return weights.sum(axis=-1 if transposed else -2)
    if layer.type == "ConvolutionBackpropData":  # [C_in, C_out, k...]
        weights = np.moveaxis(weights, 1, 0)
    elif layer.type == "GroupConvolutionBackpropData":  # [G, C_in, C_out, k...]
        weights = np.moveaxis(weights, 2, 1)
    leading = 2 if layer.type.startswith("Group") else 1
    return weights.reshape(int(np.prod(weights.shape[:leading])), -1).sum(axis=1)


def _summed(ovl: OpenVINOLayers, layer: Layer, input_scale: float) -> float:
    """The magnitude a layer adds up before cancellation (see ``layer_tolerance``)."""
    if layer.type in _ADDITIVE:
        return input_scale
    if layer.type not in _WEIGHTED:
        return 0.0
    weights = ovl.constant_input(layer, 1)
    if weights is None or weights.ndim < 2:
        return 0.0
    sums = _per_output_weight_sums(layer, np.abs(weights))
    return input_scale * float(sums.max()) if sums.size else 0.0


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
        self.errors: dict[tuple[str, int], PortError] = {}
        #: Ports that passed with every input clean: no divergence anywhere upstream.
        self.clean: dict[tuple[str, int], bool] = {}
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

    def _feeding(self, layer: Layer):
        """(source port, producer) of every port feeding ``layer``, looking through the ports
        that were not compared (Parameters and Constants end a path, as compared ports do)."""
        seen: set[tuple[str, int]] = set()
        pending = [layer]
        while pending:
            current = pending.pop()
            for port in current.inputs:
                source = self.ir.sources.get((current.id, port.id))
                if source is None or source in seen:
                    continue
                seen.add(source)
                producer = self.ir.layers[source[0]]
                yield source, producer
                if source not in self.errors and producer.type not in ("Parameter", "Const"):
                    pending.append(producer)

    def _unmatched_quantizers(self, layer: Layer) -> list[str]:
        """FakeQuantize layers passed through on the way to ``layer``'s nearest compared
        inputs, in the order met."""
        return [
            producer.name
            for source, producer in self._feeding(layer)
            if producer.type == "FakeQuantize" and source not in self.errors
        ]

    def _input_error(self, layer: Layer) -> tuple[InputError, bool | None]:
        """Combined error of the ports feeding ``layer`` (looking through ports that were
        not compared to the nearest compared ones), and whether they all agreed."""
        rel = abs_ = mean = scale = 0.0
        exact = True
        agree: bool | None = None
        for source, producer in self._feeding(layer):
            error = self.errors.get(source)
            if error is not None:
                rel, abs_ = max(rel, error.max_rel_error), max(abs_, error.max_abs_error)
                mean, scale = max(mean, error.mean_abs_error), max(scale, error.scale)
                exact = exact and error.max_abs_error == 0
                agree = self.clean[source] and agree is not False
            elif producer.type == "Parameter":
                record = self.ports.get(source)
                if record is not None and record.tensor in self.feed_scale:
                    scale = max(scale, self.feed_scale[record.tensor])
                agree = agree is not False
        return InputError(rel, abs_, mean, scale, exact), agree

    def compare_chunk(self, chunk: list[tuple[Layer, PortRecord]]) -> None:
        keys = [record.key for _, record in chunk]
        tensors = [r.tensor for _, r in chunk if r.status == TENSOR]
        # onnxruntime (one thread) runs beside OpenVINO's compile and inference: both
        # release the GIL, and the pair of runs is most of the per-layer cost.
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(run_exposed, self.model, self.feeds, tensors, self.infos)
            expected, finals, request = self.ovl.run(self.feeds, keys)
            actual = pending.result()
        self.runs += 1
        self._drift(finals)
        for layer, record in chunk:
            if record.status == CONSTANT:
                value = numpy_helper.to_array(self.initializers[record.tensor])
            else:
                value = actual[record.tensor]
                if record.channels is not None:  # padded to whole blocks: its own channels
                    value = np.asarray(value)[:, : record.channels]
            self._compare(layer, record, expected[record.key], value)
        del expected, finals, request, actual

    def diverged(self) -> bool:
        return any(r.status == "diverged" for r in self.reports)

    def finish(self, order: list[tuple[str, int]]) -> list[LayerReport]:
        """Reports in topological order, with ``inputs_agree`` re-read now that every
        run is in (a sample's inputs may have been compared after it)."""
        position = {key: i for i, key in enumerate(order)}
        self.reports.sort(key=lambda r: position[(r.layer_id, r.port)])
        for report in self.reports:
            layer = self.ir.layers[report.layer_id]
            agree = self._input_error(layer)[1]
            report.inputs_agree = agree
            if report.status == "diverged":
                report.unmatched_quantizers = self._unmatched_quantizers(layer)
            key = (report.layer_id, report.port)
            self.clean[key] = self.errors[key].passed and agree is not False
        return self.reports

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
        inputs = replace(inputs, summed=_summed(self.ovl, layer, inputs.scale), step=in_step)
        error = judge(expected, actual, inputs, step=out_step)
        self.errors[record.key] = error
        self.clean[record.key] = error.passed and agree is not False
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
                str(np.asarray(expected).dtype),
                str(np.asarray(actual).dtype),
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
    """Exposed tensors (both runtimes) may take half the memory this process already
    peaked at (after the plain check: about a plain check's peak), or the weights twice
    over, and never less than :data:`MIN_BUDGET`. Exposing also costs the runtimes buffers
    they can no longer reuse, so that keeps the peak within about twice a plain check's."""
    weights = os.fspath(bin_path) if bin_path is not None else os.path.splitext(xml)[0] + ".bin"
    size = os.path.getsize(weights) if os.path.isfile(weights) else 0
    return max(MIN_BUDGET, 2 * size, _peak_rss() // 2)


def _peak_rss() -> int:
    try:
        import resource
    except ImportError:  # not on Windows: the other bounds apply
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _chunks(
    planned: list[tuple[Layer, PortRecord]], sizes: list[int], budget: int
) -> list[list[int]]:
    """Consecutive runs of indices into ``planned`` whose sizes fit ``budget``."""
    chunks: list[list[int]] = [[]]
    used = 0
    for index, size in enumerate(sizes):
        if chunks[-1] and used + size > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(index)
        used += size
    return chunks


def _sample(indices: list[int], sizes: list[int], budget: int) -> list[int]:
    """Evenly spaced indices (the last one always included) whose sizes fit ``budget``."""
    count = len(indices)
    while count > 1:
        picks = sorted({indices[round(k * (len(indices) - 1) / (count - 1))] for k in range(count)})
        if sum(sizes[i] for i in picks) <= budget:
            return picks
        count = count * 3 // 4
    return [indices[-1]]


def _upstream(ir: IRModel, layer_id: str) -> set[str]:
    """Ids of every layer ``layer_id`` depends on, itself included."""
    seen = {layer_id}
    pending = [layer_id]
    while pending:
        current = ir.layers[pending.pop()]
        for port in current.inputs:
            source = ir.sources.get((current.id, port.id))
            if source is not None and source[0] not in seen:
                seen.add(source[0])
                pending.append(source[0])
    return seen


def _bisect(comparison: _Comparison, planned: list, sizes: list[int], budget: int) -> None:
    """Compares evenly spaced ports (the last one always among them); when one diverges, the
    culprit is upstream of it and not upstream of an earlier sample that agreed: the search
    narrows to those ports, round after round, until it can compare them all. A sample after
    the divergence proves nothing (its tolerance grows with the error its inputs carry)."""
    indices = list(range(len(planned)))
    diverged = False
    while indices:
        if sum(sizes[i] for i in indices) <= budget:
            comparison.compare_chunk([planned[i] for i in indices])
            return
        picks = _sample(indices, sizes, budget)
        comparison.compare_chunk([planned[i] for i in picks])
        failed = [i for i in picks if not comparison.errors[planned[i][1].key].passed]
        if failed:
            diverged = True
            limit = failed[0]
            suspects = _upstream(comparison.ir, planned[limit][1].layer_id)
        elif not diverged:
            return  # the sampled ports, the model's last among them, all agree
        else:
            limit = max(indices) + 1
            suspects = {planned[i][1].layer_id for i in indices}
        for i in picks:
            layer_id = planned[i][1].layer_id
            if i < limit and layer_id in suspects:
                suspects -= _upstream(comparison.ir, layer_id)
        compared = set(comparison.errors)
        indices = [
            i
            for i in indices
            if i < limit
            and planned[i][1].layer_id in suspects
            and planned[i][1].key not in compared
        ]


STRATEGIES = ("auto", "chunked", "bisect")


def compare_layers(
    xml: str | os.PathLike,
    converted: onnx.ModelProto,
    ports: PortMap,
    feeds: Mapping[str, np.ndarray],
    *,
    bin_path: str | os.PathLike | None = None,
    reference_outputs: Mapping[str, np.ndarray] | None = None,
    budget: int | None = None,
    strategy: str = "auto",
) -> PerLayerResult:
    """Compares the IR layer outputs OpenVINO and ``converted`` both compute.

    ``reference_outputs`` (OpenVINO's final outputs of the plain run) measure how much
    exposing the layers changed OpenVINO's own result. ``budget`` (bytes) bounds the
    exposed tensors of one run (default: :func:`budget_for`). When everything fits, one
    run compares every port ("single-run"); otherwise ``strategy`` "auto" or "bisect"
    narrows down from evenly spaced samples, and "chunked" compares every port, a chunk
    of consecutive layers per run, stopping after the chunk with the first divergence.
    """
    if strategy not in STRATEGIES:
        raise B2SError(f"unknown per-layer strategy '{strategy}' ({', '.join(STRATEGIES)})")
    start = time.perf_counter()
    same = ports.ir is not None and Path(ports.ir.path).resolve() == Path(xml).resolve()
    ir = ports.ir if same else read_ir_xml(xml)
    with restored(converted.graph, ports.unread):
        return _compare_layers(
            xml, ir, converted, ports, feeds, bin_path, reference_outputs, budget, strategy, start
        )


def _compare_layers(
    xml: str | os.PathLike,
    ir: IRModel,
    converted: onnx.ModelProto,
    ports: PortMap,
    feeds: Mapping[str, np.ndarray],
    bin_path: str | os.PathLike | None,
    reference_outputs: Mapping[str, np.ndarray] | None,
    budget: int | None,
    strategy: str,
    start: float,
) -> PerLayerResult:
    order = topological_order(ir)
    ports.sync(converted)
    ovl = OpenVINOLayers(ir, xml, bin_path)
    comparison = _Comparison(ir, order, ports, converted, ovl, feeds, reference_outputs or {})
    planned = comparison.plan()
    fallback = max((int(np.asarray(v).size) for v in feeds.values()), default=1)
    sizes = [2 * _port_bytes(layer, record.port, fallback) for layer, record in planned]
    budget = budget if budget is not None else budget_for(xml, bin_path)
    stopped = False
    if sum(sizes) <= budget:
        used = "single-run"
        comparison.compare_chunk(planned)
    elif strategy == "chunked":
        used = "chunked"
        chunks = _chunks(planned, sizes, budget)
        for index, chunk in enumerate(chunks):
            comparison.compare_chunk([planned[i] for i in chunk])
            if comparison.diverged() and index < len(chunks) - 1:
                stopped = True
                break
    else:
        used = "bisect"
        _bisect(comparison, planned, sizes, budget)
    reports = comparison.finish([record.key for _, record in planned])
    diverged = [r for r in reports if r.status == "diverged"]
    own = max(reports, key=lambda r: r.max_rel_error - r.input_rel_error, default=None)
    return PerLayerResult(
        strategy=used,
        runs=comparison.runs,
        budget_bytes=budget,
        estimated_bytes=sum(sizes),
        compared=len(reports),
        diverged=len(diverged),
        first=diverged[:FIRST_LIMIT],
        culprits=[r.layer_id for r in diverged if r.inputs_agree is not False],
        not_compared=comparison.not_compared,
        layers=reports,
        largest_own_error=own,
        reference_drift=comparison.drift,
        stopped_early=stopped,
        seconds=time.perf_counter() - start,
    )
