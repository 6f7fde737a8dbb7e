"""YUV 4:2:0 to RGB/BGR conversions (NV12toRGB/BGR, I420toRGB/BGR, version 8).

The images are NHWC with one channel per plane. NV12 keeps chroma as interleaved UV pairs,
I420 as a U plane then a V plane; either comes as one tensor (luma rows, then the chroma
stored as extra rows of the same width) or as separate planes. Every chroma sample covers
2x2 pixels, and the pixel is the BT.601 formula OpenVINO uses, clamped to [0, 255] and, for
integer images, rounded half away from zero.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer

#: (luma, U, V) coefficients of each output channel, after luma -= 16 and chroma -= 128.
_RED = (1.164, 0.0, 1.596)
_GREEN = (1.164, -0.391, -0.813)
_BLUE = (1.164, 2.018, 0.0)


def _f32(ctx: ConversionContext, hint: str, value: float) -> str:
    return ctx.const(hint, np.asarray(value, np.float32))


def _image_size(ctx: ConversionContext, layer: Layer, tensor: str) -> tuple[int, int]:
    """(height, width) of the luma image that a single-tensor input of shape
    [N, H * 3 / 2, W, 1] holds; they must be static to split the planes."""
    shape = ctx.shape(tensor)
    if shape is None or len(shape) != 4 or shape[1] is None or shape[2] is None:
        raise B2SError(f"{layer.where()}: input 0 needs a static [N, H * 3 / 2, W, 1] shape")
    rows, width = shape[1], shape[2]
    if rows % 3 or width % 2:
        raise B2SError(
            f"{layer.where()}: input 0 has {rows} rows and width {width}: rows must be 3/2 of "
            "the image height, the width even"
        )
    return rows // 3 * 2, width


def _rows(ctx: ConversionContext, tensor: str, start: int, stop: int) -> str:
    """Entries ``start:stop`` of axis 1 (rows of an image, or of a flattened plane)."""
    return ctx.one(
        "Slice",
        [tensor, _i64(ctx, "start", [start]), _i64(ctx, "stop", [stop]), _i64(ctx, "axis", [1])],
    )


def _channel(ctx: ConversionContext, pairs: str, index: int) -> str:
    """Channel ``index`` of interleaved UV pairs [N, H / 2, W / 2, 2], kept as [..., 1]."""
    return ctx.one(
        "Slice",
        [
            pairs,
            _i64(ctx, "start", [index]),
            _i64(ctx, "stop", [index + 1]),
            _i64(ctx, "axis", [3]),
        ],
    )


def _chroma_plane(ctx: ConversionContext, plane: str, height: int, width: int) -> str:
    """A flat chroma plane -> [N, H / 2, W / 2, 1]."""
    return ctx.one("Reshape", [plane, _i64(ctx, "plane", [0, height // 2, width // 2, 1])])


def _planes(ctx: ConversionContext, layer: Layer, inputs: list[str], nv12: bool):
    """(luma [N,H,W,1], U [N,H/2,W/2,1], V [N,H/2,W/2,1]) in the input's element type."""
    if len(inputs) == 1:
        height, width = _image_size(ctx, layer, inputs[0])
        luma = _rows(ctx, inputs[0], 0, height)
        if nv12:
            pairs = _rows(ctx, inputs[0], height, height * 3 // 2)
            pairs = ctx.one("Reshape", [pairs, _i64(ctx, "pairs", [0, height // 2, width // 2, 2])])
            return luma, _channel(ctx, pairs, 0), _channel(ctx, pairs, 1)
        chroma = ctx.one(
            "Reshape", [_rows(ctx, inputs[0], height, height * 3 // 2), _i64(ctx, "flat", [0, -1])]
        )
        plane = height * width // 4
        u = _chroma_plane(ctx, _rows(ctx, chroma, 0, plane), height, width)
        v = _chroma_plane(ctx, _rows(ctx, chroma, plane, 2 * plane), height, width)
        return luma, u, v
    if nv12:
        luma, pairs = inputs
        return luma, _channel(ctx, pairs, 0), _channel(ctx, pairs, 1)
    return tuple(inputs)


def _upsampled(ctx: ConversionContext, plane: str) -> str:
    """Each chroma sample repeated over its 2x2 pixels."""
    scales = ctx.const("scales", np.asarray([1, 2, 2, 1], np.float32))
    return ctx.one(
        "Resize",
        [plane, "", scales],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )


def _convert(ctx: ConversionContext, layer: Layer, inputs: list[str], nv12: bool, rgb: bool):
    element = ctx.type_of(inputs[0])
    if element not in (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.FLOAT16):
        raise B2SError(f"{layer.where()}: the image must be u8, f16 or f32")
    luma, u, v = _planes(ctx, layer, inputs, nv12)
    as_float = (
        (lambda t: t) if element == TensorProto.FLOAT else (lambda t: ctx.one("Cast", [t], to=1))
    )
    c = ctx.one("Sub", [as_float(luma), _f32(ctx, "sixteen", 16.0)])
    d = ctx.one("Sub", [_upsampled(ctx, as_float(u)), _f32(ctx, "half_range", 128.0)])
    e = ctx.one("Sub", [_upsampled(ctx, as_float(v)), _f32(ctx, "half_range", 128.0)])
    channels = []
    for luma_k, u_k, v_k in (_RED, _GREEN, _BLUE) if rgb else (_BLUE, _GREEN, _RED):
        value = ctx.one("Mul", [c, _f32(ctx, "k_luma", luma_k)])
        if u_k:
            value = ctx.one("Add", [value, ctx.one("Mul", [d, _f32(ctx, "k_u", u_k)])])
        if v_k:
            value = ctx.one("Add", [value, ctx.one("Mul", [e, _f32(ctx, "k_v", v_k)])])
        channels.append(value)
    pixels = ctx.one("Concat", channels, axis=3)
    clamped = ctx.one("Clip", [pixels, _f32(ctx, "black", 0.0), _f32(ctx, "white", 255.0)])
    if element == TensorProto.FLOAT:
        ctx.one("Identity", [clamped], ctx.out(layer))
        return
    if element == TensorProto.UINT8:
        clamped = ctx.one("Floor", [ctx.one("Add", [clamped, _f32(ctx, "half", 0.5)])])
    ctx.one("Cast", [clamped], ctx.out(layer), to=element)


@converts("NV12toRGB", (8,), inputs=(1, 2), attrs={})
def nv12_to_rgb(ctx, layer, inputs):
    _convert(ctx, layer, inputs, nv12=True, rgb=True)


@converts("NV12toBGR", (8,), inputs=(1, 2), attrs={})
def nv12_to_bgr(ctx, layer, inputs):
    _convert(ctx, layer, inputs, nv12=True, rgb=False)


@converts("I420toRGB", (8,), inputs=(1, 3), attrs={})
def i420_to_rgb(ctx, layer, inputs):
    _check_plane_count(layer, inputs)
    _convert(ctx, layer, inputs, nv12=False, rgb=True)


@converts("I420toBGR", (8,), inputs=(1, 3), attrs={})
def i420_to_bgr(ctx, layer, inputs):
    _check_plane_count(layer, inputs)
    _convert(ctx, layer, inputs, nv12=False, rgb=False)


def _check_plane_count(layer: Layer, inputs: list[str]) -> None:
    if len(inputs) == 2:
        raise B2SError(f"{layer.where()}: takes one tensor or three planes (Y, U, V), got 2")
