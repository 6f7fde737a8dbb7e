"""Prior-box generators: pure functions of shapes, so they are computed here, as constants.

They need their two inputs (feature-map size and image size) to be constants, which they
are in any model with static shapes (ShapeOf of static tensors folds).
"""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._attrs import flag, floats, number
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer


def _sizes(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> tuple[int, int, int, int]:
    layer_hw = ctx.require_value(layer, inputs[0], "the feature-map size").reshape(-1)
    image_hw = ctx.require_value(layer, inputs[1], "the image size").reshape(-1)
    if layer_hw.size != 2 or image_hw.size != 2:
        raise B2SError(f"{layer.where()}: both inputs must hold [height, width]")
    return int(layer_hw[0]), int(layer_hw[1]), int(image_hw[0]), int(image_hw[1])


def prior_box_clustered(
    layer: Layer, layer_h: int, layer_w: int, image_h: int, image_w: int
) -> np.ndarray:
    """[2, 4 * H * W * P]: boxes (xmin, ymin, xmax, ymax per prior), then their variances."""
    widths = floats(layer, "width", "1.0")
    heights = floats(layer, "height", "1.0")
    if len(widths) != len(heights):
        raise B2SError(f"{layer.where()}: width and height need the same number of values")
    clip = flag(layer, "clip", True)
    offset = number(layer, "offset")
    variance = floats(layer, "variance", "") or [0.1]
    if len(variance) not in (1, 4):
        raise B2SError(f"{layer.where()}: variance needs 1 or 4 values")
    img_w = number(layer, "img_w", 0.0) or float(image_w)
    img_h = number(layer, "img_h", 0.0) or float(image_h)
    step = number(layer, "step", 0.0)
    step_w, step_h = number(layer, "step_w", 0.0), number(layer, "step_h", 0.0)
    if step_w == 0 and step_h == 0:
        step_w = step_h = step
    if step_w == 0 and step_h == 0:
        step_w, step_h = img_w / layer_w, img_h / layer_h
    f32 = np.float32
    cx = ((np.arange(layer_w, dtype=f32) + f32(offset)) * f32(step_w))[None, :, None]
    cy = ((np.arange(layer_h, dtype=f32) + f32(offset)) * f32(step_h))[:, None, None]
    half_w = (np.asarray(widths, f32) / f32(2))[None, None, :]
    half_h = (np.asarray(heights, f32) / f32(2))[None, None, :]
    boxes = np.stack(
        np.broadcast_arrays(
            (cx - half_w) / f32(img_w),
            (cy - half_h) / f32(img_h),
            (cx + half_w) / f32(img_w),
            (cy + half_h) / f32(img_h),
        ),
        axis=-1,
    ).astype(f32)
    if clip:
        boxes = np.clip(boxes, f32(0), f32(1))
    variances = np.broadcast_to(np.asarray(variance * (4 // len(variance)), f32), boxes.shape)
    return np.stack([boxes.reshape(-1), variances.reshape(-1)]).astype(f32)


@converts("PriorBoxClustered", (1,))
def prior_box_clustered_layer(ctx, layer, inputs):
    value = prior_box_clustered(layer, *_sizes(ctx, layer, inputs))
    ctx.add_constant(ctx.out(layer), value)
