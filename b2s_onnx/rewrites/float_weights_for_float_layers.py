"""Conv/ConvTranspose/MatMul/Gemm on a float input with DequantizeLinear(constant) weights ->
the same layer on the dequantized weights as a float initializer.

Integer weights reach a layer through DequantizeLinear so that onnxruntime can run it on an
integer kernel; that needs a dequantized input too. Where the input is float (a Concat of
differently scaled tensors, a FakeQuantize kept as float arithmetic), or the layer is a
depthwise Conv read in float (faster in float than as ConvInteger), the layer stays float,
and onnxruntime, which never folds a DequantizeLinear, dequantizes the whole weight tensor
again on every run (measured 1 thread: 20% of two small NNCF networks' time). The folded
weights are the same bits: DequantizeLinear computes ``float(q - zero_point) * scale`` in
float32, as this does. The outputs agree to float rounding, not bit for bit: with constant
weights onnxruntime may choose another Conv kernel (NCHWc), which sums in another order.
"""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_integer import is_depthwise

STANDARD = ("", "ai.onnx")


def dequantized(q: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int) -> np.ndarray:
    """DequantizeLinear's value, per tensor or along ``axis``, in float32."""
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[axis % q.ndim] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    shifted = (q.astype(np.int32) - zero.astype(np.int32)).astype(np.float32)
    return (shifted * scale.astype(np.float32)).astype(np.float32)


class FloatWeightsForFloatLayers:
    name = "float-weights-for-float-layers"
    anchors = ("Conv", "ConvTranspose", "MatMul", "Gemm")

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if len(node.input) < 2:
            return None
        dq = index.producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in STANDARD:
            return None
        if not _stays_float(index, node, dq):
            return None
        values = [index.constant(name) if name else None for name in dq.input]
        if len(values) < 3 or any(v is None for v in values):
            return Declined(self.name, node.name, "the weights' dequantization is not constant")
        q, scale, zero = values[:3]
        if q.dtype not in (np.int8, np.uint8) or scale.dtype != np.float32:
            return Declined(self.name, node.name, "the weights are not 8-bit to float32")
        matched = [node, *index.sole_feeders(node, dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        weights = dequantized(q, scale, zero, int(index.attribute(dq, "axis", 1)))
        replaced = onnx.NodeProto()
        replaced.CopyFrom(node)
        replaced.input[1] = index.add_initializer(f"{node.input[1]}/float", weights)
        index.replace(matched, [replaced])
        return Fired(self.name, node.name, f"{weights.size} weights dequantized once")


def _stays_float(index: GraphIndex, node: onnx.NodeProto, weights_dq: onnx.NodeProto) -> bool:
    """Whether onnxruntime will run ``node`` in float: its input is not dequantized, or it
    is a depthwise Conv read in float (left so by the conv-integer rewrite)."""
    source = index.producer.get(node.input[0])
    if source is None or source.op_type != "DequantizeLinear":
        return True
    q = index.constant(weights_dq.input[0])
    if node.op_type != "Conv" or q is None or q.ndim != 4 or not is_depthwise(node, q.shape):
        return False
    reader = index.only_consumer(node.output[0])
    return reader is None or reader.op_type != "QuantizeLinear"
