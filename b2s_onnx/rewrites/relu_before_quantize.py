"""Relu -> QuantizeLinear whose zero point is the type's minimum -> QuantizeLinear alone.

Such a QuantizeLinear saturates every negative input to its zero point, which is what the
Relu would have produced: the Relu is redundant, exactly. Removing it puts the producer
(a Conv, a MatMul) right before the QuantizeLinear, the form onnxruntime's QDQ transformer
turns into an integer kernel (QLinearConv); with the Relu between, it keeps a float Conv.
"""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class ReluBeforeQuantize:
    name = "relu-before-quantize"
    anchors = ("QuantizeLinear",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        relu = index.producer.get(node.input[0])
        if relu is None or relu.op_type != "Relu" or relu.domain not in ("", "ai.onnx"):
            return None
        if index.only_consumer(relu.output[0]) is None:
            return None
        zero_point = (
            index.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        )
        if zero_point is None or zero_point.dtype not in (np.uint8, np.int8):
            return Declined(self.name, node.name, "the zero point is not a uint8/int8 constant")
        if np.any(zero_point != np.iinfo(zero_point.dtype).min):
            return Declined(self.name, node.name, "the zero point is above the type's minimum")
        if not index.is_free([relu, node]):
            return None
        index.claim([relu, node])
        quantize = onnx.NodeProto()
        quantize.CopyFrom(node)
        quantize.input[0] = relu.input[0]
        index.replace([relu, node], [quantize])
        report.absorbed[relu.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"'{relu.name}' dropped")
