"""Relu or Clip -> QuantizeLinear that saturates at least as tightly -> QuantizeLinear alone.

A QuantizeLinear clamps to its integer type's range. When it already maps the clamp's
lower bound to the lowest level and its upper bound to the highest, every value the clamp
would move lands on the same level anyway, so the clamp is redundant, exactly: Relu before
a quantizer whose zero point is the type's minimum, and ReLU6 (Clip 0..6) before one whose
range ends at or below 6, which is every FakeQuantize NNCF or POT puts after a ReLU6 (the
MobileNetV2 family). Removing it puts the producer (a Conv, a MatMul) right before the
QuantizeLinear, the form onnxruntime's QDQ transformer turns into an integer kernel
(QLinearConv); with the clamp between, the Conv stays float, or at best a ConvInteger with
its sums dequantized and quantized again.

The test is done in QuantizeLinear's own float32 arithmetic (``rint(x / scale) +
zero_point``, then saturation), and QuantizeLinear is monotone, so checking the two bounds
decides every input. NaN passes through a clamp unchanged, so it quantizes the same with or
without one.
"""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")


class ClampBeforeQuantize:
    name = "clamp-before-quantize"
    anchors = ("QuantizeLinear",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        clamp = index.producer.get(node.input[0])
        if clamp is None or clamp.op_type not in ("Relu", "Clip") or clamp.domain not in STANDARD:
            return None
        if index.only_consumer(clamp.output[0]) is None:
            return None
        why = why_clamp_matters(index, clamp, node)
        if why is not None:
            return Declined(self.name, node.name, why)
        if not index.is_free([clamp, node]):
            return None
        index.claim([clamp, node])
        quantize = onnx.NodeProto()
        quantize.CopyFrom(node)
        quantize.input[0] = clamp.input[0]
        index.replace([clamp, node], [quantize])
        report.absorbed[clamp.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"'{clamp.name}' ({clamp.op_type}) dropped")


def why_clamp_matters(
    index: GraphIndex, clamp: onnx.NodeProto, quantize: onnx.NodeProto
) -> str | None:
    """None when ``quantize`` maps every value ``clamp`` (a Relu or Clip) would move to the
    level it moves it to, so the clamp can go; otherwise why it cannot."""
    bounds = _bounds(index, clamp)
    if isinstance(bounds, str):
        return bounds
    scale = index.constant(quantize.input[1])
    zero_point = (
        index.constant(quantize.input[2]) if len(quantize.input) > 2 and quantize.input[2] else None
    )
    if zero_point is None or zero_point.dtype not in (np.uint8, np.int8):
        return "the zero point is not a uint8/int8 constant"
    if scale is None or scale.dtype != np.float32 or not np.all(scale > 0):
        return "the scale is not a positive float32 constant"
    low, high = bounds
    info = np.iinfo(zero_point.dtype)
    if np.any(_levels(low, scale, zero_point) > info.min):
        return f"'{clamp.name}' clamps at {low}, above the lowest level"
    if np.any(_levels(high, scale, zero_point) < info.max):
        return f"'{clamp.name}' clamps at {high}, below the highest level"
    return None


def _bounds(index: GraphIndex, clamp: onnx.NodeProto) -> tuple[np.float32, np.float32] | str:
    """The clamp's float32 bounds (infinite where it has none), or why they are unknown."""
    if clamp.op_type == "Relu":
        return np.float32(0), np.float32(np.inf)
    low, high = np.float32(-np.inf), np.float32(np.inf)
    if index.attribute(clamp, "min") is not None or index.attribute(clamp, "max") is not None:
        low = np.float32(index.attribute(clamp, "min", low))
        high = np.float32(index.attribute(clamp, "max", high))
    for position in (1, 2):
        if len(clamp.input) <= position or not clamp.input[position]:
            continue
        value = index.constant(clamp.input[position])
        if value is None or value.size != 1 or value.dtype != np.float32:
            return f"'{clamp.name}' has a computed or non-float32 bound"
        if position == 1:
            low = np.float32(value.reshape(()))
        else:
            high = np.float32(value.reshape(()))
    return low, high


def _levels(value: np.float32, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """The level QuantizeLinear gives ``value`` before saturating, per scale (a per-axis
    quantizer has one per channel); infinite for an infinite bound."""
    if np.isinf(value):
        return np.full(scale.shape, float(value))
    quotient = np.float32(value) / scale.astype(np.float32)
    return np.rint(quotient).astype(np.float64) + zero_point.astype(np.float64)
