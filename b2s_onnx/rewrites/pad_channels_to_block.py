"""Narrow tensors between convolutions (8 to 15 channels; 17 to 47 around a depthwise
convolution or in a squeeze; any width around a grouped convolution of narrow groups or,
quantized, around a depthwise one) -> the same tensors padded with zero channels to whole
blocks of onnxruntime's blocked layout.

onnxruntime runs 2-D convolutions in a blocked layout (16 channels per block with AVX-512),
padding a partial block itself; but its depthwise convolutions, pools and Adds need whole
blocks, and a convolution reading fewer channels than a block takes its plain-layout input
path. Bottleneck blocks keep their narrow tensors exactly there (ENet's 1x1 reduce ->
depthwise 3x3 -> 1x1 expand at 8 channels, PP-OCR's MobileNetV3 at 8): each narrow tensor
is reordered out of the blocked layout and back.

A *region* is a set of tensors with the same channel count joined by channel-wise ops
(activations, per-channel constants, depthwise convolutions, pools, spatial reductions,
Adds and Muls of two region tensors), entered only through the output channels of group-1
convolutions and left only through their input channels. It is widened to a whole block:
the producing convolutions get zero filters and biases, the channel-wise ops parameters
that keep zero channels finite, and the reading convolutions zero weights for the extra
channels, so they add ``0 * finite`` terms to the same sums.

Measured, 1 thread, same run (with against without): road-segmentation-adas-0001 0.90x,
ppocrv3-det 0.97x, open-closed-eye 0.96x. From 17 to 47 channels only two kinds of region
are padded: one with a depthwise convolution (which onnxruntime runs blocked only on whole
blocks; NASNetMobile's 22-channel separable branches: 0.95-0.97x), and a squeeze of one
value per channel, whose excite convolution reading a partial block would take the gate,
and the multiply of the whole tensor by it, out of the blocked layout (Keras
EfficientNet-B3's 24- and 34-channel squeezes: 0.95x). Regions with neither, a residual
Add of 24 or 40 channels, measured no faster (EfficientNet-B0, MobileNetV2, MobileNetV3-L
1.00-1.01x, road-segmentation's 24 -> 32 1.02x). Not done, because measured slower or no
faster: tensors below 8 channels
(6 -> 16 made LeNet's small layers 1.27x slower), regions whose only channel-wise ops are
activations onnxruntime folds into the convolution (face-detection-retail's squeeze
layers: 1.02x), ConvTranspose readers (not blocked by onnxruntime: ppocr 1.03x).

Grouped convolutions of 2, 4 or 8 channels a group in an odd number of groups (RegNetX-200MF:
3, 7 and 19 groups of 8; RegNetY-400MF: 13) cannot be merged into 16-channel groups
(`grouped-conv-in-blocks`) as they are; the region around one, of any width, is padded by
whole extra groups (zero filters reading only the zero channels), which then merge.
Measured on a three-block RegNet stage with the padding and cropping done by a Concat and a
Slice around it (in a network the neighbouring convolutions absorb them), 1 thread: 104
channels 0.84x the time, 56 0.83x, 152 0.75x. Padding 24-channel groups (to 48-channel
multiples: 120 -> 144) measured 1.18x, so only widths dividing the block count.

Quantized regions (QDQ convolutions on 8-bit weights, values through per-tensor
QuantizeLinear/DequantizeLinear) are padded too, when they hold a depthwise convolution:
onnxruntime's depthwise QLinearConv kernel is slow on a partial block where its dense one is
not. Measured 1 thread, a QDQ bottleneck (1x1 reduce, depthwise 3x3, 1x1 expand), medians of
30 interleaved runs, padded / as it was: 8 -> 16 channels 0.75-0.80x (256x448 to 64x112),
12 -> 16 0.53x, 24 -> 32 0.79x, 40 -> 48 0.65x, 56 -> 64 0.63x; 2 threads 0.80-0.85x;
without the depthwise convolution (a 3x3 in its place) 0.89-1.13x, so those are left alone.
NNCF-quantized road-segmentation-adas-0001 (20 regions of 8, 24 and 40 channels): 0.84x the
time at 1 thread, 0.87x at 2; ppocrv3-det 0.95x; MobileNetV3-Small-like ReLU6 stages
(expansions of 72, 88 and 120 channels at 28x28 and 14x14) 0.82x, from 1.25x to 1.02x
OpenVINO INT8's latency. The extra filters' integers are their zero
points (scale 1), so they dequantize to zero, and every real channel keeps its integer sums:
bit-exact there.

Not bit-exact for float regions: a convolution may sum over more input channels in another
order (within float rounding; a zero sum may change sign). A non-finite value reaching a padded
convolution makes NaN in its extra channels, which a reading convolution spreads into real
ones, as onnxruntime's own padding of a partial block does. On AVX2 (8 per block) the
padded region still holds whole blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from b2s_onnx.rewrites._blocked_layout import BLOCK
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Widths of grouped convolutions worth padding a region for: they divide the block, so
#: the padded channels are whole groups that `grouped-conv-in-blocks` then merges.
NARROW_WIDTHS = (2, 4, 8)

#: Element-wise ops that map finite values to finite values with no parameters per channel.
_UNARY = (
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Clip",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Identity",
)
#: Activations onnxruntime folds into the convolution before them (bias Adds too).
_FOLDED = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Clip", "Identity")
#: Reductions, channel-wise when they keep the channel axis.
_SPATIAL_REDUCTIONS = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum")
#: Binary ops whose constant operand, if per channel, is padded with this value.
_BINARY_PAD = {"Add": 0.0, "Sub": 0.0, "Mul": 0.0, "Div": 1.0, "PRelu": 0.0}
#: Ops whose inputs after the first are parameters.
_ONE_DATA_INPUT = ("Conv", "BatchNormalization", "Resize", "QuantizeLinear", "DequantizeLinear")
#: Filter axes of the output and the input channels, per convolution type.
_AXES = {"Conv": (0, 1)}
#: No more than doubling a tensor: 6 -> 16 channels made LeNet's small layers 1.27x slower.
_MAX_GROWTH = 2
#: Wider regions are padded only around a depthwise convolution or in a squeeze (module doc).
_WIDE_LIMIT = 3 * BLOCK
#: BatchNormalization's parameters (scale, bias, mean, var) padded so that 0 maps to 0.
_NORM_PAD = (1.0, 0.0, 0.0, 1.0)


@dataclass
class _Region:
    channels: int
    tensors: set[str] = field(default_factory=set)
    producers: dict[int, onnx.NodeProto] = field(default_factory=dict)
    readers: dict[int, onnx.NodeProto] = field(default_factory=dict)
    inner: dict[int, onnx.NodeProto] = field(default_factory=dict)

    def nodes(self) -> list[onnx.NodeProto]:
        return [*self.producers.values(), *self.readers.values(), *self.inner.values()]

    @property
    def quantized(self) -> bool:
        """Whether the region's values pass through QuantizeLinear/DequantizeLinear."""
        return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in self.inner.values())


def _channel_count(index: GraphIndex, name: str) -> int | None:
    """The static channel count of a 4-D float32 tensor or of its 8-bit quantized bytes."""
    info = index.info(name)
    kinds = (onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
    if info.elem_type not in kinds or info.shape is None or len(info.shape) != 4:
        return None
    return info.shape[1]


def _float_weights(index: GraphIndex, node: onnx.NodeProto) -> np.ndarray | None:
    """A 2-D Conv's constant float32 filters (its bias too, when it has
    one, must be constant), else None."""
    if node.op_type not in _AXES or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    weights = index.weight(node.input[1])
    if weights is None or weights.dtype != np.float32 or weights.ndim != 4:
        return None
    if not _constant_bias(index, node, weights.shape[_AXES[node.op_type][0]]):
        return None
    return weights


def _constant_bias(index: GraphIndex, node: onnx.NodeProto, count: int) -> bool:
    if len(node.input) > 2 and node.input[2]:
        bias = index.weight(node.input[2])
        return bias is not None and bias.shape == (count,)
    return True


@dataclass(frozen=True)
class _Quantized:
    """A QDQ Conv's filters: 8-bit integers with one scale and zero point per output channel
    (or one for all), dequantized by ``dequantize`` for the Conv."""

    values: np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    dequantize: onnx.NodeProto


def _quantized_filters(index: GraphIndex, node: onnx.NodeProto) -> _Quantized | None:
    """A 2-D Conv's constant 8-bit filters behind a DequantizeLinear (per tensor, or per
    output channel) with a constant float32 bias, else None."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    dq = index.produced_by(node.input[1], "DequantizeLinear")
    q = index.constant(dq.input[0]) if dq is not None else None
    if q is None or q.dtype not in (np.int8, np.uint8) or q.ndim != 4:
        return None
    scale = index.constant(dq.input[1])
    zero = (
        index.constant(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros((), q.dtype)
    )
    if scale is None or zero is None or scale.dtype != np.float32:
        return None
    count = q.shape[0]
    if any(v.size not in (1, count) for v in (scale, zero)):
        return None
    if max(scale.size, zero.size) > 1 and int(index.attribute(dq, "axis", 1)) % 4 != 0:
        return None
    if not _constant_bias(index, node, count):
        return None
    return _Quantized(q, scale, zero, dq)


def _filter_shape(index: GraphIndex, node: onnx.NodeProto) -> tuple[int, ...] | None:
    """The shape of a 2-D Conv's constant filters, float or quantized, else None."""
    weights = _float_weights(index, node)
    if weights is not None:
        return weights.shape
    quantized = _quantized_filters(index, node)
    return quantized.values.shape if quantized is not None else None


def _is_full_conv(index: GraphIndex, node: onnx.NodeProto) -> bool:
    return int(index.attribute(node, "group", 1)) == 1 and _filter_shape(index, node) is not None


def _is_depthwise(index: GraphIndex, node: onnx.NodeProto, count: int) -> bool:
    shape = _filter_shape(index, node)
    return (
        shape is not None
        and node.op_type == "Conv"
        and int(index.attribute(node, "group", 1)) == count
        and shape[:2] == (count, 1)
    )


def _is_quantizer(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """A QuantizeLinear or DequantizeLinear with one constant scale and zero point: it maps
    each channel alone, zero channels to zero points and back to zero."""
    if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(node.input) < 3:
        return False
    values = [index.constant(name) for name in node.input[1:3]]
    return all(v is not None and v.size == 1 for v in values)


def _is_narrow_grouped(index: GraphIndex, node: onnx.NodeProto, count: int) -> bool:
    """A grouped Conv of ``count`` channels in and out whose groups `grouped-conv-in-blocks`
    merges to whole blocks once the channels are (a width dividing the block)."""
    weights = _float_weights(index, node)
    if weights is None or node.op_type != "Conv":
        return False
    width = weights.shape[1]
    group = int(index.attribute(node, "group", 1))
    return (
        width in NARROW_WIDTHS
        and group > 1
        and group * width == count
        and weights.shape[0] == count
    )


def _fits(value: np.ndarray, count: int) -> bool:
    """Whether a constant operand broadcasts against a rank-4 tensor of ``count`` channels
    without growing it (one value per channel, or the same for all)."""
    if value.ndim > 4:
        return False
    return value.ndim < 3 or value.shape[value.ndim - 3] in (1, count)


def _channel_axis(value: np.ndarray) -> int | None:
    """The axis along which a fitting constant operand varies per channel, else None."""
    if value.ndim < 3 or value.shape[value.ndim - 3] == 1:
        return None
    return value.ndim - 3


class _Walk:
    """Grows regions from the convolutions whose outputs fill a partial block."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        #: Tensors of wide regions already found not to be widened (a region is walked
        #: from each of its convolutions otherwise).
        self.refused: set[str] = set()
        self.walked: set[str] = set()

    def _narrow_groups(self, region: _Region) -> bool:
        return any(
            _is_narrow_grouped(self.index, node, region.channels) for node in region.inner.values()
        )

    def region(self, seed: onnx.NodeProto) -> _Region | str | None:
        """The region ``seed``'s output belongs to, a reason it cannot be widened, or None
        when it fills whole blocks or is no tensor between convolutions at all."""
        index = self.index
        count = _channel_count(index, seed.output[0])
        if count is None or count % BLOCK == 0 or seed.output[0] in self.refused:
            return None
        if _padded(count) > _MAX_GROWTH * count:
            return None
        found = self._grow(seed, count)
        kept = isinstance(found, _Region) and (self._narrow_groups(found) or found.quantized)
        if count > _WIDE_LIMIT and not kept:
            # Wider regions are widened only for a narrow grouped convolution; they are
            # walked only to find one, so what stops the walk is no news either.
            self.refused.update(self.walked)
            return None
        return found

    def _grow(self, seed: onnx.NodeProto, count: int) -> _Region | str | None:
        index = self.index
        region = _Region(count)
        self.walked = region.tensors
        pending = [seed.output[0]]
        while pending:
            tensor = pending.pop()
            if tensor in region.tensors:
                continue
            if tensor in index.graph_outputs or not index.can_rename(tensor):
                return "a tensor of the region is a graph output or read by a subgraph"
            if _channel_count(index, tensor) != count:
                return None
            region.tensors.add(tensor)
            producer = index.producer.get(tensor)
            if producer is None:
                return None
            if _is_full_conv(index, producer):
                if _filter_shape(index, producer)[0] != count:
                    return None  # declared shapes and weights disagree: leave it be
                region.producers[id(producer)] = producer
            elif self._inner(producer, count):
                region.inner[id(producer)] = producer
                pending.extend(self._data_inputs(producer))
            else:
                return None
            for reader in index.consumers.get(tensor, []):
                if _is_full_conv(index, reader) and list(reader.input).count(tensor) == 1:
                    if reader.input[0] != tensor:
                        return None
                    if _filter_shape(index, reader)[1] != count:
                        return None
                    region.readers[id(reader)] = reader
                elif self._inner(reader, count):
                    region.inner[id(reader)] = reader
                    pending.extend(self._data_inputs(reader))
                    pending.append(reader.output[0])
                else:
                    return f"{reader.op_type} '{reader.name}' reads the channels as they are"
        if not region.readers:
            return None  # nothing reads the channels back: padding would only add work
        if region.quantized:
            # onnxruntime's QLinearConv takes any channel count alike but in its depthwise
            # kernel, which a partial block slows (module doc).
            depthwise = any(node.op_type == "Conv" for node in region.inner.values())
            return region if depthwise else None
        if all(self._folded(node) for node in region.inner.values()):
            return None  # onnxruntime folds all of them into the convolutions
        if count > BLOCK and not self._needs_whole_blocks(region):
            return None
        return region

    def _needs_whole_blocks(self, region: _Region) -> bool:
        """Whether a region wider than a block holds what onnxruntime runs blocked only on
        whole blocks and is worth padding: a depthwise or grouped convolution, or a squeeze (every
        tensor one value per channel) whose reading convolution would otherwise leave the
        blocked layout, and with it the gate of a squeeze-and-excitation block."""
        if any(node.op_type == "Conv" for node in region.inner.values()):
            return True
        shapes = [self.index.info(tensor).shape for tensor in region.tensors]
        return all(shape is not None and tuple(shape[2:]) == (1, 1) for shape in shapes)

    def _folded(self, node: onnx.NodeProto) -> bool:
        """An activation or a bias Add, which onnxruntime folds into the convolution."""
        if node.op_type == "Add":
            return any(self.index.constant(name) is not None for name in node.input)
        return node.op_type in _FOLDED

    def _data_inputs(self, node: onnx.NodeProto) -> list[str]:
        op = node.op_type
        if op in _ONE_DATA_INPUT or op in _UNARY + _SPATIAL_REDUCTIONS:
            return [node.input[0]]  # the others are parameters
        return [name for name in node.input if name and self.index.constant(name) is None]

    def _inner(self, node: onnx.NodeProto, count: int) -> bool:
        """Whether ``node`` computes each channel from the same channel only, keeps zero
        channels finite, and has parameters that can be padded."""
        index = self.index
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return False
        op = node.op_type
        if op == "Conv":
            return _is_depthwise(index, node, count) or _is_narrow_grouped(index, node, count)
        if op in ("QuantizeLinear", "DequantizeLinear"):
            return _is_quantizer(index, node)
        if op in _UNARY:
            if op == "Clip":
                return all(not name or index.constant(name) is not None for name in node.input[1:])
            return True
        if op == "BatchNormalization":
            values = [index.constant(name) for name in node.input[1:5]]
            return all(v is not None and v.shape == (count,) for v in values)
        if op == "Resize":
            return self._resize_keeps_channels(node)
        if op in _SPATIAL_REDUCTIONS:
            return self._reduces_space_only(node)
        if op not in _BINARY_PAD:
            return op == "Sum" and all(index.constant(n) is None for n in node.input)
        if len(node.input) != 2:
            return False
        for position, name in enumerate(node.input):
            value = index.constant(name)
            if value is None:
                continue
            if op in ("Div", "PRelu") and position == 0:
                return False  # a constant divided by zero channels is not finite
            if value.dtype != np.float32 or not _fits(value, count):
                return False
        return True

    def _reduces_space_only(self, node: onnx.NodeProto) -> bool:
        axes = self.index.reduction_axes(node)
        if axes is None or int(self.index.attribute(node, "keepdims", 1)) != 1:
            return False
        return len(axes) > 0 and all(a % 4 in (2, 3) for a in axes)

    def _resize_keeps_channels(self, node: onnx.NodeProto) -> bool:
        index = self.index
        axes = index.attribute(node, "axes")
        if axes is not None:
            return all(int(a) % 4 not in (0, 1) for a in axes)
        for position in (2, 3):
            if len(node.input) > position and node.input[position]:
                value = index.constant(node.input[position])
                if value is None or value.shape != (4,):
                    return False
                if position == 2 and (value[0] != 1 or value[1] != 1):
                    return False
        return len(node.input) > 2


class PadChannelsToBlock:
    name = "pad-channels-to-block"
    #: Convolutions may sum their inputs in another order (see the module doc).
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        plan = index.memo.get(self.name)
        if plan is None:
            plan = index.memo[self.name] = self._plan(index, report)
        return plan.get(id(node))

    def _plan(self, index: GraphIndex, report: RewriteReport) -> dict[int, Fired | Declined]:
        """Finds every region of the graph and widens them all at once: a convolution can
        read one region and produce another, and is rewritten once for both."""
        walk = _Walk(index)
        outcomes: dict[int, Fired | Declined] = {}
        seen: set[str] = set()
        regions: list[_Region] = []
        for node in index.graph.node:
            if not _is_full_conv(index, node) or node.output[0] in seen:
                continue
            found = walk.region(node)
            if isinstance(found, str):
                outcomes[id(node)] = Declined(self.name, node.name, found)
                continue
            if found is None or not index.is_free(found.nodes()):
                continue
            if any(t in seen for t in found.tensors):
                continue
            seen.update(found.tensors)
            regions.append(found)
            padded = _padded(found.channels)
            outcomes[id(node)] = Fired(
                self.name,
                node.name,
                f"{len(found.tensors)} tensors from {found.channels} to {padded} channels",
            )
        if regions:
            self._widen(index, regions, report)
        return outcomes

    def _widen(self, index: GraphIndex, regions: list[_Region], report: RewriteReport) -> None:
        edits: dict[int, onnx.NodeProto] = {}
        originals: dict[int, onnx.NodeProto] = {}
        #: The quantized filters of QDQ Convs as padded so far (a Conv reading one region and
        #: producing another is padded twice), written as one DequantizeLinear at the end.
        quantized: dict[int, _Quantized] = {}
        renamed: dict[str, str] = {}
        for region in regions:
            padded = _padded(region.channels)
            for tensor in sorted(region.tensors):
                renamed[tensor] = index.names.fresh(f"{tensor}/{padded}ch")
                report.widened[tensor] = (renamed[tensor], region.channels)
            for node in region.nodes():
                originals[id(node)] = node
                if id(node) not in edits:
                    edits[id(node)] = _copy(node)
                filters = _quantized_filters(index, node) if node.op_type == "Conv" else None
                if filters is not None and id(node) not in quantized:
                    quantized[id(node)] = filters
            for node in region.producers.values():
                _pad_filters(index, edits[id(node)], node, region, quantized, out=True)
            for node in region.readers.values():
                _pad_filters(index, edits[id(node)], node, region, quantized, out=False)
            for node in region.inner.values():
                _pad_inner(index, edits[id(node)], node, region, quantized)
        feeders = {
            key: index.sole_feeders(originals[key], filters.dequantize)
            for key, filters in quantized.items()
        }
        index.claim([*originals.values(), *(n for nodes in feeders.values() for n in nodes)])
        for key, node in originals.items():
            edit = edits[key]
            for position, name in enumerate(edit.input):
                edit.input[position] = renamed.get(name, name)
            for position, name in enumerate(edit.output):
                edit.output[position] = renamed.get(name, name)
            if key in quantized:
                dequantize = _dequantize(index, node, quantized[key])
                edit.input[1] = dequantize.output[0]
                index.replace([node, *feeders[key]], [dequantize, edit])
            else:
                index.replace([node], [edit])
        index.forget_shapes(list(renamed))
        report.absorbed.update(renamed)


def _padded(count: int) -> int:
    return -(-count // BLOCK) * BLOCK


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _pad(value: np.ndarray, axis: int, extra: int, fill: float) -> np.ndarray:
    widths = [(0, 0)] * value.ndim
    widths[axis] = (0, extra)
    return np.pad(value, widths, constant_values=np.asarray(fill, value.dtype))


def _replace_input(
    index: GraphIndex, edit: onnx.NodeProto, position: int, value: np.ndarray, hint: str
) -> None:
    # The value replaced may be one this rewrite made a moment ago (a convolution that
    # reads one region and produces another): dropped at commit if nothing reads it.
    index.orphaned.add(edit.input[position])
    edit.input[position] = index.add_initializer(hint, np.ascontiguousarray(value))


def _pad_filters(
    index: GraphIndex,
    edit: onnx.NodeProto,
    node: onnx.NodeProto,
    region: _Region,
    quantized: dict[int, _Quantized],
    *,
    out: bool,
) -> None:
    """Zero filters for the extra output channels (``out``) or zero weights for the extra
    input channels; reads the weights as ``edit`` (or ``quantized``) holds them, so a
    convolution that both reads and produces a region is padded twice."""
    count, padded = region.channels, _padded(region.channels)
    axis = _AXES[node.op_type][0 if out else 1]
    if id(node) in quantized:
        quantized[id(node)] = _pad_quantized(quantized[id(node)], axis, padded - count)
    else:
        weights = index.weight(edit.input[1])
        widened = _pad(weights, axis, padded - count, 0.0)
        _replace_input(index, edit, 1, widened, f"{node.name}/weights")
    if out and len(node.input) > 2 and node.input[2]:
        bias = index.weight(node.input[2])
        _replace_input(index, edit, 2, _pad(bias, 0, padded - count, 0.0), f"{node.name}/bias")


def _pad_quantized(filters: _Quantized, axis: int, extra: int) -> _Quantized:
    """``filters`` with ``extra`` more output (axis 0) or input (axis 1) channels whose
    integers dequantize to zero: each filter's zero point; extra filters get scale 1."""
    q, scale, zero = filters.values, filters.scale, filters.zero
    rows = q.shape[0]
    if axis == 1:
        fill = np.broadcast_to(zero.reshape(-1, 1, 1, 1), (rows, extra, *q.shape[2:]))
        q = np.concatenate([q, fill.astype(q.dtype)], axis=1)
        return _Quantized(q, scale, zero, filters.dequantize)
    new_zero = zero if zero.size == 1 else np.zeros((extra,), zero.dtype)
    fill = np.broadcast_to(new_zero.reshape(-1, 1, 1, 1), (extra, *q.shape[1:]))
    q = np.concatenate([q, fill.astype(q.dtype)], axis=0)
    if scale.size > 1:
        scale = np.concatenate([scale.reshape(-1), np.ones((extra,), scale.dtype)])
    if zero.size > 1:
        zero = np.concatenate([zero.reshape(-1), new_zero])
    return _Quantized(q, scale, zero, filters.dequantize)


def _dequantize(index: GraphIndex, node: onnx.NodeProto, filters: _Quantized) -> onnx.NodeProto:
    """The DequantizeLinear of ``node``'s padded quantized filters."""
    base = f"{node.name}/weights"
    output = index.names.fresh(f"{base}/dequantized")
    dequantize = onnx.helper.make_node(
        "DequantizeLinear",
        [
            index.add_initializer(f"{base}/q", np.ascontiguousarray(filters.values)),
            index.add_initializer(f"{base}/scale", np.ascontiguousarray(filters.scale)),
            index.add_initializer(f"{base}/zero_point", np.ascontiguousarray(filters.zero)),
        ],
        [output],
        name=output,
    )
    dequantize.attribute.extend(filters.dequantize.attribute)
    return dequantize


def _pad_inner(
    index: GraphIndex,
    edit: onnx.NodeProto,
    node: onnx.NodeProto,
    region: _Region,
    quantized: dict[int, _Quantized],
) -> None:
    count, padded = region.channels, _padded(region.channels)
    extra = padded - count
    op = node.op_type
    if op == "Conv":  # depthwise or grouped: the extra channels are whole extra groups
        width = _filter_shape(index, node)[1]
        _pad_filters(index, edit, node, region, quantized, out=True)
        for attr in edit.attribute:
            if attr.name == "group":
                attr.i = padded // width
        return
    if op == "BatchNormalization":
        for position, fill in zip(range(1, 5), _NORM_PAD, strict=True):
            value = index.constant(node.input[position])
            _replace_input(index, edit, position, _pad(value, 0, extra, fill), f"{node.name}/param")
        return
    if op == "Resize":
        if len(node.input) > 3 and node.input[3] and index.attribute(node, "axes") is None:
            sizes = index.constant(node.input[3]).copy()
            sizes[1] = padded
            _replace_input(index, edit, 3, sizes, f"{node.name}/sizes")
        return
    fill = _BINARY_PAD.get(op)
    if fill is None:
        return
    for position, name in enumerate(node.input):
        value = index.constant(name) if name else None
        if value is None:
            continue
        axis = _channel_axis(value)
        if axis is not None:
            _replace_input(
                index, edit, position, _pad(value, axis, extra, fill), f"{node.name}/per_channel"
            )


__all__ = ["PadChannelsToBlock"]
