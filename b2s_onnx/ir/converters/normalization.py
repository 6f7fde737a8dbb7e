"""Normalizations: BatchNormInference, LRN, GRN, GroupNormalization, and attention.

Where OpenVINO's formula is ONNX's (BatchNormInference, LRN across channels of a 4-D input)
the ONNX op is used; otherwise the formula is composed from elementwise ops and reductions,
so results differ from OpenVINO's only by float summation order.
"""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.activation import typed_scalar
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Float, Int
from b2s_onnx.ir.reader import Layer

#: ONNX Slice's stand-in for "to the end of the axis".
_TO_END = np.iinfo(np.int64).max


def _axes(ctx: ConversionContext, layer: Layer, tensor: str, data: str) -> list[int]:
    """Constant axes, made non-negative and checked against the data rank."""
    rank = ctx.rank(layer, data)
    values = [int(a) for a in ctx.require_value(layer, tensor, "axes").reshape(-1)]
    if any(not -rank <= a < rank for a in values):
        raise B2SError(f"{layer.where()}: axes {values} out of range for rank {rank}")
    axes = sorted({a % rank for a in values})
    if len(axes) != len(values):
        raise B2SError(f"{layer.where()}: axes {values} repeat an axis")
    return axes


@converts(
    "BatchNormInference",
    (1, 5),
    inputs=(5, 5),
    attrs={"epsilon": Float(required=True, minimum=0.0)},
)
def batch_norm_inference(ctx, layer, inputs):
    """Version 1 takes (gamma, beta, data, mean, variance); version 5 puts data first."""
    if layer.version == "opset1":
        gamma, beta, data, mean, variance = inputs
    else:
        data, gamma, beta, mean, variance = inputs
    if ctx.rank(layer, data) < 2:
        raise B2SError(f"{layer.where()}: input 'data' needs rank >= 2 (a channel axis)")
    ctx.one(
        "BatchNormalization",
        [data, gamma, beta, mean, variance],
        ctx.out(layer),
        epsilon=layer.attrs["epsilon"],
    )


def _window_sum(ctx: ConversionContext, squares: str, axis: int, size: int) -> str:
    """The sum over ``(size - 1) // 2`` neighbours on each side along ``axis``, zero beyond
    the edges, as OpenVINO's CPU plugin sums (an even ``size`` covers ``size - 1`` values):
    the sum of shifted slices of the zero-padded tensor, which works for run-time shapes."""
    half = (size - 1) // 2
    width = 2 * half + 1
    rank = len(ctx.shape(squares))
    pads = [0] * (2 * rank)
    pads[axis] = pads[rank + axis] = half
    padded = ctx.one("Pad", [squares, _i64(ctx, "pads", pads)]) if half else squares
    total = None
    for shift in range(width):
        stop = shift - (width - 1)
        part = ctx.one(
            "Slice",
            [
                padded,
                _i64(ctx, "starts", [shift]),
                _i64(ctx, "ends", [stop if stop < 0 else _TO_END]),
                _i64(ctx, "axes", [axis]),
            ],
        )
        total = part if total is None else ctx.one("Add", [total, part])
    return total


@converts(
    "LRN",
    (1,),
    inputs=(2, 2),
    attrs={
        "alpha": Float(required=True),
        "beta": Float(required=True),
        "bias": Float(required=True),
        "size": Int(required=True, minimum=1),
    },
)
def lrn(ctx, layer, inputs):
    """data / (bias + alpha / size^len(axes) * sum of squares over the window) ^ beta; ONNX's
    LRN sums the same window across channels of a 4-D input when ``size`` is odd."""
    data = inputs[0]
    axes = _axes(ctx, layer, inputs[1], data)
    alpha, beta, bias = (layer.attrs[k] for k in ("alpha", "beta", "bias"))
    size = layer.attrs["size"]
    if axes == [1] and ctx.rank(layer, data) == 4 and size % 2:
        ctx.one("LRN", [data], ctx.out(layer), alpha=alpha, beta=beta, bias=bias, size=size)
        return
    squares = ctx.one("Mul", [data, data])
    ctx.shapes[squares] = ctx.shape(data)
    total = squares
    for axis in axes:
        total = _window_sum(ctx, total, axis, size)
        ctx.shapes[total] = ctx.shape(data)
    scaled = ctx.one("Mul", [total, typed_scalar(ctx, "alpha", alpha / size ** len(axes), data)])
    base = ctx.one("Add", [scaled, typed_scalar(ctx, "bias", bias, data)])
    denominator = ctx.one("Pow", [base, typed_scalar(ctx, "beta", beta, data)])
    ctx.one("Div", [data, denominator], ctx.out(layer))


@converts("GRN", (1,), inputs=(1, 1), attrs={"bias": Float(required=True)})
def grn(ctx, layer, inputs):
    """data / sqrt(sum of squares across channels + bias)."""
    data = inputs[0]
    if not 2 <= ctx.rank(layer, data) <= 4:
        raise B2SError(f"{layer.where()}: input 'data' needs rank 2 to 4")
    squares = ctx.reduce("ReduceSum", ctx.one("Mul", [data, data]), [1], True)
    shifted = ctx.one("Add", [squares, typed_scalar(ctx, "bias", layer.attrs["bias"], data)])
    ctx.one("Div", [data, ctx.one("Sqrt", [shifted])], ctx.out(layer))


@converts(
    "GroupNormalization",
    (12,),
    inputs=(3, 3),
    attrs={
        "num_groups": Int(required=True, minimum=1),
        "epsilon": Float(required=True, minimum=0.0),
    },
)
def group_normalization(ctx, layer, inputs):
    """Mean and variance over each group of channels (with all spatial positions), then a
    per-channel scale and bias; composed because ONNX's GroupNormalization changed the
    meaning of its scale between versions."""
    data, scale, bias = inputs
    rank = ctx.rank(layer, data)
    if rank < 2:
        raise B2SError(f"{layer.where()}: input 'data' needs rank >= 2 (a channel axis)")
    groups = layer.attrs["num_groups"]
    shape = ctx.shape(data)
    if shape[1] is not None and shape[1] % groups:
        raise B2SError(
            f"{layer.where()}: attribute num_groups={groups} must divide the {shape[1]} channels"
        )
    grouped = ctx.one("Reshape", [data, _i64(ctx, "grouped", [0, groups, -1])])
    mean = ctx.reduce("ReduceMean", grouped, [2], True)
    centered = ctx.one("Sub", [grouped, mean])
    variance = ctx.reduce("ReduceMean", ctx.one("Mul", [centered, centered]), [2], True)
    epsilon = typed_scalar(ctx, "epsilon", layer.attrs["epsilon"], data)
    normalized = ctx.one("Div", [centered, ctx.one("Sqrt", [ctx.one("Add", [variance, epsilon])])])
    restored = ctx.one("Reshape", [normalized, ctx.one("Shape", [data])])
    per_channel = _i64(ctx, "per_channel", [-1] + [1] * (rank - 2))
    scaled = ctx.one("Mul", [restored, ctx.one("Reshape", [scale, per_channel])])
    ctx.one("Add", [scaled, ctx.one("Reshape", [bias, per_channel])], ctx.out(layer))
