"""A quantized CReLU -- ``Concat(Q(y), Q(-y))`` of a quantized Conv's output y -> one QDQ
Conv on the weights and bias stacked with their negation, ``[W; -W]`` and ``[b; -b]``, and
one QuantizeLinear writing the Concat's bytes.

CReLU ("concatenated ReLU": PVANet-style networks, OpenVINO's person-attributes models)
joins a convolution's output with its negation; the ReLU comes later (here, in the next
quantizer's range). NNCF and POT put a FakeQuantize on y and one on -y with the same range,
and the Concat joins their bytes. The Conv is then read by a QuantizeLinear and a Neg, so
onnxruntime cannot fuse it into a QLinearConv and ``conv-integer`` runs it as ConvInteger,
dequantized, biased, negated and quantized twice. Stacked, it is one QLinearConv with twice
the output channels. Measured (medians of 200 interleaved runs, 1 thread / 2 threads, the
whole model with against without): person-attributes-recognition-crossroad-0230 (eight
such layers, 3 -> 16 at 160x80 to 48 -> 48 at 20x10) 0.72x / 0.63x, the NNCF network
``models/int8/crelu_block`` 0.63x / 0.36x.

Not done for a float CReLU: there the Conv computes twice the products to save a Neg and a
Concat, and the same network in float measured 1.04-1.06x the time at 1 thread (0.69x at
2).

Exactness: the second half's integer sums are the first half's negated, and onnxruntime's
bias and output rounding are symmetric, so its bytes are what quantizing the negated first
half gives, as before. The first half is the layer as every QLinearConv computes it (the
bias added on the integer sums' grid and the sums scaled once, where the ConvInteger form
added the bias in float): a value on a rounding boundary may land one level away
(``exact = False``).

Only where it is sound: a Conv of group 1 on dequantized run-time data and 8-bit integer
weights whose negation ``2 * zero_point - q`` fits their type (symmetric int8 weights that
reach -128 do not); a constant bias that fits int32 on the sums' grid (QLinearConv adds it
there; a weight scale near zero would make it wrap); y read only by its QuantizeLinear and
the Neg (or Mul by -1), -y only by its QuantizeLinear, the two QuantizeLinears alike (per
tensor, equal scale and zero point) and read only by the Concat, side by side along its
channel axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import bias_fits_sums, per_tensor_bytes
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
BIAS_TOO_FINE = "the bias does not fit int32 on the integer sums' grid (a weight scale near zero)"


@dataclass(frozen=True)
class _Pair:
    """A quantized Conv's output y and its negation, quantized alike, as two neighbouring
    Concat inputs."""

    conv: onnx.NodeProto
    negation: onnx.NodeProto
    #: The QuantizeLinears of y and of -y.
    quantizers: tuple[onnx.NodeProto, onnx.NodeProto]
    #: 1 when y comes first in the Concat, -1 when -y does.
    first_sign: int
    #: The Conv's input scale (per tensor).
    input_scale: np.ndarray

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return [self.conv, self.negation, *self.quantizers]


@dataclass(frozen=True)
class _Weights:
    """The stacked weight integers with their scale and zero point."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    dequantize: onnx.NodeProto
    #: The weights' DequantizeLinear when only the Conv reads it (it goes with the Conv).
    feeders: tuple[onnx.NodeProto, ...]

    @property
    def channels(self) -> int:
        """The Conv's own output channels (half the stacked ones)."""
        return int(self.values.shape[0]) // 2


class CReluAsStackedConv:
    name = "crelu-as-stacked-conv"
    #: QLinearConv's requantization (module doc).
    exact = False
    anchors = ("Concat",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if node.domain not in STANDARD:
            return None
        for position in range(len(node.input) - 1):
            pair = _pair(index, node, node.input[position], node.input[position + 1])
            if pair is None:
                continue
            name = pair.conv.name or pair.conv.output[0]
            weights = _stacked_weights(index, pair)
            if isinstance(weights, str):
                return Declined(self.name, name, weights)
            bias = _stacked_bias(index, pair, weights.channels)
            if bias is None:
                return Declined(self.name, name, "the bias is computed")
            if not bias_fits_sums(bias, pair.input_scale, _per_channel(weights.scale, bias.size)):
                return Declined(self.name, name, BIAS_TOO_FINE)
            matched = [*pair.nodes, node, *weights.feeders]
            if not index.is_free(matched):
                return None
            index.claim(matched)
            return _rewrite(self.name, index, node, position, pair, weights, bias, report)
        return None


def _pair(index: GraphIndex, concat: onnx.NodeProto, a: str, b: str) -> _Pair | None:
    """The pair that ``a`` and ``b`` (neighbouring inputs of ``concat``) are, if any."""
    qa, qb = index.produced_by(a, "QuantizeLinear"), index.produced_by(b, "QuantizeLinear")
    if a == b or qa is None or qb is None or not _same_quantization(index, qa, qb):
        return None
    if index.only_consumer(a) is not concat or index.only_consumer(b) is not concat:
        return None
    for first_sign, (quantize_y, quantize_negated) in ((1, (qa, qb)), (-1, (qb, qa))):
        y, negated = quantize_y.input[0], quantize_negated.input[0]
        negation = index.producer.get(negated)
        if negation is None or not _negates(index, negation, y):
            continue
        if {id(r) for r in index.consumers.get(y, [])} != {id(negation), id(quantize_y)}:
            return None
        if y in index.graph_outputs or index.only_consumer(negated) is not quantize_negated:
            return None
        conv = index.produced_by(y, "Conv")
        if conv is None or int(index.attribute(conv, "group", 1)) != 1:
            return None
        data = index.produced_by(conv.input[0], "DequantizeLinear")
        quantized = per_tensor_bytes(index, data) if data is not None else None
        if quantized is None or isinstance(quantized, str):
            return None
        if not _axis_is_channels(index, concat, conv):
            return None
        return _Pair(conv, negation, (quantize_y, quantize_negated), first_sign, quantized[0])
    return None


def _same_quantization(index: GraphIndex, a: onnx.NodeProto, b: onnx.NodeProto) -> bool:
    """Both QuantizeLinears map floats to the same levels, per tensor."""
    if a.domain not in STANDARD or b.domain not in STANDARD or len(a.input) != len(b.input):
        return False
    if index.attributes(a) != index.attributes(b):
        return False
    for position in range(1, len(a.input)):
        va, vb = index.constant(a.input[position]), index.constant(b.input[position])
        if va is None or vb is None or va.size != 1 or va.dtype != vb.dtype or va != vb:
            return False
    return True


def _negates(index: GraphIndex, node: onnx.NodeProto, source: str) -> bool:
    """``node`` computes ``-source``: a Neg, or a Mul by the constant -1."""
    if node.domain not in STANDARD or source not in node.input:
        return False
    if node.op_type == "Neg":
        return True
    if node.op_type != "Mul" or len(node.input) != 2 or node.input[0] == node.input[1]:
        return False
    other = node.input[1] if node.input[0] == source else node.input[0]
    value = index.constant(other)
    return value is not None and value.size == 1 and value.ndim <= 1 and float(value) == -1.0


def _axis_is_channels(index: GraphIndex, concat: onnx.NodeProto, conv: onnx.NodeProto) -> bool:
    shape = index.info(conv.input[1]).shape
    rank = len(shape) if shape is not None else 0
    axis = int(index.attribute(concat, "axis", 0))
    return rank >= 3 and axis in (1, 1 - rank)


def _stacked_weights(index: GraphIndex, pair: _Pair) -> _Weights | str:
    """``[W; -W]`` (or ``[-W; W]``) as integers behind a DequantizeLinear."""
    dq = index.produced_by(pair.conv.input[1], "DequantizeLinear")
    q = index.constant(dq.input[0]) if dq is not None else None
    if q is None or q.dtype not in (np.int8, np.uint8):
        return "the weights are not constant 8-bit integers"
    scale = index.constant(dq.input[1])
    zero = index.constant(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    if scale is None or (len(dq.input) > 2 and dq.input[2] and zero is None):
        return "the weights' scale or zero point is computed"
    if zero is None:
        zero = np.zeros((), q.dtype)
    channels = q.shape[0]
    per_channel = scale.size > 1 or zero.size > 1
    if per_channel and (
        scale.size not in (1, channels)
        or zero.size not in (1, channels)
        or int(index.attribute(dq, "axis", 1)) % q.ndim != 0
    ):
        return "the weights are not quantized per output channel"
    zero_per_channel = np.broadcast_to(zero.reshape((-1,) + (1,) * (q.ndim - 1)), q.shape)
    negated = 2 * zero_per_channel.astype(np.int32) - q.astype(np.int32)
    limits = np.iinfo(q.dtype)
    if negated.min() < limits.min or negated.max() > limits.max:
        return f"a negated weight integer leaves {q.dtype}'s range"
    halves = {1: q, -1: negated.astype(q.dtype)}
    signs = (pair.first_sign, -pair.first_sign)
    values = np.concatenate([halves[s] for s in signs])

    def stacked(value: np.ndarray) -> np.ndarray:
        if value.size == 1 and not per_channel:
            return value
        return np.tile(np.broadcast_to(value.reshape(-1), (channels,)), 2)

    feeders = tuple(index.sole_feeders(pair.conv, dq))
    return _Weights(values, stacked(scale), stacked(zero), dq, feeders)


def _per_channel(value: np.ndarray, channels: int) -> np.ndarray:
    return np.broadcast_to(value.reshape(-1), (channels,))


def _stacked_bias(index: GraphIndex, pair: _Pair, channels: int) -> np.ndarray | None:
    """``[b; -b]`` (in the Concat's order) from the Conv's constant bias (zeros without)."""
    bias = np.zeros((channels,), np.float32)
    if len(pair.conv.input) > 2 and pair.conv.input[2]:
        value = index.constant(pair.conv.input[2])
        if value is None or value.size != channels:
            return None
        bias = value.astype(np.float32).reshape(-1)
    return np.concatenate([pair.first_sign * bias, -pair.first_sign * bias]).astype(np.float32)


def _rewrite(
    rule: str,
    index: GraphIndex,
    concat: onnx.NodeProto,
    position: int,
    pair: _Pair,
    weights: _Weights,
    bias: np.ndarray,
    report: RewriteReport,
) -> Fired:
    conv = pair.conv
    base = conv.name or conv.output[0]
    inputs = list(concat.input)
    alone = len(inputs) == 2
    joined = concat.output[0] if alone else index.names.fresh(f"{base}/with_negation/quantized")
    weights_name = index.names.fresh(f"{base}/with_negation_weights")
    dequantize = helper.make_node(
        "DequantizeLinear",
        [
            index.add_initializer(f"{base}/with_negation_weights_q", weights.values),
            index.add_initializer(f"{base}/with_negation_weights_scale", weights.scale),
            index.add_initializer(f"{base}/with_negation_weights_zero_point", weights.zero_point),
        ],
        [weights_name],
        name=weights_name,
    )
    dequantize.attribute.extend(weights.dequantize.attribute)
    stacked = index.names.fresh(f"{base}/with_negation")
    bias_name = index.add_initializer(f"{base}/with_negation_bias", bias)
    stacked_conv = helper.make_node(
        "Conv", [conv.input[0], weights_name, bias_name], [stacked], name=stacked
    )
    stacked_conv.attribute.extend(conv.attribute)
    quantize_y = pair.quantizers[0]
    quantize = helper.make_node(
        "QuantizeLinear", [stacked, *quantize_y.input[1:]], [joined], name=f"{stacked}/quantize"
    )
    quantize.attribute.extend(quantize_y.attribute)
    nodes = [dequantize, stacked_conv, quantize]
    if not alone:
        inputs[position : position + 2] = [joined]
        rest = helper.make_node("Concat", inputs, list(concat.output), name=concat.name)
        rest.attribute.extend(concat.attribute)
        nodes.append(rest)
    index.replace([*pair.nodes, concat, *weights.feeders], nodes)
    y = conv.output[0]
    if pair.first_sign == 1:
        report.widened[y] = (stacked, weights.channels)
    else:
        report.absorbed[y] = stacked
    report.absorbed[pair.negation.output[0]] = stacked
    return Fired(rule, conv.name or base, f"{weights.channels} -> {2 * weights.channels} channels")
