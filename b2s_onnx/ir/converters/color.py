"""Colour conversion of YUV 4:2:0 images (NV12, I420) to RGB or BGR.

Chroma planes are half the luma size in both directions: each chroma sample covers a 2x2
block of pixels (nearest upsampling by Expand, exact). The arithmetic is OpenVINO's
(BT.601 limited range, f32), clamped to [0, 255] and rounded for integer images.
"""

from __future__ import annotations

from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import INT64_MAX, float32s, int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer


def _rows(ctx: ConversionContext, tensor: str, start: str, stop: str) -> str:
    return ctx.one("Slice", [tensor, start, stop, int64s(ctx, "rows", [1])])


def _upsampled(ctx: ConversionContext, plane: str) -> str:
    """[N, h, w] -> [N, 2h, 2w], each sample repeated over a 2x2 block."""
    shape = ctx.one("Shape", [plane])
    spread = ctx.one("Unsqueeze", [plane, int64s(ctx, "between", [2, 4])])
    repeat = ctx.one(
        "Concat",
        [
            ctx.one("Slice", [shape, int64s(ctx, "s", [0]), int64s(ctx, "e", [2])]),
            int64s(ctx, "two", [2]),
            ctx.one("Slice", [shape, int64s(ctx, "s2", [2]), int64s(ctx, "e2", [3])]),
            int64s(ctx, "two", [2]),
        ],
        axis=0,
    )
    block = ctx.one("Expand", [spread, repeat])
    doubled = ctx.one(
        "Mul",
        [
            ctx.one("Slice", [shape, int64s(ctx, "s3", [1]), int64s(ctx, "e3", [3])]),
            int64s(ctx, "two", [2]),
        ],
    )
    size = ctx.one(
        "Concat",
        [ctx.one("Slice", [shape, int64s(ctx, "s4", [0]), int64s(ctx, "e4", [1])]), doubled],
        axis=0,
    )
    return ctx.one("Reshape", [block, size])


def _last(ctx: ConversionContext, tensor: str, index: int) -> str:
    """Channel ``index`` of an [N, h, w, c] tensor as [N, h, w] f32."""
    picked = ctx.one("Gather", [tensor, int64s(ctx, "channel", index)], axis=3)
    return ctx.one("Cast", [picked], to=TensorProto.FLOAT)


def _planes(
    ctx: ConversionContext, layer: Layer, inputs: list[str], chroma: str
) -> tuple[str, str, str]:
    """(Y, U, V) as [N, H, W], [N, H/2, W/2] f32 planes from one, two or three inputs."""
    if len(inputs) > 1:
        luma = _last(ctx, inputs[0], 0)
        if chroma == "nv12":
            return luma, _last(ctx, inputs[1], 0), _last(ctx, inputs[1], 1)
        return luma, _last(ctx, inputs[1], 0), _last(ctx, inputs[2], 0)
    image = _last(ctx, inputs[0], 0)  # [N, 3H/2, W]
    shape = ctx.one("Shape", [image])
    total = ctx.one("Slice", [shape, int64s(ctx, "s", [1]), int64s(ctx, "e", [2])])
    height = ctx.one(
        "Div", [ctx.one("Mul", [total, int64s(ctx, "two", [2])]), int64s(ctx, "three", [3])]
    )
    width = ctx.one("Slice", [shape, int64s(ctx, "s2", [2]), int64s(ctx, "e2", [3])])
    batch = ctx.one("Slice", [shape, int64s(ctx, "s3", [0]), int64s(ctx, "e3", [1])])
    luma = _rows(ctx, image, int64s(ctx, "zero", [0]), height)
    rest = _rows(ctx, image, height, int64s(ctx, "end", [INT64_MAX]))
    half = ctx.one("Div", [height, int64s(ctx, "two", [2])])
    half_width = ctx.one("Div", [width, int64s(ctx, "two", [2])])
    if chroma == "nv12":
        pairs = ctx.one(
            "Reshape",
            [rest, ctx.one("Concat", [batch, half, half_width, int64s(ctx, "pair", [2])], axis=0)],
        )
        u = ctx.one("Gather", [pairs, int64s(ctx, "u", 0)], axis=3)
        v = ctx.one("Gather", [pairs, int64s(ctx, "v", 1)], axis=3)
        return luma, u, v
    quarter = ctx.one("Concat", [batch, half, half_width], axis=0)
    flat = ctx.one(
        "Reshape",
        [
            rest,
            ctx.one("Concat", [batch, int64s(ctx, "two", [2]), int64s(ctx, "rest", [-1])], axis=0),
        ],
    )
    u = ctx.one("Reshape", [ctx.one("Gather", [flat, int64s(ctx, "u", 0)], axis=1), quarter])
    v = ctx.one("Reshape", [ctx.one("Gather", [flat, int64s(ctx, "v", 1)], axis=1), quarter])
    return luma, u, v


def _convert(ctx, layer, inputs, chroma: str, order: str) -> None:
    luma, u, v = _planes(ctx, layer, inputs, chroma)
    c = ctx.one("Sub", [luma, float32s(ctx, "sixteen", 16.0)])
    d = ctx.one("Sub", [_upsampled(ctx, u), float32s(ctx, "half", 128.0)])
    e = ctx.one("Sub", [_upsampled(ctx, v), float32s(ctx, "half", 128.0)])
    scaled = ctx.one("Mul", [c, float32s(ctx, "luma", 1.164)])
    red = ctx.one("Add", [scaled, ctx.one("Mul", [e, float32s(ctx, "red_v", 1.596)])])
    green = ctx.one(
        "Sub",
        [
            ctx.one("Sub", [scaled, ctx.one("Mul", [d, float32s(ctx, "green_u", 0.391)])]),
            ctx.one("Mul", [e, float32s(ctx, "green_v", 0.813)]),
        ],
    )
    blue = ctx.one("Add", [scaled, ctx.one("Mul", [d, float32s(ctx, "blue_u", 2.018)])])
    channels = [red, green, blue] if order == "rgb" else [blue, green, red]
    last = int64s(ctx, "last", [-1])
    image = ctx.one("Concat", [ctx.one("Unsqueeze", [ch, last]) for ch in channels], axis=-1)
    image = ctx.one("Clip", [image, float32s(ctx, "black", 0.0), float32s(ctx, "white", 255.0)])
    kind = ctx.type_of(inputs[0])
    if kind == TensorProto.FLOAT:
        ctx.one("Identity", [image], ctx.out(layer))
        return
    ctx.one("Cast", [ctx.one("Round", [image])], ctx.out(layer), to=kind)


@converts("NV12toRGB", (8,), inputs=(1, 2), attrs={})
def nv12_to_rgb(ctx, layer, inputs):
    _convert(ctx, layer, inputs, "nv12", "rgb")


@converts("NV12toBGR", (8,), inputs=(1, 2), attrs={})
def nv12_to_bgr(ctx, layer, inputs):
    _convert(ctx, layer, inputs, "nv12", "bgr")


@converts("I420toRGB", (8,), inputs=(1, 3), attrs={})
def i420_to_rgb(ctx, layer, inputs):
    _convert(ctx, layer, inputs, "i420", "rgb")


@converts("I420toBGR", (8,), inputs=(1, 3), attrs={})
def i420_to_bgr(ctx, layer, inputs):
    _convert(ctx, layer, inputs, "i420", "bgr")
