"""A quantized Conv from at most 4 channels to at most 8, whose output is quantized again
(an image's first layer, a small branch of it) -> ConvInteger(u8, u8) -> DequantizeLinear
-> Add(bias), ahead of the same QuantizeLinear.

onnxruntime fuses ``DQ -> Conv -> Q`` into QLinearConv, which runs in NHWC and is slow when
both channel counts are this small: the u8 x s8 kernel works on blocks of 16 output channels
and gathers an image patch per output pixel. ConvInteger (NCHW, im2col + one integer GEMM)
does not pay that. Measured 1 thread, median of 60 interleaved runs, the whole group from
input bytes to output bytes, ConvInteger form / the faster of QLinearConv and QLinearConv on
input padded to 4 channels:

    input -> output channels, size, kernel/stride    1 thread   2 threads
    3 -> 8, 128, 3/1                                 0.43       0.35
    3 -> 8, 128, 1/1                                 0.63       0.57
    3 -> 8, 224, 3/2                                 0.43       0.44
    3 -> 8, 320, 3/2                                 0.44       0.60
    1 -> 8, 224, 3/2                                 0.33       0.39
    1 -> 8, 128, 1/1                                 0.67       0.99
    3 -> 4, 224, 3/2                                           0.45
    3 -> 16, 128, 3/1                                1.10       1.78
    3 -> 32, 224, 3/2                                1.67

From 16 output channels QLinearConv is as fast or faster, so the rule stops at 8. It runs
before ``quantized-input-channels-to-four``, whose padding gains nothing at 8 channels
(1.02 in its own table) and which then leaves these layers alone.

The output is requantized from float instead of inside the integer kernel: QLinearConv adds
a bias rounded to int32 and scales once; this form adds the float bias to the scaled sum.
Either is within one output step of the other (measured: at most 1, on rounding ties), and
this one is OpenVINO's order of operations (dequantize, add the bias, quantize).
"""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._dequantized import dequantized_operands
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_integer import STANDARD, conv_integer_form

#: Largest channel counts where the ConvInteger form measured faster (module doc).
MAX_INPUT_CHANNELS = 4
MAX_OUTPUT_CHANNELS = 8


def quantized_again_operands(
    index: GraphIndex, node: onnx.NodeProto
) -> tuple[onnx.NodeProto, onnx.NodeProto, np.ndarray | None] | None:
    """A Conv's data and weight DequantizeLinears and integer weights when one
    QuantizeLinear alone reads its output (a QLinearConv for onnxruntime), else None."""
    operands = dequantized_operands(index, node.input[0], node.input[1])
    if operands is None:
        return None
    reader = index.only_consumer(node.output[0])
    if reader is None or reader.op_type != "QuantizeLinear" or reader.domain not in STANDARD:
        return None
    return operands


class FewChannelsConvInteger:
    name = "few-channels-as-conv-integer"
    #: The requantization rounds in another order (module doc).
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        operands = quantized_again_operands(index, node)
        if operands is None:
            return None
        data_dq, weights_dq, weights = operands
        if weights is None or weights.ndim != 4 or int(index.attribute(node, "group", 1)) != 1:
            return None
        if weights.shape[0] > MAX_OUTPUT_CHANNELS or weights.shape[1] > MAX_INPUT_CHANNELS:
            return None
        return conv_integer_form(self.name, index, node, data_dq, weights_dq)
