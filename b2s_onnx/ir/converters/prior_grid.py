"""PriorBoxClustered on sizes known only at run time (an SSD whose input H and W are dynamic).

With static shapes the priors are a constant (``detection.py``). When the feature-map or
image size comes from ``ShapeOf`` of a dynamic tensor, the same float32 arithmetic runs as
ONNX ops, in the same order, so the boxes stay what OpenVINO computes for each size:
``cx = (w + offset) * step_w`` per column, ``cy`` per row, then ``(cx -+ width / 2) / img_w``
and ``(cy -+ height / 2) / img_h`` for each prior, clipped to [0, 1] when asked, laid out
[H, W, P, 4] and followed by the variances, as ``[2, 4 * H * W * P]``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s, int64s
from b2s_onnx.ir.reader import Layer


def _scalar(ctx: ConversionContext, sizes: str, index: int) -> str:
    """Element ``index`` of a [height, width] tensor as a float32 scalar."""
    picked = ctx.one("Gather", [sizes, int64s(ctx, "index", index)], axis=0)
    return ctx.one("Cast", [picked], to=TensorProto.FLOAT)


def _centres(ctx: ConversionContext, count: str, offset: float, step: str) -> str:
    """``(arange(count) + offset) * step``: the prior centres along one axis."""
    positions = ctx.one("Range", [float32s(ctx, "zero", 0.0), count, float32s(ctx, "one", 1.0)])
    shifted = ctx.one("Add", [positions, float32s(ctx, "offset", offset)])
    return ctx.one("Mul", [shifted, step])


def prior_box_clustered_at_run_time(
    ctx: ConversionContext, layer: Layer, inputs: list[str], variance: list[float]
) -> None:
    attrs = layer.attrs
    widths, heights = attrs["width"], attrs["height"]
    if len(widths) != len(heights):
        raise B2SError(f"{layer.where()}: width and height need the same number of values")
    for tensor in inputs:
        shape = ctx.shape(tensor)
        if shape is not None and (len(shape) != 1 or shape[0] not in (None, 2)):
            raise B2SError(f"{layer.where()}: both inputs must hold [height, width]")
    layer_h, layer_w = _scalar(ctx, inputs[0], 0), _scalar(ctx, inputs[0], 1)
    image_h, image_w = _scalar(ctx, inputs[1], 0), _scalar(ctx, inputs[1], 1)
    img_w = float32s(ctx, "img_w", attrs["img_w"]) if attrs["img_w"] else image_w
    img_h = float32s(ctx, "img_h", attrs["img_h"]) if attrs["img_h"] else image_h
    step_w, step_h = attrs["step_w"], attrs["step_h"]
    if step_w == 0 and step_h == 0:
        step_w = step_h = attrs["step"]
    if step_w == 0 and step_h == 0:
        step_x = ctx.one("Div", [img_w, layer_w])
        step_y = ctx.one("Div", [img_h, layer_h])
    else:
        step_x, step_y = float32s(ctx, "step_w", step_w), float32s(ctx, "step_h", step_h)
    offset = attrs["offset"]
    # Columns as [1, W, 1], rows as [H, 1, 1]; the priors' half sizes run along the last axis.
    cx = ctx.one("Unsqueeze", [_centres(ctx, layer_w, offset, step_x), int64s(ctx, "ax", [0, 2])])
    cy = ctx.one("Unsqueeze", [_centres(ctx, layer_h, offset, step_y), int64s(ctx, "ax", [1, 2])])
    half_w = float32s(ctx, "half_w", np.asarray(widths, np.float32) / np.float32(2))
    half_h = float32s(ctx, "half_h", np.asarray(heights, np.float32) / np.float32(2))
    corners = [
        ctx.one("Div", [ctx.one(op, [centre, half]), image])
        for op, centre, half, image in (
            ("Sub", cx, half_w, img_w),
            ("Sub", cy, half_h, img_h),
            ("Add", cx, half_w, img_w),
            ("Add", cy, half_h, img_h),
        )
    ]
    grid = ctx.one(
        "Concat",
        [
            ctx.one("Shape", [corners[1]]),  # [H, 1, P]
            ctx.one("Shape", [corners[0]]),  # [1, W, P]
        ],
        axis=0,
    )
    # [H, 1, P] and [1, W, P] -> [H, W, P]: the first H, the second W, P.
    full = ctx.one("Gather", [grid, int64s(ctx, "hwp", [0, 4, 5])], axis=0)
    stacked = ctx.one(
        "Concat",
        [
            ctx.one("Unsqueeze", [ctx.one("Expand", [c, full]), int64s(ctx, "last", [3])])
            for c in corners
        ],
        axis=3,
    )
    if attrs["clip"]:
        stacked = ctx.one("Clip", [stacked, float32s(ctx, "lo", 0.0), float32s(ctx, "hi", 1.0)])
    boxes = ctx.one("Reshape", [stacked, int64s(ctx, "row", [1, -1])])
    four = np.asarray(variance * (4 // len(variance)), np.float32)
    variances = ctx.one("Expand", [float32s(ctx, "variance", four), ctx.one("Shape", [stacked])])
    rows = ctx.one("Reshape", [variances, int64s(ctx, "row", [1, -1])])
    ctx.one("Concat", [boxes, rows], ctx.out(layer), axis=0)
