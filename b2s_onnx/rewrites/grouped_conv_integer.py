"""A quantized grouped Conv with 2-8 input channels per group (ResNeXt, ShuffleNet, RegNet
blocks), whose output is quantized again -> ConvInteger(u8, u8) -> DequantizeLinear ->
Add(bias), ahead of the same QuantizeLinear.

onnxruntime fuses ``DQ -> Conv -> Q`` into QLinearConv, whose grouped path (not depthwise)
is slow when the groups are narrow: it runs one small integer GEMM per group. ConvInteger
does the same integers in its own grouped im2col + GEMM. Measured 1 thread, median of 20
interleaved runs, the whole group from input bytes to output bytes (channels/groups, size,
3x3): ConvInteger form / QLinearConv:

    channels per group   shape                      ConvInteger / QLinearConv
    4                    32 / 8 at 112x112          0.52 / 3.05 ms = 0.17
    4                    64 / 16 at 56x56           0.26 / 1.50 ms = 0.18
    4                    128 / 32 at 48x48          0.45 / 2.28 ms = 0.20
    2                    128 / 64 at 48x48          0.53 / 4.10 ms = 0.13
    2                    8 / 4 at 128x128           0.14 / 1.67 ms = 0.08
    2                    4 / 2 at 128x128           0.07 / 0.85 ms = 0.08
    8                    256 / 32 at 28x28          0.40 / 0.84 ms = 0.48
    16                   128 / 8 at 48x48           0.56 / 0.76 ms = 0.74
    16                   512 / 32 at 14x14          0.33 / 0.25 ms = 1.35
    32                   128 / 4 at 48x48           0.79 / 0.54 ms = 1.45

At 16 channels a group the two trade places (0.74, 1.35) and at 32 QLinearConv wins, so
the rule stops at 8; depthwise
Convs (one channel a group) keep QLinearConv, whose depthwise kernel is fast. As with
`few-channels-as-conv-integer`, the output is requantized from the float sum plus the float
bias, OpenVINO's order of operations, where QLinearConv rounds the bias to int32 first.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_integer import conv_integer_form
from b2s_onnx.rewrites.few_channels_conv_integer import quantized_again_operands

#: Input channels per group where the ConvInteger form measured faster (module doc).
MAX_CHANNELS_PER_GROUP = 8


class GroupedConvInteger:
    name = "grouped-conv-integer"
    #: The requantization rounds in another order (module doc).
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if int(index.attribute(node, "group", 1)) == 1:
            return None
        operands = quantized_again_operands(index, node)
        if operands is None:
            return None
        data_dq, weights_dq, weights = operands
        if weights is None or weights.ndim < 3 or weights.shape[1] == 1:
            return None
        if weights.shape[1] > MAX_CHANNELS_PER_GROUP:
            return Declined(
                self.name,
                node.name,
                f"{weights.shape[1]} channels a group: from 16 QLinearConv measured as fast",
            )
        return conv_integer_form(self.name, index, node, data_dq, weights_dq)
