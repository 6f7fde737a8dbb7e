"""A per-channel scale between two quantizations (``DQ -> Mul(a) -> Q``) -> a 1x1 depthwise
Conv with weights ``a``, which onnxruntime runs as one QLinearConv.

Pre-activation networks (ResNet-50 v2) scale every block's input per channel, the frozen
BatchNorm's multiplier, between the quantized residual sum and the FakeQuantize of the next
convolution's input. OpenVINO folds the scale into its quantization; onnxruntime runs
DequantizeLinear, Mul and QuantizeLinear as three passes in NCHW, between QLinearConvs it
keeps in NHWC (with Transposes around them). As ``DQ -> Conv(group = C, 1x1) -> Q`` the
same computation is a depthwise QLinearConv, byte to byte, inside the NHWC region.
ResNet-50 v2 quantized by NNCF: 12 such scales, 21.3 -> 19.6 ms (0.92x, 1 thread).

The weight of channel c is ``a[c]`` itself: int8 ``sign(a[c])`` with scale ``|a[c]|``
(so the dequantized weight is exactly ``a[c]``), no bias. Run unfused the Conv multiplies
each value by ``a[c]``, as the Mul did: bit-exact. Fused, QLinearConv multiplies the input
integers by ``x_scale * |a[c]| / y_scale`` where the Mul form rounded ``x * a[c]`` first:
a value on a rounding boundary may land one level away, the same kind of difference as
FakeQuantize against QuantizeLinear (docs/int8.md).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import per_tensor_bytes
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Ends the name of the Conv this writes: an integer kernel, but not a layer of the IR's
#: (the coverage does not count it).
SCALE = "/channel_scale"


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
        if dequantize is None or isinstance(per_tensor_bytes(index, dequantize), str):
            return None
        quantize = index.only_consumer(node.output[0])
        if quantize is None or quantize.op_type != "QuantizeLinear":
            return None
        if quantize.domain not in STANDARD or node.output[0] in index.graph_outputs:
            return None
        output_scale = index.constant(quantize.input[1])
        if output_scale is None or output_scale.size != 1:
            return Declined(self.name, node.name, "the output is requantized per channel")
        shape = index.info(data).shape
        if shape is None or len(shape) != 4 or shape[1] != scale.size:
            return Declined(self.name, node.name, "not a 4-D tensor scaled along its channels")
        if not np.all(np.isfinite(scale)):
            return Declined(self.name, node.name, "a scale is not finite")
        if not index.is_free([node]):
            return None
        index.claim([node])
        base = node.name or node.output[0]
        channels = scale.size
        signs = np.sign(scale).astype(np.int8).reshape(channels, 1, 1, 1)
        magnitudes = np.abs(scale).astype(np.float32)
        magnitudes[magnitudes == 0] = 1  # a zero weight (sign 0) with any positive scale
        weights = index.names.fresh(f"{base}/weights")
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
                [data, weights],
                list(node.output),
                name=f"{base}{SCALE}",
                group=channels,
                kernel_shape=[1, 1],
            ),
        ]
        index.replace([node], replacements)
        return Fired(self.name, node.name, f"{channels} channels")


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
