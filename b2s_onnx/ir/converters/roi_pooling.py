"""ROIPooling-1 (OpenVINO writes it as opset2): max pooling is ONNX's MaxRoiPool, bit-exact;
the bilinear method samples ``pooled`` points across the box (:mod:`roi_sampling`).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.roi_sampling import (
    FeatureMap,
    as_float,
    column,
    f32,
    finish,
    i64,
)
from b2s_onnx.ir.converters.schema import Choice, Float, Int
from b2s_onnx.ir.reader import Layer

# -- ROIPooling -----------------------------------------------------------------------------


def _bilinear_roi_pooling(ctx: ConversionContext, layer: Layer, data: str, rois: str) -> str:
    """ROIPooling's bilinear method: boxes in [0, 1] coordinates, ``pooled`` points spread
    from the box's first to its last pixel (one point: its centre); points outside the map
    give 0."""
    fmap = FeatureMap.of(ctx, data)
    coords, inside = [], []
    for low, high, size, pooled in (
        (2, 4, fmap.height, layer.attrs["pooled_h"]),
        (1, 3, fmap.width, layer.attrs["pooled_w"]),
    ):
        last = ctx.one("Cast", [ctx.one("Sub", [size, i64(ctx, "one", 1)])], to=TensorProto.FLOAT)
        begin, end = column(ctx, rois, low), column(ctx, rois, high)
        if pooled > 1:
            step = ctx.one(
                "Div",
                [ctx.one("Mul", [ctx.one("Sub", [end, begin]), last]), f32(ctx, "n", pooled - 1)],
            )
            cells = f32(ctx, "cells", np.arange(pooled, dtype=np.float32)[None])
            points = ctx.one("Add", [ctx.one("Mul", [cells, step]), ctx.one("Mul", [begin, last])])
        else:
            middle = ctx.one("Mul", [ctx.one("Add", [begin, end]), f32(ctx, "half", 0.5)])
            points = ctx.one("Mul", [middle, last])
        coords.append(points)
        inside.append(
            ctx.one(
                "And",
                [
                    ctx.one("GreaterOrEqual", [points, f32(ctx, "zero", 0.0)]),
                    ctx.one("LessOrEqual", [points, last]),
                ],
            )
        )
    batch = ctx.one("Cast", [column(ctx, rois, 0)], to=TensorProto.INT64)
    values = fmap.bilinear(ctx, batch, coords[0], coords[1])  # [R, PH, PW, C]
    used = ctx.one(
        "And",
        [
            ctx.one("Unsqueeze", [inside[0], i64(ctx, "ax", [2, 3])]),
            ctx.one("Unsqueeze", [inside[1], i64(ctx, "ax", [1, 3])]),
        ],
    )
    values = ctx.one("Where", [used, values, f32(ctx, "zero", 0.0)])
    return ctx.one("Transpose", [values], perm=[0, 3, 1, 2])


@converts(
    "ROIPooling",
    (1, 2),
    inputs=(2, 2),
    attrs={
        "pooled_h": Int(required=True, minimum=1),
        "pooled_w": Int(required=True, minimum=1),
        "spatial_scale": Float(required=True),
        "method": Choice(allowed=("max", "bilinear"), default="max"),
    },
)
def roi_pooling(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data, rois = as_float(ctx, inputs[0]), as_float(ctx, inputs[1])
    if layer.attrs["method"] == "bilinear":
        finish(ctx, layer, _bilinear_roi_pooling(ctx, layer, data, rois))
        return
    pooled = ctx.one(
        "MaxRoiPool",
        [data, rois],
        pooled_shape=[layer.attrs["pooled_h"], layer.attrs["pooled_w"]],
        spatial_scale=layer.attrs["spatial_scale"],
    )
    finish(ctx, layer, pooled)
