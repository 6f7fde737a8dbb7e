"""ROIAlign-3/9 and ROIAlignRotated-15.

ONNX's RoiAlign computes OpenVINO's average mode (OpenVINO's ``half_pixel`` only shifts the
boxes by half a pixel more); its max mode is a different formula (onnxruntime takes the
maximum of the weighted corner terms), so max pooling, every mode the target opset's
RoiAlign cannot express, and rotated boxes are composed from sample grids
(:mod:`roi_sampling`).
"""

from __future__ import annotations

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.roi_sampling import (
    FeatureMap,
    as_float,
    column,
    f32,
    finish,
    i64,
    inside,
    pool_samples,
    sample_axis,
)
from b2s_onnx.ir.converters.schema import Bool, Choice, Float, Int
from b2s_onnx.ir.reader import Layer

# -- ROIAlign ---------------------------------------------------------------------------------

_ROI_ALIGN = {
    "pooled_h": Int(required=True, minimum=1),
    "pooled_w": Int(required=True, minimum=1),
    "sampling_ratio": Int(required=True, minimum=0),
    "spatial_scale": Float(required=True),
    "mode": Choice(allowed=("avg", "max"), required=True),
}
_ALIGNED = {
    "aligned_mode": Choice(
        allowed=("asymmetric", "half_pixel_for_nn", "half_pixel"), default="asymmetric"
    )
}


def _roi_align_composed(
    ctx: ConversionContext, layer: Layer, data: str, rois: str, batch: str, aligned: str
) -> str:
    attrs = layer.attrs
    scale = f32(ctx, "scale", attrs["spatial_scale"])
    fmap = FeatureMap.of(ctx, data)
    starts, sizes = [], []
    for low, high in ((1, 3), (0, 2)):  # y from columns 1 and 3, x from 0 and 2
        begin, end = column(ctx, rois, low), column(ctx, rois, high)
        if aligned == "asymmetric":
            start = ctx.one("Mul", [begin, scale])
            size = ctx.one("Sub", [ctx.one("Mul", [end, scale]), start])
            size = ctx.one("Max", [size, f32(ctx, "one", 1.0)])
        else:
            if aligned == "half_pixel":
                start = ctx.one("Mul", [ctx.one("Add", [begin, f32(ctx, "half", 0.5)]), scale])
            else:
                start = ctx.one("Mul", [begin, scale])
            start = ctx.one("Sub", [start, f32(ctx, "half", 0.5)])
            size = ctx.one("Mul", [ctx.one("Sub", [end, begin]), scale])
        starts.append(start)
        sizes.append(size)
    ratio = attrs["sampling_ratio"]
    ys, y_exists, y_count = sample_axis(ctx, starts[0], sizes[0], attrs["pooled_h"], ratio)
    xs, x_exists, x_count = sample_axis(ctx, starts[1], sizes[1], attrs["pooled_w"], ratio)
    batch = ctx.one("Unsqueeze", [ctx.int64(batch), i64(ctx, "ax", [1])])
    values = fmap.bilinear(ctx, batch, ys, xs)  # [R, PH*Sy, PW*Sx, C]

    rows = ctx.one("And", [y_exists, inside(ctx, ys, fmap.height)])
    cols = ctx.one("And", [x_exists, inside(ctx, xs, fmap.width)])
    used = ctx.one(
        "And",
        [
            ctx.one("Unsqueeze", [rows, i64(ctx, "ax", [2])]),
            ctx.one("Unsqueeze", [cols, i64(ctx, "ax", [1])]),
        ],
    )
    count = ctx.one("Mul", [y_count, x_count])
    return pool_samples(ctx, layer, values, used, count, attrs["mode"])


def roi_align(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data, rois = as_float(ctx, inputs[0]), as_float(ctx, inputs[1])
    attrs = layer.attrs
    # Version 9 adds the attribute; version 3 behaves as its default.
    aligned = attrs["aligned_mode"] if layer.version == "opset9" else "asymmetric"
    native = attrs["mode"] == "avg" and (aligned == "asymmetric" or ctx.opset >= 16)
    if not native:
        finish(ctx, layer, _roi_align_composed(ctx, layer, data, rois, inputs[2], aligned))
        return
    extra = {}
    if ctx.opset >= 16:
        extra["coordinate_transformation_mode"] = (
            "output_half_pixel" if aligned == "asymmetric" else "half_pixel"
        )
    if aligned == "half_pixel":  # ((x + 0.5) * scale) - 0.5: ONNX's half_pixel after a shift
        rois = ctx.one("Add", [rois, f32(ctx, "half", 0.5)])
    pooled = ctx.one(
        "RoiAlign",
        [data, rois, ctx.int64(inputs[2])],
        mode="avg",
        output_height=attrs["pooled_h"],
        output_width=attrs["pooled_w"],
        sampling_ratio=attrs["sampling_ratio"],
        spatial_scale=attrs["spatial_scale"],
        **extra,
    )
    finish(ctx, layer, pooled)


converts("ROIAlign", (3,), inputs=(3, 3), attrs=_ROI_ALIGN)(roi_align)
converts("ROIAlign", (9,), inputs=(3, 3), attrs={**_ROI_ALIGN, **_ALIGNED})(roi_align)


# -- ROIAlignRotated ------------------------------------------------------------------------


@converts(
    "ROIAlignRotated",
    (15,),
    inputs=(3, 3),
    attrs={
        "pooled_h": Int(required=True, minimum=1),
        "pooled_w": Int(required=True, minimum=1),
        "sampling_ratio": Int(required=True, minimum=0),
        "spatial_scale": Float(required=True),
        "clockwise_mode": Bool(default=False),
    },
)
def roi_align_rotated(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """Boxes [cx, cy, w, h, angle]: the sample grid is laid out in the box's own frame
    around its centre (shifted by half a pixel) and rotated into the map."""
    attrs = layer.attrs
    data, rois = as_float(ctx, inputs[0]), as_float(ctx, inputs[1])
    scale = f32(ctx, "scale", attrs["spatial_scale"])
    fmap = FeatureMap.of(ctx, data)
    half = f32(ctx, "half", 0.5)
    centre_x = ctx.one("Sub", [ctx.one("Mul", [column(ctx, rois, 0), scale]), half])
    centre_y = ctx.one("Sub", [ctx.one("Mul", [column(ctx, rois, 1), scale]), half])
    width = ctx.one("Mul", [column(ctx, rois, 2), scale])
    height = ctx.one("Mul", [column(ctx, rois, 3), scale])
    angle = column(ctx, rois, 4)
    if attrs["clockwise_mode"]:
        angle = ctx.one("Neg", [angle])
    cos, sin = ctx.one("Cos", [angle]), ctx.one("Sin", [angle])
    minus_half = f32(ctx, "minus_half", -0.5)
    ratio = attrs["sampling_ratio"]
    yy, y_exists, y_count = sample_axis(
        ctx, ctx.one("Mul", [height, minus_half]), height, attrs["pooled_h"], ratio
    )
    xx, x_exists, x_count = sample_axis(
        ctx, ctx.one("Mul", [width, minus_half]), width, attrs["pooled_w"], ratio
    )
    yy = ctx.one("Unsqueeze", [yy, i64(ctx, "ax", [2])])  # [R, A, 1]
    xx = ctx.one("Unsqueeze", [xx, i64(ctx, "ax", [1])])  # [R, 1, B]
    r3 = i64(ctx, "ax", [2])
    cos, sin, centre_x, centre_y = (
        ctx.one("Unsqueeze", [t, r3]) for t in (cos, sin, centre_x, centre_y)
    )
    ys = ctx.one(
        "Add", [ctx.one("Sub", [ctx.one("Mul", [yy, cos]), ctx.one("Mul", [xx, sin])]), centre_y]
    )
    xs = ctx.one(
        "Add", [ctx.one("Add", [ctx.one("Mul", [yy, sin]), ctx.one("Mul", [xx, cos])]), centre_x]
    )
    batch = ctx.one("Unsqueeze", [ctx.int64(inputs[2]), i64(ctx, "ax", [1])])
    values = fmap.points(ctx, batch, ys, xs)
    used = ctx.one(
        "And",
        [
            ctx.one(
                "And",
                [
                    ctx.one("Unsqueeze", [y_exists, i64(ctx, "ax", [2])]),
                    ctx.one("Unsqueeze", [x_exists, i64(ctx, "ax", [1])]),
                ],
            ),
            ctx.one("And", [inside(ctx, ys, fmap.height), inside(ctx, xs, fmap.width)]),
        ],
    )
    count = ctx.one("Mul", [y_count, x_count])
    finish(ctx, layer, pool_samples(ctx, layer, values, used, count, "avg"))
