"""Nearest-neighbour Interpolate on sizes known only at run time, where ONNX's Resize has no
equivalent: the coordinate mode 'tf_half_pixel_for_nn' (TensorFlow's resize_nearest on a
dynamic image) and the 'simple' rounding.

With static sizes ``interpolate.py`` computes each axis's source indices as a constant
table. Here the same float32 arithmetic runs as ONNX ops on the sizes read at run time,
in the same order (``scale = out / in``, then the coordinate transformation, the rounding,
the clamp into the input), and a Gather per axis moves the elements: bit-exact, like the
table. Only ``shape_calculation_mode = sizes`` (the output size is an input); with run-time
scales the output size would follow OpenVINO's own rounding of ``in * scale``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s, int64s


def _f32(ctx: ConversionContext, value: float) -> str:
    return float32s(ctx, "c", np.float32(value))


def _coordinate(ctx, x: str, mode: str, scale: str, in_dim: str, out_dim: str) -> str:
    """OpenVINO's coordinate transformation of output positions ``x`` (float32)."""
    if mode in ("half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
        source = ctx.one("Div", [ctx.one("Add", [x, _f32(ctx, 0.5)]), scale])
        if mode == "tf_half_pixel_for_nn":
            return source
        source = ctx.one("Sub", [source, _f32(ctx, 0.5)])
        if mode == "half_pixel":
            return source
    elif mode == "asymmetric":
        return ctx.one("Div", [x, scale])
    else:  # align_corners
        below = ctx.one("Sub", [in_dim, _f32(ctx, 1.0)])
        above = ctx.one("Sub", [out_dim, _f32(ctx, 1.0)])
        source = ctx.one("Div", [ctx.one("Mul", [x, below]), above])
    # pytorch_half_pixel and align_corners read position 0 for a one-element output.
    single = ctx.one("LessOrEqual", [out_dim, _f32(ctx, 1.0)])
    return ctx.one("Where", [single, _f32(ctx, 0.0), source])


def _rounded(ctx, coordinate: str, mode: str, scale: str) -> str:
    floor = ctx.one("Floor", [coordinate])
    if mode == "floor":
        return floor
    ceil = ctx.one("Ceil", [coordinate])
    if mode == "ceil":
        return ceil
    if mode == "simple":  # ceil when downscaling, else truncation toward zero
        truncated = ctx.one("Where", [ctx.one("Less", [coordinate, _f32(ctx, 0.0)]), ceil, floor])
        return ctx.one("Where", [ctx.one("Less", [scale, _f32(ctx, 1.0)]), ceil, truncated])
    tie = ctx.one("Equal", [coordinate, ctx.one("Add", [floor, _f32(ctx, 0.5)])])
    at_tie = floor if mode == "round_prefer_floor" else ceil
    return ctx.one("Where", [tie, at_tie, ctx.one("Round", [coordinate])])


def nearest_at_run_time(
    ctx: ConversionContext,
    data: str,
    axes: list[int],
    sizes: str,
    coordinates: str,
    nearest_mode: str,
    output: str,
) -> None:
    """``data`` resized on ``axes`` to the run-time ``sizes`` (one per axis), each axis a
    Gather of source indices computed as OpenVINO computes them."""
    shape = ctx.one("Shape", [data])
    targets = ctx.int64(sizes)
    current = data
    for position, axis in enumerate(axes):
        in_size = ctx.one("Gather", [shape, int64s(ctx, "axis", axis)], axis=0)
        out_size = ctx.one("Gather", [targets, int64s(ctx, "position", position)], axis=0)
        in_dim = ctx.one("Cast", [in_size], to=TensorProto.FLOAT)
        out_dim = ctx.one("Cast", [out_size], to=TensorProto.FLOAT)
        scale = ctx.one("Div", [out_dim, in_dim])
        x = ctx.one("Range", [_f32(ctx, 0.0), out_dim, _f32(ctx, 1.0)])
        source = _coordinate(ctx, x, coordinates, scale, in_dim, out_dim)
        # OpenVINO maps an axis kept at its length to itself whatever the coordinate mode
        # ('tf_half_pixel_for_nn' would otherwise read x + 0.5, which ceil rounds up).
        kept = ctx.one("Equal", [in_size, out_size])
        source = ctx.one("Where", [kept, x, source])
        index = _rounded(ctx, source, nearest_mode, scale)
        last = ctx.one("Sub", [in_dim, _f32(ctx, 1.0)])
        index = ctx.one("Clip", [index, _f32(ctx, 0.0), last])
        index = ctx.one("Cast", [index], to=TensorProto.INT64)
        final = position == len(axes) - 1
        current = ctx.one("Gather", [current, index], output if final else None, axis=axis)
    if not axes:
        ctx.one("Identity", [data], output)
