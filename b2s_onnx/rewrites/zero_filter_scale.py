"""A zero filter's weight scale of 0 (or near it) in a QDQ Conv (or MatMul) with a bias ->
a scale that keeps the bias on onnxruntime's integer grid.

onnxruntime fuses ``DQ -> Conv(DQ(weights), bias) -> Q`` into a QLinearConv, which adds the
bias on its integer sums' grid: ``round(bias / (x_scale * w_scale))`` in int32. A filter
whose integers are all its zero point (a dead or pruned channel) may carry a weight scale
of 0 or one near it, since any scale dequantizes it to zero; OpenVINO then outputs the
bias for that channel, but the grid divides by zero (or nearly), the bias leaves int32, and
onnxruntime's channel comes out 0: measured 0 instead of 0.16 for scales 0, 1e-30 and
1e-12 (1e-8 was fine). A MatMul with a bias Add, fused into a QGemm, loses it the same
way (a zero column of scale 0: 0 instead of 0.38). Any scale leaves such a filter's
weights exactly zero, so it gets the one that puts its bias 2**22 steps from zero on the
grid: inside int32, and rounded to the grid by 2**-23 of itself, float32's own rounding
(scale 1 would round it to a whole input level, a full output level off where the input's
scale is coarser than the output's).

Only zero filters are changed; a filter with nonzero integers and a scale too small for its
bias is left (and named in the report): no exact repair exists there, and NNCF, for one,
never writes such scales (its zero filters get 1.2e-4).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import bias_fits_sums, per_tensor_bytes
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")


#: The bias of a zero filter in steps of its integer grid: fine enough that rounding it to
#: the grid moves it by 2**-23 of itself (float32's own rounding), far inside int32.
BIAS_STEPS = 2.0**22
LIVE_FILTER = (
    "a filter with nonzero weights has a scale too small for its bias on the integer kernel's grid"
)


def _dead_scale(bias: np.ndarray, input_scale: np.ndarray) -> np.ndarray:
    """A weight scale per channel that puts ``bias`` at ``BIAS_STEPS`` steps of the grid
    ``input_scale * scale`` (scale 1 where the bias is 0: any grid holds it)."""
    x_scale = float(np.asarray(input_scale).reshape(-1)[0])
    with np.errstate(all="ignore"):
        scale = np.abs(bias.astype(np.float64)) / (x_scale * BIAS_STEPS)
    usable = np.isfinite(scale) & (scale > np.finfo(np.float32).tiny)
    return np.where(usable, scale, 1.0).astype(np.float32)


class ZeroFilterScale:
    name = "zero-filter-scale"
    anchors = ("Conv", "MatMul")

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        found = _quantized_layer(index, node)
        if found is None:
            return None
        data, weights, bias, axis = found
        quantized = per_tensor_bytes(index, data)
        q = index.constant(weights.input[0])
        scale = index.constant(weights.input[1])
        if isinstance(quantized, str) or q is None or q.ndim < 2 or scale is None:
            return None
        zero = index.constant(weights.input[2]) if len(weights.input) > 2 else None
        zero = np.zeros((), q.dtype) if zero is None else zero
        channels = q.shape[axis]
        if bias.size != channels or scale.size not in (1, channels):
            return None
        if zero.size not in (1, channels):
            return None
        if (
            max(scale.size, zero.size) > 1
            and int(index.attribute(weights, "axis", 1)) % q.ndim != axis
        ):
            return None
        scales = np.broadcast_to(scale.reshape(-1), (channels,)).astype(np.float32)
        if bias_fits_sums(bias, quantized[0], scales):
            return None
        rows = np.moveaxis(q, axis, 0).reshape(channels, -1)
        dead = np.all(rows == np.broadcast_to(zero.reshape(-1), (channels,))[:, None], axis=1)
        fixed = np.where(dead, _dead_scale(bias.reshape(-1), quantized[0]), scales)
        fixed = fixed.astype(np.float32)
        if not bias_fits_sums(bias, quantized[0], fixed):
            return Declined(self.name, node.name, LIVE_FILTER)
        if not index.is_free([weights]):
            return None
        index.claim([weights])
        # One scale per output channel, whatever the weights had.
        per_channel = np.broadcast_to(zero.reshape(-1), (channels,)).astype(zero.dtype)
        replaced = helper.make_node(
            "DequantizeLinear",
            [
                weights.input[0],
                index.add_initializer(f"{weights.input[1]}/live", fixed),
                index.add_initializer(f"{weights.input[1]}/live_zero_point", per_channel),
            ],
            list(weights.output),
            name=weights.name,
            axis=axis,
        )
        index.replace([weights], [replaced])
        return Fired(self.name, node.name, f"{int(dead.sum())} zero filters rescaled")


def _quantized_layer(
    index: GraphIndex, node: onnx.NodeProto
) -> tuple[onnx.NodeProto, onnx.NodeProto, np.ndarray, int] | None:
    """(data DequantizeLinear, weights DequantizeLinear, bias, output channel axis of the
    weights) of a layer onnxruntime fuses with its bias into an integer kernel: a Conv with
    a constant bias that a QuantizeLinear alone reads (QLinearConv), or a MatMul on 2-D
    weights whose only reader adds a constant [N] bias that a QuantizeLinear alone reads
    (QGemm); else None."""
    if node.domain not in STANDARD or len(node.input) < 2:
        return None
    if node.op_type == "Conv":
        if len(node.input) < 3 or not node.input[2]:
            return None
        bias, last, axis = index.constant(node.input[2]), node, 0
    else:
        add = index.only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or add.domain not in STANDARD:
            return None
        other = next((n for n in add.input if n != node.output[0]), None)
        bias, last, axis = (index.constant(other) if other else None), add, 1
    reader = index.only_consumer(last.output[0])
    if bias is None or reader is None or reader.op_type != "QuantizeLinear":
        return None  # no integer kernel adds this bias: it is added in float
    data = index.produced_by(node.input[0], "DequantizeLinear")
    weights = index.produced_by(node.input[1], "DequantizeLinear")
    if data is None or weights is None or len(weights.input) < 2:
        return None
    if any(a.name != "axis" for a in weights.attribute):
        return None  # blocked quantization: not this form
    if node.op_type == "MatMul" and bias.ndim > 1 and bias.shape[:-1] != (1,) * (bias.ndim - 1):
        return None
    return data, weights, bias, axis
