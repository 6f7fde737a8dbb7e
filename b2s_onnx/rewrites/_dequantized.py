"""Facts about a layer's DequantizeLinear inputs that several INT8 rewrites check the same
way: that both operands are dequantized, whether the data arrives as run-time bytes
quantized per tensor (what onnxruntime's integer kernels take), and the weights' scale and
zero point per output channel."""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex


def dequantized_operands(
    index: GraphIndex, data: str, weights: str
) -> tuple[onnx.NodeProto, onnx.NodeProto, np.ndarray | None] | None:
    """A layer's data and weights DequantizeLinears and the weights' integers (None when
    computed), or None unless both operands are dequantized."""
    data_dq = index.produced_by(data, "DequantizeLinear")
    weights_dq = index.produced_by(weights, "DequantizeLinear")
    if data_dq is None or weights_dq is None:
        return None
    return data_dq, weights_dq, index.constant(weights_dq.input[0])


def per_tensor_bytes(index: GraphIndex, dq: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | str:
    """The scale and zero point of ``dq`` when it dequantizes run-time bytes per tensor,
    or why it does not."""
    if len(dq.input) < 3 or index.constant(dq.input[0]) is not None:
        return "the input is not run-time bytes"
    scale, zero = index.constant(dq.input[1]), index.constant(dq.input[2])
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return "the input is not quantized per tensor"
    return scale, zero


def weight_dequantization(
    index: GraphIndex, dq: onnx.NodeProto, q: np.ndarray, channel_axis: int = 0
) -> tuple[np.ndarray, np.ndarray] | str:
    """The weights' scale and zero point, one per output channel (axis ``channel_axis`` of
    ``q``: 0 for a Conv, 1 for a ConvTranspose), or why they do not fit."""
    if q.dtype not in (np.int8, np.uint8):
        return "the weights are not 8-bit integers"
    scale = index.constant(dq.input[1])
    zero = index.constant(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    if scale is None or scale.dtype != np.float32 or (len(dq.input) > 2 and zero is None):
        return "the weights' scale or zero point is computed"
    zero = np.zeros((), q.dtype) if zero is None else zero
    channels = q.shape[channel_axis]
    axis = int(index.attribute(dq, "axis", 1)) % q.ndim
    if scale.size > 1 and (scale.size != channels or axis != channel_axis):
        return "the weights' scales are not per output channel"
    flat_zero = zero.reshape(-1)
    if np.any(flat_zero != flat_zero[0]):
        return "the weights' zero points differ by channel"
    scales = np.broadcast_to(scale.reshape(-1), (channels,)).astype(np.float32)
    return scales, np.full((channels,), flat_zero[0], q.dtype)


#: The largest bias, in steps of a QLinearConv's integer sums, that leaves its int32
#: accumulator room for the sums themselves.
BIAS_LIMIT = 2.0**30


def bias_fits_sums(bias: np.ndarray, input_scale: np.ndarray, weight_scales: np.ndarray) -> bool:
    """Whether onnxruntime can put a QDQ Conv's float ``bias`` on its integer sums' grid
    (``round(bias / (input_scale * weight_scale))`` in int32) without leaving int32: a
    weight scale near zero (a damaged or degenerate layer) makes that grid so fine that the
    bias wraps around, where the float form would add it as it is."""
    grid = float(np.asarray(input_scale).reshape(-1)[0]) * weight_scales.astype(np.float64)
    with np.errstate(all="ignore"):
        steps = np.abs(bias.astype(np.float64).reshape(-1) / grid.reshape(-1))
    return bool(np.all(np.isfinite(steps)) and steps.max(initial=0.0) < BIAS_LIMIT)
