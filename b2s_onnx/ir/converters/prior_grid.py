"""PriorBoxClustered and PriorBox on sizes known only at run time (an SSD whose input H and
W are dynamic).

With static shapes the priors are a constant (``detection.py``). When the feature-map or
image size comes from ``ShapeOf`` of a dynamic tensor, the same float32 arithmetic runs as
ONNX ops, in the same order, so the boxes stay what OpenVINO computes for each size:
PriorBoxClustered's ``cx = (w + offset) * step_w`` per column, ``cy`` per row, then
``(cx -+ width / 2) / img_w`` and ``(cy -+ height / 2) / img_h`` for each prior; PriorBox's
centres, then each prior ``detection.prior_specs`` lists (sub-cell centres shifted for dense
priors) times ``1 / image size``. Clipped to [0, 1] when asked, laid out [H, W, P, 4] and
followed by the variances, as ``[2, 4 * H * W * P]``.
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
    _check_size_inputs(ctx, layer, inputs)
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
    _with_variances(ctx, layer, stacked, variance)


def _with_variances(ctx, layer: Layer, stacked: str, variance: list[float]) -> None:
    """[H, W, P, 4] boxes, clipped when the layer asks, then the variances: the layer's
    ``[2, 4 * H * W * P]`` output."""
    if layer.attrs["clip"]:
        stacked = ctx.one("Clip", [stacked, _f32(ctx, 0.0), _f32(ctx, 1.0)])
    boxes = ctx.one("Reshape", [stacked, int64s(ctx, "row", [1, -1])])
    four = np.asarray(variance * (4 // len(variance)), np.float32)
    variances = ctx.one("Expand", [float32s(ctx, "variance", four), ctx.one("Shape", [stacked])])
    rows = ctx.one("Reshape", [variances, int64s(ctx, "row", [1, -1])])
    ctx.one("Concat", [boxes, rows], ctx.out(layer), axis=0)


def _f32(ctx: ConversionContext, value: float) -> str:
    return float32s(ctx, "c", np.float32(value))


def _check_size_inputs(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    for tensor in inputs:
        shape = ctx.shape(tensor)
        if shape is not None and (len(shape) != 1 or shape[0] not in (None, 2)):
            raise B2SError(f"{layer.where()}: both inputs must hold [height, width]")


def _centre_grid(ctx, layer_h: str, layer_w: str, image_h: str, image_w: str, step, offset):
    """PriorBox's cell centres, [H, W] each: from the image-to-map ratio when ``step`` is
    0, else ``(offset + index) * step``."""
    cols = ctx.one("Range", [_f32(ctx, 0.0), layer_w, _f32(ctx, 1.0)])
    rows = ctx.one("Range", [_f32(ctx, 0.0), layer_h, _f32(ctx, 1.0)])
    if step == 0:
        cx = ctx.one("Add", [cols, _f32(ctx, 0.5)])
        cx = ctx.one("Mul", [cx, ctx.one("Div", [image_w, layer_w])])
        cy = ctx.one("Add", [rows, _f32(ctx, 0.5)])
        cy = ctx.one("Mul", [cy, ctx.one("Div", [image_h, layer_h])])
    else:
        cx = ctx.one("Mul", [ctx.one("Add", [_f32(ctx, offset), cols]), _f32(ctx, step)])
        cy = ctx.one("Mul", [ctx.one("Add", [_f32(ctx, offset), rows]), _f32(ctx, step)])
    cx = ctx.one("Unsqueeze", [cx, int64s(ctx, "row_axis", [0])])  # [1, W]
    cy = ctx.one("Unsqueeze", [cy, int64s(ctx, "column_axis", [1])])  # [H, 1]
    grid = ctx.one("Concat", [ctx.one("Shape", [cy]), ctx.one("Shape", [cx])], axis=0)
    grid = ctx.one("Gather", [grid, int64s(ctx, "hw", [0, 3])], axis=0)  # [H, W]
    return ctx.one("Expand", [cx, grid]), ctx.one("Expand", [cy, grid])


def prior_box_at_run_time(
    ctx: ConversionContext,
    layer: Layer,
    inputs: list[str],
    variance: list[float],
    settings: dict,
    priors: list,
) -> None:
    """PriorBox on run-time sizes: ``settings`` and ``priors`` are
    ``detection.prior_box_settings`` and ``detection.prior_specs`` of the layer."""
    _check_size_inputs(ctx, layer, inputs)
    layer_h, layer_w = _scalar(ctx, inputs[0], 0), _scalar(ctx, inputs[0], 1)
    image_h, image_w = _scalar(ctx, inputs[1], 0), _scalar(ctx, inputs[1], 1)
    inv_w = ctx.one("Div", [_f32(ctx, 1.0), image_w])
    inv_h = ctx.one("Div", [_f32(ctx, 1.0), image_h])
    cx, cy = _centre_grid(
        ctx, layer_h, layer_w, image_h, image_w, settings["step"], settings["offset"]
    )
    last = int64s(ctx, "last", [2])
    columns = []
    for prior in priors:
        px, py = cx, cy
        for shift in prior.x_shifts:
            px = ctx.one("Add", [px, _f32(ctx, shift)])
        for shift in prior.y_shifts:
            py = ctx.one("Add", [py, _f32(ctx, shift)])
        half_w, half_h = _f32(ctx, prior.half_w), _f32(ctx, prior.half_h)
        box = [
            ctx.one("Mul", [ctx.one("Sub", [px, half_w]), inv_w]),
            ctx.one("Mul", [ctx.one("Sub", [py, half_h]), inv_h]),
            ctx.one("Mul", [ctx.one("Add", [px, half_w]), inv_w]),
            ctx.one("Mul", [ctx.one("Add", [py, half_h]), inv_h]),
        ]
        if prior.clip:
            zero, one = _f32(ctx, 0.0), _f32(ctx, 1.0)
            box = [
                ctx.one("Max", [box[0], zero]),
                ctx.one("Max", [box[1], zero]),
                ctx.one("Min", [box[2], one]),
                ctx.one("Min", [box[3], one]),
            ]
        corners = ctx.one("Concat", [ctx.one("Unsqueeze", [b, last]) for b in box], axis=2)
        columns.append(ctx.one("Unsqueeze", [corners, last]))  # [H, W, 1, 4]
    stacked = ctx.one("Concat", columns, axis=2) if len(columns) > 1 else columns[0]
    _with_variances(ctx, layer, stacked, variance)
