"""A quantized Conv reading 1 to 3 channels (an image's first layer) -> the same Conv on the
bytes padded to 4 channels, with weights for the extra channels equal to their zero point.

onnxruntime runs a QLinearConv in NHWC, and with fewer than 4 input channels its u8 x s8
kernel takes a slower path. Measured 1 thread, median of 150 interleaved runs, the whole
``Q -> DQ -> Conv -> Q`` group with and without a u8 ``Pad`` to 4 channels:

    input -> output channels, size, kernel/stride    padded / as is
    3 -> 16, 224, 3/2                                0.77
    3 -> 32, 224, 3/2                                0.75
    3 -> 32, 300, 3/2                                0.70
    3 -> 16, 128, 3/1                                0.89
    1 -> 16, 224, 3/2                                0.79
    3 -> 64, 224, 7/2                                1.01
    3 -> 8, 128, 3/1                                 1.02

An extra channel's weights are its output channel's weight zero point, so it adds
``(x - z_x) * 0`` to each integer sum: the sums, and so every bit of the output, are the
same (checked in the tests). The padded bytes are the input's zero point. Only where a
QLinearConv forms (a QuantizeLinear is the Conv's one reader) and the input is quantized
per tensor; a float Conv or a ConvInteger gains nothing from it. Not where the input
comes through a Transpose (a channels-last graph input), which onnxruntime would move past
the Pad onto its innermost axis.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import (
    dequantized_operands,
    per_tensor_bytes,
    weight_dequantization,
)
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: onnxruntime's QLinearConv is faster from this many input channels on.
CHANNELS = 4


BEHIND_TRANSPOSE = (
    "the input comes through a Transpose: onnxruntime would move the Pad to the innermost "
    "axis, where it took longer than the convolution saves"
)
#: Ops onnxruntime's transpose optimizer moves a Transpose through on the way to the Pad.
_ELEMENTWISE = frozenset(
    {"QuantizeLinear", "DequantizeLinear", "Cast", "Mul", "Add", "Sub", "Div", "Relu", "Clip"}
)


def behind_transpose(index: GraphIndex, name: str, depth: int = 8) -> bool:
    """Whether ``name`` is a Transpose's output seen through element-wise ops: a keras or
    TensorFlow graph's NHWC input. onnxruntime then cancels that Transpose against its
    own NHWC one by pushing both through the Pad, which runs on the innermost axis
    (MobileNetV2 from keras, 224x224: the Pad took 0.63 ms, the Conv saved 0.16)."""
    node = index.producer.get(name)
    while node is not None and depth > 0 and node.op_type in _ELEMENTWISE:
        operands = [i for i in node.input if i and index.constant(i) is None]
        if len(operands) != 1:
            return False
        node, depth = index.producer.get(operands[0]), depth - 1
    return node is not None and node.op_type == "Transpose"


class QuantizedInputChannelsToFour:
    name = "quantized-input-channels-to-four"
    exact = True
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        operands = dequantized_operands(index, node.input[0], node.input[1])
        if operands is None:
            return None
        data_dq, weights_dq, q = operands
        if q is None or q.ndim != 4 or not 1 <= q.shape[1] < CHANNELS:
            return None
        if int(index.attribute(node, "group", 1)) != 1:
            return None
        reader = index.only_consumer(node.output[0])
        if reader is None or reader.op_type != "QuantizeLinear" or reader.domain not in STANDARD:
            return None  # no QLinearConv forms: nothing to gain
        data = per_tensor_bytes(index, data_dq)
        if isinstance(data, str):
            return Declined(self.name, node.name, data)
        zero = data[1]
        weights = weight_dequantization(index, weights_dq, q)
        if isinstance(weights, str):
            return Declined(self.name, node.name, weights)
        weights_zero = weights[1]
        if behind_transpose(index, data_dq.input[0]):
            return Declined(self.name, node.name, BEHIND_TRANSPOSE)
        matched = [node, *index.sole_feeders(node, weights_dq, data_dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        extra = CHANNELS - q.shape[1]
        filler = np.broadcast_to(
            weights_zero.reshape(-1, 1, 1, 1), (q.shape[0], extra, *q.shape[2:])
        )
        padded_weights = index.add_initializer(
            f"{base}/weights_4ch", np.ascontiguousarray(np.concatenate([q, filler], axis=1))
        )
        pads = index.add_initializer(
            f"{base}/channel_pads", np.asarray([0, 0, 0, 0, 0, extra, 0, 0], np.int64)
        )
        fill = index.add_initializer(f"{base}/input_zero_point", zero.reshape(()))
        padded_bytes = index.names.fresh(f"{base}/input_4ch_q")
        padded_input = index.names.fresh(f"{base}/input_4ch")
        weights = index.names.fresh(f"{base}/weights_4ch_dq")
        conv = onnx.NodeProto()
        conv.CopyFrom(node)
        conv.input[0], conv.input[1] = padded_input, weights
        weights_attributes = {"axis": int(index.attribute(weights_dq, "axis", 1))}
        replacements = [
            helper.make_node(
                "Pad", [data_dq.input[0], pads, fill], [padded_bytes], mode="constant"
            ),
            helper.make_node(
                "DequantizeLinear", [padded_bytes, *data_dq.input[1:3]], [padded_input]
            ),
            helper.make_node(
                "DequantizeLinear",
                [padded_weights, *weights_dq.input[1:]],
                [weights],
                **weights_attributes,
            ),
            conv,
        ]
        index.replace(matched, replacements)
        return Fired(self.name, node.name, f"{q.shape[1]} input channels padded to {CHANNELS}")
