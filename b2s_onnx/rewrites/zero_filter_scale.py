"""A zero filter's weight scale of 0 (or near it) in a QDQ Conv with a bias -> a scale that
keeps the bias on onnxruntime's integer grid.

onnxruntime fuses ``DQ -> Conv(DQ(weights), bias) -> Q`` into a QLinearConv, which adds the
bias on its integer sums' grid: ``round(bias / (x_scale * w_scale))`` in int32. A filter
whose integers are all its zero point (a dead or pruned channel) may carry a weight scale
of 0 or one near it, since any scale dequantizes it to zero; OpenVINO then outputs the
bias for that channel, but the grid divides by zero (or nearly), the bias leaves int32, and
onnxruntime's channel comes out 0: measured 0 instead of 0.16 for scales 0, 1e-30 and
1e-12 (1e-8 was fine). Any scale leaves such a filter's weights exactly zero, so it gets
the one that puts its bias 2**22 steps from zero on the grid: inside int32, and rounded to
the grid by 2**-23 of itself, float32's own rounding (scale 1 would round it to a whole
input level, a full output level off where the input's scale is coarser than the output's).

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
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if node.domain not in STANDARD or len(node.input) < 3 or not node.input[2]:
            return None
        reader = index.only_consumer(node.output[0])
        if reader is None or reader.op_type != "QuantizeLinear":
            return None  # no QLinearConv forms: the bias is added in float
        data = index.produced_by(node.input[0], "DequantizeLinear")
        weights = index.produced_by(node.input[1], "DequantizeLinear")
        if data is None or weights is None or len(weights.input) < 2:
            return None
        if any(a.name != "axis" for a in weights.attribute):
            return None  # blocked quantization: not this form
        quantized = per_tensor_bytes(index, data)
        bias = index.constant(node.input[2])
        q = index.constant(weights.input[0])
        scale = index.constant(weights.input[1])
        if isinstance(quantized, str) or bias is None or q is None or scale is None:
            return None
        zero = index.constant(weights.input[2]) if len(weights.input) > 2 else None
        zero = np.zeros((), q.dtype) if zero is None else zero
        channels = q.shape[0] if q.ndim > 0 else 0
        if channels == 0 or bias.size != channels or scale.size not in (1, channels):
            return None
        if scale.size > 1 and int(index.attribute(weights, "axis", 1)) % q.ndim != 0:
            return None
        scales = np.broadcast_to(scale.reshape(-1), (channels,)).astype(np.float32)
        if bias_fits_sums(bias, quantized[0], scales):
            return None
        zero_rows = np.broadcast_to(zero.reshape((-1,) + (1,) * (q.ndim - 1)), q.shape)
        dead = np.all((q == zero_rows).reshape(channels, -1), axis=1)
        fixed = np.where(dead, _dead_scale(bias.reshape(-1), quantized[0]), scales)
        fixed = fixed.astype(np.float32)
        if not bias_fits_sums(bias, quantized[0], fixed):
            return Declined(
                self.name,
                node.name,
                "a filter with nonzero weights has a scale too small for its bias on "
                "QLinearConv's integer grid",
            )
        if not index.is_free([weights]):
            return None
        index.claim([weights])
        # Per output channel (axis 0), whatever the weights had: one scale each.
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
            axis=0,
        )
        index.replace([weights], [replaced])
        return Fired(self.name, node.name, f"{int(dead.sum())} zero filters rescaled")
