"""A per-channel scale (and shift) between two quantizations (``DQ -> Mul(a) -> [Add(b)] ->
Q``) -> a 1x1 depthwise Conv with weights ``a`` (and bias ``b``), which onnxruntime runs as
one QLinearConv.

Pre-activation networks (ResNet-50 v2) scale every block's input per channel, the frozen
BatchNorm's multiplier, between the quantized residual sum and the FakeQuantize of the next
convolution's input. OpenVINO folds the scale into its quantization; onnxruntime runs
DequantizeLinear, Mul and QuantizeLinear as three passes in NCHW, between QLinearConvs it
keeps in NHWC (with Transposes around them). As ``DQ -> Conv(group = C, 1x1) -> Q`` the
same computation is a depthwise QLinearConv, byte to byte, inside the NHWC region.
ResNet-50 v2 quantized by NNCF: 12 such scales, 21.3 -> 19.6 ms (0.92x, 1 thread). A
BatchNorm after a quantized CReLU (person-attributes-recognition-crossroad-0230: seven, on
48-channel maps of 40x20 to 96-channel ones of 20x10; an eighth feeds a MaxPool) is a scale
and a shift: with the shift as the Conv's bias, the model took 0.92x the time at 1 thread,
0.75x at 2 (medians of 200 interleaved runs).

The weight of channel c is ``a[c]`` itself: int8 ``sign(a[c])`` with scale ``|a[c]|``
(so the dequantized weight is exactly ``a[c]``), no bias. Run unfused the Conv multiplies
each value by ``a[c]``, as the Mul did: bit-exact. Fused, QLinearConv multiplies the input
integers by ``x_scale * |a[c]| / y_scale`` where the Mul form rounded ``x * a[c]`` first:
a value on a rounding boundary may land one level away, the same kind of difference as
FakeQuantize against QuantizeLinear (docs/int8.md). With a shift the weight is
``64 * sign(a[c])`` with scale ``|a[c]| / 64`` (still exactly ``a[c]``: a power of two):
onnxruntime adds the bias on the integer sums' grid ``x_scale * |a[c]| / 64``, so rounding
it moves the result by at most 1/128 of an input level, where scale 1 would move it by half
a level. Where a scale is so near zero that the shift on that grid would not fit int32 (a
damaged layer), the pair stays as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import bias_fits_sums, per_tensor_bytes
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector, data_and_constant
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Ends the name of the Conv this writes: an integer kernel, but not a layer of the IR's
#: (the coverage does not count it).
SCALE = "/channel_scale"
#: The weight integer that stands for a scale of 1 when a bias is added (module doc).
SHIFTED_WEIGHT = 64
SHIFT_TOO_FINE = "the shift does not fit int32 on the integer sums' grid (a scale near zero)"


class ChannelScaleAsDepthwiseConv:
    name = "channel-scale-as-depthwise-conv"
    exact = False
    anchors = ("Mul",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        found = _scale_operand(index, node)
        if found is None:
            return None
        data, scale = found
        dequantize = index.produced_by(data, "DequantizeLinear")
        quantized = per_tensor_bytes(index, dequantize) if dequantize is not None else None
        if quantized is None or isinstance(quantized, str):
            return None
        shift_add, shift = _shift(index, node.output[0], scale.size)
        scaled = (shift_add or node).output[0]
        quantize = index.only_consumer(scaled)
        if quantize is None or quantize.op_type != "QuantizeLinear":
            return None
        if quantize.domain not in STANDARD or scaled in index.graph_outputs:
            return None
        output_scale = index.constant(quantize.input[1])
        if output_scale is None or output_scale.size != 1:
            return Declined(self.name, node.name, "the output is requantized per channel")
        shape = index.info(data).shape
        if shape is None or len(shape) != 4 or shape[1] != scale.size:
            return Declined(self.name, node.name, "not a 4-D tensor scaled along its channels")
        if not np.all(np.isfinite(scale)):
            return Declined(self.name, node.name, "a scale is not finite")
        channels = scale.size
        # With a bias, a weight of 64 puts the bias's grid at 1/64 of an input level.
        unit = 1 if shift is None else SHIFTED_WEIGHT
        signs = (unit * np.sign(scale)).astype(np.int8).reshape(channels, 1, 1, 1)
        magnitudes = (np.abs(scale) / np.float32(unit)).astype(np.float32)
        magnitudes[magnitudes == 0] = 1  # a zero weight (sign 0) with any positive scale
        if shift is not None and not bias_fits_sums(shift, quantized[0], magnitudes):
            return Declined(self.name, node.name, SHIFT_TOO_FINE)
        matched = [node] if shift_add is None else [node, shift_add]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        weights = index.names.fresh(f"{base}/weights")
        conv_inputs = [data, weights]
        if shift is not None:
            conv_inputs.append(index.add_initializer(f"{base}/bias", shift))
        replacements = [
            helper.make_node(
                "DequantizeLinear",
                [
                    index.add_initializer(f"{base}/weights_q", signs),
                    index.add_initializer(f"{base}/weights_scale", magnitudes),
                    index.add_initializer(f"{base}/weights_zero", np.zeros(channels, np.int8)),
                ],
                [weights],
                axis=0,
            ),
            helper.make_node(
                "Conv",
                conv_inputs,
                [scaled],
                name=f"{base}{SCALE}",
                group=channels,
                kernel_shape=[1, 1],
            ),
        ]
        index.replace(matched, replacements)
        if shift_add is not None:
            report.absorbed[node.output[0]] = scaled
        detail = "" if shift is None else ", with a shift"
        return Fired(self.name, node.name, f"{channels} channels{detail}")


def _shift(
    index: GraphIndex, scaled: str, channels: int
) -> tuple[onnx.NodeProto | None, np.ndarray | None]:
    """The Add of a per-channel float32 constant that alone reads ``scaled``, with that
    constant as [C]; (None, None) when there is none."""
    add = index.only_consumer(scaled)
    if add is None or add.op_type != "Add" or add.domain not in STANDARD:
        return None, None
    found = data_and_constant(index, add)
    if found is None or found[0] != scaled or found[1].dtype != np.float32:
        return None, None
    vector = channel_vector(found[1], channels)
    if vector is None or not np.all(np.isfinite(vector)):
        return None, None
    return add, np.ascontiguousarray(vector, np.float32)


def _scale_operand(index: GraphIndex, node: onnx.NodeProto) -> tuple[str, np.ndarray] | None:
    """(the data operand, the per-channel scale as float32 [C]) of ``node``, when one
    operand is a float32 constant of shape [1, C, 1, 1] or [C, 1, 1] with C > 1."""
    if node.domain not in STANDARD or len(node.input) != 2:
        return None
    for data, other in (node.input, node.input[::-1]):
        value = index.constant(other)
        if value is None or value.dtype != np.float32 or value.size < 2:
            continue
        per_channel = value.shape in ((1, value.size, 1, 1), (value.size, 1, 1))
        if per_channel and index.constant(data) is None:
            return data, value.reshape(-1)
    return None
