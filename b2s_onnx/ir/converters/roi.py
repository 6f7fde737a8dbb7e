"""Region-of-interest pooling: ROIAlign-3/9, ROIPooling-1 (written as opset2), PSROIPooling-1.

ONNX's RoiAlign computes OpenVINO's average mode (OpenVINO's ``half_pixel`` only shifts the
boxes by half a pixel more); its max mode is a different formula (onnxruntime takes the
maximum of the weighted corner terms), so max pooling, and every mode ONNX's opset cannot
express, is composed here: per ROI sample grids, bilinear interpolation by gathering the
four neighbours from a [N*H*W, C] view of the feature map, then a masked reduction.
Sampling counts that depend on each ROI's size (``sampling_ratio`` 0) are handled with the
largest count over all ROIs and a mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, Float, Int
from b2s_onnx.ir.reader import Layer


def _i64(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, np.int64))


def _f32(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, np.float32))


def _as_float(ctx: ConversionContext, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


def _finish(ctx: ConversionContext, layer: Layer, value: str) -> None:
    """Writes a float32 result as the layer's output, in the element type the IR declares."""
    out = ctx.out(layer)
    if ctx.type_of(out) == TensorProto.FLOAT:
        ctx.one("Identity", [value], out)
    else:
        ctx.one("Cast", [value], out, to=ctx.type_of(out))


def _column(ctx: ConversionContext, rois: str, index: int) -> str:
    """Column ``index`` of a [R, K] tensor, as [R, 1]."""
    return ctx.one(
        "Slice", [rois, _i64(ctx, "b", [index]), _i64(ctx, "e", [index + 1]), _i64(ctx, "ax", [1])]
    )


@dataclass(frozen=True)
class FeatureMap:
    """A feature map [N, C, H, W] viewed as rows [N*H*W, C] for gathering pixels."""

    rows: str
    height: str  # int64 scalars
    width: str

    @classmethod
    def of(cls, ctx: ConversionContext, data: str) -> FeatureMap:
        shape = ctx.one("Shape", [data])
        height = ctx.one("Gather", [shape, _i64(ctx, "h", 2)])
        width = ctx.one("Gather", [shape, _i64(ctx, "w", 3)])
        channels = ctx.one("Slice", [shape, _i64(ctx, "b", [1]), _i64(ctx, "e", [2])])
        rows = ctx.one(
            "Reshape",
            [
                ctx.one("Transpose", [data], perm=[0, 2, 3, 1]),
                ctx.one("Concat", [_i64(ctx, "all", [-1]), channels], axis=0),
            ],
        )
        return cls(rows, height, width)

    def pixels(self, ctx: ConversionContext, batch: str, ys: str, xs: str) -> str:
        """data[batch, :, ys, xs] for int64 batch [R, 1, 1], ys [R, A, 1], xs [R, 1, B]:
        [R, A, B, C]."""
        index = ctx.one(
            "Add",
            [
                ctx.one(
                    "Mul",
                    [ctx.one("Add", [ctx.one("Mul", [batch, self.height]), ys]), self.width],
                ),
                xs,
            ],
        )
        return ctx.one("Gather", [self.rows, index], axis=0)

    def bilinear(self, ctx: ConversionContext, batch: str, ys: str, xs: str) -> str:
        """Bilinear samples at float ys [R, A] and xs [R, B], clamped into the map:
        [R, A, B, C]."""
        y_lo, y_hi, y_frac = self.neighbours(ctx, ys, self.height, [2])
        x_lo, x_hi, x_frac = self.neighbours(ctx, xs, self.width, [1])
        batch = ctx.one("Unsqueeze", [batch, _i64(ctx, "ax", [2])])
        one = _f32(ctx, "one", 1.0)
        y_frac = ctx.one("Unsqueeze", [y_frac, _i64(ctx, "ax", [2, 3])])
        x_frac = ctx.one("Unsqueeze", [x_frac, _i64(ctx, "ax", [1, 3])])
        y_rest, x_rest = ctx.one("Sub", [one, y_frac]), ctx.one("Sub", [one, x_frac])
        terms = [
            ctx.one("Mul", [ctx.one("Mul", [wy, wx]), self.pixels(ctx, batch, y, x)])
            for y, wy in ((y_lo, y_rest), (y_hi, y_frac))
            for x, wx in ((x_lo, x_rest), (x_hi, x_frac))
        ]
        return ctx.one("Sum", terms)

    def neighbours(
        self, ctx: ConversionContext, coords: str, size: str, axis: list[int]
    ) -> tuple[str, str, str]:
        limit = ctx.one("Cast", [ctx.one("Sub", [size, _i64(ctx, "one", 1)])], to=TensorProto.FLOAT)
        clamped = ctx.one("Min", [ctx.one("Max", [coords, _f32(ctx, "zero", 0.0)]), limit])
        low = ctx.one("Floor", [clamped])
        frac = ctx.one("Sub", [clamped, low])
        low_i = ctx.one("Cast", [low], to=TensorProto.INT64)
        high_i = ctx.one(
            "Min",
            [
                ctx.one("Add", [low_i, _i64(ctx, "one", 1)]),
                ctx.one("Sub", [size, _i64(ctx, "one", 1)]),
            ],
        )
        if not axis:
            return low_i, high_i, frac
        ax = _i64(ctx, "ax", axis)
        return ctx.one("Unsqueeze", [low_i, ax]), ctx.one("Unsqueeze", [high_i, ax]), frac

    def points(self, ctx: ConversionContext, batch: str, ys: str, xs: str) -> str:
        """Bilinear samples at arbitrary points, ys and xs both [R, A, B], clamped into the
        map; ``batch`` is [R, 1]: [R, A, B, C]."""
        y_lo, y_hi, y_frac = self.neighbours(ctx, ys, self.height, [])
        x_lo, x_hi, x_frac = self.neighbours(ctx, xs, self.width, [])
        batch = ctx.one("Unsqueeze", [batch, _i64(ctx, "ax", [2])])
        one = _f32(ctx, "one", 1.0)
        y_frac = ctx.one("Unsqueeze", [y_frac, _i64(ctx, "ax", [3])])
        x_frac = ctx.one("Unsqueeze", [x_frac, _i64(ctx, "ax", [3])])
        y_rest, x_rest = ctx.one("Sub", [one, y_frac]), ctx.one("Sub", [one, x_frac])
        terms = [
            ctx.one("Mul", [ctx.one("Mul", [wy, wx]), self.pixels(ctx, batch, y, x)])
            for y, wy in ((y_lo, y_rest), (y_hi, y_frac))
            for x, wx in ((x_lo, x_rest), (x_hi, x_frac))
        ]
        return ctx.one("Sum", terms)


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


def _sample_axis(
    ctx: ConversionContext, start: str, size: str, bins: int, ratio: int
) -> tuple[str, str, str]:
    """Sample coordinates of one axis: [R, bins * S] where S is the largest per-ROI sample
    count, the mask of samples that exist for their ROI, and the per-ROI count [R, 1]."""
    bin_size = ctx.one("Div", [size, _f32(ctx, "bins", float(bins))])
    if ratio > 0:
        count = _f32(ctx, "ratio", [[float(ratio)]])
        most = _f32(ctx, "most", float(ratio))
    else:
        count = ctx.one("Ceil", [bin_size])
        most = ctx.reduce("ReduceMax", count, None, False)
    samples = ctx.one("Range", [_f32(ctx, "zero", 0.0), most, _f32(ctx, "one", 1.0)])
    samples = ctx.one("Unsqueeze", [samples, _i64(ctx, "ax", [0, 1])])  # [1, 1, S]
    cells = _f32(ctx, "cells", np.arange(bins, dtype=np.float32).reshape(1, bins, 1))
    r3 = _i64(ctx, "ax", [2])
    start3, bin3, count3 = (ctx.one("Unsqueeze", [t, r3]) for t in (start, bin_size, count))
    step = ctx.one("Div", [bin3, count3])
    coords = ctx.one(
        "Add",
        [
            ctx.one("Add", [start3, ctx.one("Mul", [cells, bin3])]),
            ctx.one("Mul", [ctx.one("Add", [samples, _f32(ctx, "half", 0.5)]), step]),
        ],
    )
    exists = ctx.one("Less", [samples, count3])
    exists = ctx.one("Expand", [exists, ctx.one("Shape", [coords])])
    flat = _i64(ctx, "flat", [0, -1])
    coords = ctx.one("Where", [exists, coords, _f32(ctx, "zero", 0.0)])
    return ctx.one("Reshape", [coords, flat]), ctx.one("Reshape", [exists, flat]), count


def _roi_align_composed(
    ctx: ConversionContext, layer: Layer, data: str, rois: str, batch: str, aligned: str
) -> str:
    attrs = layer.attrs
    scale = _f32(ctx, "scale", attrs["spatial_scale"])
    fmap = FeatureMap.of(ctx, data)
    starts, sizes = [], []
    for low, high in ((1, 3), (0, 2)):  # y from columns 1 and 3, x from 0 and 2
        begin, end = _column(ctx, rois, low), _column(ctx, rois, high)
        if aligned == "asymmetric":
            start = ctx.one("Mul", [begin, scale])
            size = ctx.one("Sub", [ctx.one("Mul", [end, scale]), start])
            size = ctx.one("Max", [size, _f32(ctx, "one", 1.0)])
        else:
            if aligned == "half_pixel":
                start = ctx.one("Mul", [ctx.one("Add", [begin, _f32(ctx, "half", 0.5)]), scale])
            else:
                start = ctx.one("Mul", [begin, scale])
            start = ctx.one("Sub", [start, _f32(ctx, "half", 0.5)])
            size = ctx.one("Mul", [ctx.one("Sub", [end, begin]), scale])
        starts.append(start)
        sizes.append(size)
    ratio = attrs["sampling_ratio"]
    ys, y_exists, y_count = _sample_axis(ctx, starts[0], sizes[0], attrs["pooled_h"], ratio)
    xs, x_exists, x_count = _sample_axis(ctx, starts[1], sizes[1], attrs["pooled_w"], ratio)
    batch = ctx.one("Unsqueeze", [ctx.int64(batch), _i64(ctx, "ax", [1])])
    values = fmap.bilinear(ctx, batch, ys, xs)  # [R, PH*Sy, PW*Sx, C]

    rows = ctx.one("And", [y_exists, _inside(ctx, ys, fmap.height)])
    cols = ctx.one("And", [x_exists, _inside(ctx, xs, fmap.width)])
    used = ctx.one(
        "And",
        [
            ctx.one("Unsqueeze", [rows, _i64(ctx, "ax", [2])]),
            ctx.one("Unsqueeze", [cols, _i64(ctx, "ax", [1])]),
        ],
    )
    count = ctx.one("Mul", [y_count, x_count])
    return _pool_samples(ctx, layer, values, used, count, attrs["mode"])


def _inside(ctx: ConversionContext, coords: str, size: str) -> str:
    """Sample points that contribute: within one pixel of the map, [-1, size]."""
    limit = ctx.one("Cast", [size], to=TensorProto.FLOAT)
    return ctx.one(
        "And",
        [
            ctx.one("GreaterOrEqual", [coords, _f32(ctx, "m1", -1.0)]),
            ctx.one("LessOrEqual", [coords, limit]),
        ],
    )


def _pool_samples(
    ctx: ConversionContext, layer: Layer, values: str, used: str, count: str, mode: str
) -> str:
    """Pools samples [R, PH*S, PW*S, C] (``used`` [R, PH*S, PW*S] marks those that count,
    ``count`` [R, 1] the samples per bin) into [R, C, PH, PW]."""
    attrs = layer.attrs
    used = ctx.one("Unsqueeze", [used, _i64(ctx, "ax", [3])])
    values = ctx.one("Where", [used, values, _f32(ctx, "zero", 0.0)])
    shape = ctx.one("Shape", [values])
    grid = ctx.one(
        "Concat",
        [
            _i64(ctx, "grid", [0, attrs["pooled_h"], -1, attrs["pooled_w"]]),
            ctx.one(
                "Div",
                [
                    ctx.one("Slice", [shape, _i64(ctx, "b", [2]), _i64(ctx, "e", [3])]),
                    _i64(ctx, "pw", [attrs["pooled_w"]]),
                ],
            ),
            ctx.one("Slice", [shape, _i64(ctx, "b", [3]), _i64(ctx, "e", [4])]),
        ],
        axis=0,
    )
    cells = ctx.one("Reshape", [values, grid])  # [R, PH, Sy, PW, Sx, C]
    if mode == "max":  # OpenVINO's maximum starts from 0
        pooled = ctx.one(
            "Max", [ctx.reduce("ReduceMax", cells, [2, 4], False), _f32(ctx, "zero", 0.0)]
        )
    else:
        total = ctx.reduce("ReduceSum", cells, [2, 4], False)
        count = ctx.one("Unsqueeze", [count, _i64(ctx, "ax", [2, 3])])
        pooled = ctx.one("Div", [total, ctx.one("Max", [count, _f32(ctx, "one", 1.0)])])
    return ctx.one("Transpose", [pooled], perm=[0, 3, 1, 2])


def roi_align(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data, rois = _as_float(ctx, inputs[0]), _as_float(ctx, inputs[1])
    attrs = layer.attrs
    aligned = attrs.get("aligned_mode", "asymmetric")
    native = attrs["mode"] == "avg" and (aligned == "asymmetric" or ctx.opset >= 16)
    if not native:
        _finish(ctx, layer, _roi_align_composed(ctx, layer, data, rois, inputs[2], aligned))
        return
    extra = {}
    if ctx.opset >= 16:
        extra["coordinate_transformation_mode"] = (
            "output_half_pixel" if aligned == "asymmetric" else "half_pixel"
        )
    if aligned == "half_pixel":  # ((x + 0.5) * scale) - 0.5: ONNX's half_pixel after a shift
        rois = ctx.one("Add", [rois, _f32(ctx, "half", 0.5)])
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
    _finish(ctx, layer, pooled)


converts("ROIAlign", (3,), inputs=(3, 3), attrs=_ROI_ALIGN)(roi_align)
converts("ROIAlign", (9,), inputs=(3, 3), attrs={**_ROI_ALIGN, **_ALIGNED})(roi_align)


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
        last = ctx.one("Cast", [ctx.one("Sub", [size, _i64(ctx, "one", 1)])], to=TensorProto.FLOAT)
        begin, end = _column(ctx, rois, low), _column(ctx, rois, high)
        if pooled > 1:
            step = ctx.one(
                "Div",
                [ctx.one("Mul", [ctx.one("Sub", [end, begin]), last]), _f32(ctx, "n", pooled - 1)],
            )
            cells = _f32(ctx, "cells", np.arange(pooled, dtype=np.float32)[None])
            points = ctx.one("Add", [ctx.one("Mul", [cells, step]), ctx.one("Mul", [begin, last])])
        else:
            middle = ctx.one("Mul", [ctx.one("Add", [begin, end]), _f32(ctx, "half", 0.5)])
            points = ctx.one("Mul", [middle, last])
        coords.append(points)
        inside.append(
            ctx.one(
                "And",
                [
                    ctx.one("GreaterOrEqual", [points, _f32(ctx, "zero", 0.0)]),
                    ctx.one("LessOrEqual", [points, last]),
                ],
            )
        )
    batch = ctx.one("Cast", [_column(ctx, rois, 0)], to=TensorProto.INT64)
    values = fmap.bilinear(ctx, batch, coords[0], coords[1])  # [R, PH, PW, C]
    used = ctx.one(
        "And",
        [
            ctx.one("Unsqueeze", [inside[0], _i64(ctx, "ax", [2, 3])]),
            ctx.one("Unsqueeze", [inside[1], _i64(ctx, "ax", [1, 3])]),
        ],
    )
    values = ctx.one("Where", [used, values, _f32(ctx, "zero", 0.0)])
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
    data, rois = _as_float(ctx, inputs[0]), _as_float(ctx, inputs[1])
    if layer.attrs["method"] == "bilinear":
        _finish(ctx, layer, _bilinear_roi_pooling(ctx, layer, data, rois))
        return
    pooled = ctx.one(
        "MaxRoiPool",
        [data, rois],
        pooled_shape=[layer.attrs["pooled_h"], layer.attrs["pooled_w"]],
        spatial_scale=layer.attrs["spatial_scale"],
    )
    _finish(ctx, layer, pooled)


# -- PSROIPooling ---------------------------------------------------------------------------


def _round_half_away(ctx: ConversionContext, value: str) -> str:
    """C's roundf (ONNX's Round rounds halves to even)."""
    magnitude = ctx.one("Floor", [ctx.one("Add", [ctx.one("Abs", [value]), _f32(ctx, "h", 0.5)])])
    return ctx.one("Mul", [ctx.one("Sign", [value]), magnitude])


def _bin_edges(
    ctx: ConversionContext, start: str, bin_size: str, bins: int, size: str
) -> tuple[str, str]:
    """First and past-the-end pixel of each of ``bins`` bins per ROI, clipped to the map
    (a bin wholly outside it is empty): two [R, bins] float tensors."""
    cells = _f32(ctx, "cells", np.arange(bins + 1, dtype=np.float32)[None])
    edges = ctx.one("Add", [start, ctx.one("Mul", [cells, bin_size])])  # [R, bins + 1]
    lower = ctx.one(
        "Slice", [edges, _i64(ctx, "b", [0]), _i64(ctx, "e", [bins]), _i64(ctx, "a", [1])]
    )
    upper = ctx.one(
        "Slice", [edges, _i64(ctx, "b", [1]), _i64(ctx, "e", [bins + 1]), _i64(ctx, "a", [1])]
    )
    size_f = ctx.one("Cast", [size], to=TensorProto.FLOAT)
    zero = _f32(ctx, "zero", 0.0)
    first = ctx.one("Min", [ctx.one("Max", [ctx.one("Floor", [lower]), zero]), size_f])
    end = ctx.one("Max", [ctx.one("Min", [ctx.one("Ceil", [upper]), size_f]), first])
    return first, end


def _in_bins(ctx: ConversionContext, first: str, end: str, size: str, axis: list[int]) -> str:
    """Float mask [R, bins, size] of the pixels in each bin, unsqueezed at ``axis``."""
    pixels = ctx.one(
        "Cast",
        [ctx.one("Range", [_i64(ctx, "z", 0), size, _i64(ctx, "s", 1)])],
        to=TensorProto.FLOAT,
    )
    last = _i64(ctx, "ax", [2])
    inside = ctx.one(
        "And",
        [
            ctx.one("GreaterOrEqual", [pixels, ctx.one("Unsqueeze", [first, last])]),
            ctx.one("Less", [pixels, ctx.one("Unsqueeze", [end, last])]),
        ],
    )
    mask = ctx.one("Cast", [inside], to=TensorProto.FLOAT)
    return ctx.one("Unsqueeze", [mask, _i64(ctx, "ax", axis)])


def _average_psroi(ctx: ConversionContext, layer: Layer, data: str, rois: str) -> str:
    groups, channels = layer.attrs["group_size"], layer.attrs["output_dim"]
    scale = _f32(ctx, "scale", layer.attrs["spatial_scale"])
    shape = ctx.one("Shape", [data])
    height = ctx.one("Gather", [shape, _i64(ctx, "h", 2)])
    width = ctx.one("Gather", [shape, _i64(ctx, "w", 3)])
    edges = []
    for low, high, size in ((2, 4, height), (1, 3, width)):
        start = ctx.one("Mul", [_round_half_away(ctx, _column(ctx, rois, low)), scale])
        end = ctx.one(
            "Mul",
            [
                ctx.one(
                    "Add", [_round_half_away(ctx, _column(ctx, rois, high)), _f32(ctx, "one", 1.0)]
                ),
                scale,
            ],
        )
        bin_size = ctx.one("Div", [ctx.one("Sub", [end, start]), _f32(ctx, "g", float(groups))])
        edges.append(_bin_edges(ctx, start, bin_size, groups, size))
    batch = ctx.one(
        "Cast",
        [ctx.one("Squeeze", [_column(ctx, rois, 0), _i64(ctx, "ax", [1])])],
        to=TensorProto.INT64,
    )
    picked = ctx.one("Gather", [data, batch], axis=0)  # [R, C, H, W]
    grid = ctx.one(
        "Concat",
        [
            _i64(ctx, "grid", [0, channels, groups, groups]),
            ctx.one("Slice", [shape, _i64(ctx, "b", [2]), _i64(ctx, "e", [4])]),
        ],
        axis=0,
    )
    cells = ctx.one("Reshape", [picked, grid])  # [R, OD, PH, PW, H, W]
    (y_first, y_end), (x_first, x_end) = edges
    cols = _in_bins(ctx, x_first, x_end, width, [1, 2, 4])  # [R, 1, 1, PW, 1, W]
    rows = _in_bins(ctx, y_first, y_end, height, [1, 3])  # [R, 1, PH, 1, H]
    summed = ctx.reduce("ReduceSum", ctx.one("Mul", [cells, cols]), [5], False)
    summed = ctx.reduce("ReduceSum", ctx.one("Mul", [summed, rows]), [4], False)
    counts = ctx.one(
        "Mul",
        [
            ctx.one("Unsqueeze", [ctx.one("Sub", [y_end, y_first]), _i64(ctx, "ax", [1, 3])]),
            ctx.one("Unsqueeze", [ctx.one("Sub", [x_end, x_first]), _i64(ctx, "ax", [1, 2])]),
        ],
    )
    empty = ctx.one("Equal", [counts, _f32(ctx, "zero", 0.0)])
    safe = ctx.one("Where", [empty, _f32(ctx, "one", 1.0), counts])
    return ctx.one("Where", [empty, _f32(ctx, "zero", 0.0), ctx.one("Div", [summed, safe])])


def _bilinear_psroi(ctx: ConversionContext, layer: Layer, data: str, rois: str) -> str:
    """Each output averages one bilinear sample per spatial bin, each bin read from its own
    block of channels; the samples of all channels are taken, then the matching block is
    picked by an identity mask over (bin, channel block)."""
    groups, channels = layer.attrs["group_size"], layer.attrs["output_dim"]
    bins_x, bins_y = layer.attrs["spatial_bins_x"], layer.attrs["spatial_bins_y"]
    scale = _f32(ctx, "scale", layer.attrs["spatial_scale"])
    fmap = FeatureMap.of(ctx, data)
    points, inside = [], []
    for low, high, size, bins in ((2, 4, fmap.height, bins_y), (1, 3, fmap.width, bins_x)):
        start = ctx.one("Mul", [_column(ctx, rois, low), scale])
        end = ctx.one("Mul", [_column(ctx, rois, high), scale])
        bin_size = ctx.one("Div", [ctx.one("Sub", [end, start]), _f32(ctx, "n", float(bins))])
        size_f = ctx.one("Cast", [size], to=TensorProto.FLOAT)
        last = ctx.one("Sub", [size_f, _f32(ctx, "one", 1.0)])
        spatial = _f32(ctx, "bins", np.arange(bins, dtype=np.float32).reshape(1, 1, bins))
        bin_start = ctx.one(
            "Add",
            [
                ctx.one("Unsqueeze", [start, _i64(ctx, "ax", [2])]),
                ctx.one("Mul", [spatial, ctx.one("Unsqueeze", [bin_size, _i64(ctx, "ax", [2])])]),
            ],
        )  # [R, 1, bins]
        if groups > 1:
            step = ctx.one(
                "Div", [ctx.one("Mul", [bin_size, last]), _f32(ctx, "g", float(groups - 1))]
            )
            cells = _f32(ctx, "cells", np.arange(groups, dtype=np.float32).reshape(1, groups, 1))
            point = ctx.one(
                "Add",
                [
                    ctx.one("Mul", [cells, ctx.one("Unsqueeze", [step, _i64(ctx, "ax", [2])])]),
                    ctx.one("Mul", [bin_start, last]),
                ],
            )
        else:
            twice = ctx.one(
                "Add",
                [
                    ctx.one("Add", [bin_start, bin_start]),
                    ctx.one("Unsqueeze", [bin_size, _i64(ctx, "ax", [2])]),
                ],
            )
            point = ctx.one("Div", [ctx.one("Mul", [twice, last]), _f32(ctx, "two", 2.0)])
        point = ctx.one("Reshape", [point, _i64(ctx, "flat", [0, -1])])  # [R, groups * bins]
        points.append(point)
        inside.append(ctx.one("Less", [point, size_f]))
    batch = ctx.one("Cast", [_column(ctx, rois, 0)], to=TensorProto.INT64)
    values = fmap.bilinear(ctx, batch, points[0], points[1])  # [R, PH*BY, PW*BX, C]
    used = ctx.one(
        "And",
        [
            ctx.one("Unsqueeze", [inside[0], _i64(ctx, "ax", [2, 3])]),
            ctx.one("Unsqueeze", [inside[1], _i64(ctx, "ax", [1, 3])]),
        ],
    )
    values = ctx.one("Where", [used, values, _f32(ctx, "zero", 0.0)])
    split = _i64(ctx, "split", [0, groups, bins_y, groups, bins_x, bins_y, bins_x, channels])
    values = ctx.one("Reshape", [values, split])
    pick_y = np.eye(bins_y, dtype=np.float32).reshape(1, 1, bins_y, 1, 1, bins_y, 1, 1)
    pick_x = np.eye(bins_x, dtype=np.float32).reshape(1, 1, 1, 1, bins_x, 1, bins_x, 1)
    picked = ctx.one(
        "Mul", [ctx.one("Mul", [values, _f32(ctx, "pick_y", pick_y)]), _f32(ctx, "pick_x", pick_x)]
    )
    total = ctx.reduce("ReduceSum", picked, [2, 4, 5, 6], False)  # [R, PH, PW, OD]
    mean = ctx.one("Div", [total, _f32(ctx, "bins", float(bins_x * bins_y))])
    return ctx.one("Transpose", [mean], perm=[0, 3, 1, 2])


@converts(
    "PSROIPooling",
    (1,),
    inputs=(2, 2),
    attrs={
        "output_dim": Int(required=True, minimum=1),
        "group_size": Int(default=1, minimum=1),
        "spatial_scale": Float(required=True),
        "mode": Choice(allowed=("average", "bilinear"), default="average"),
        "spatial_bins_x": Int(default=1, minimum=1),
        "spatial_bins_y": Int(default=1, minimum=1),
    },
)
def psroi_pooling(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data, rois = _as_float(ctx, inputs[0]), _as_float(ctx, inputs[1])
    if layer.attrs["mode"] == "average":
        pooled = _average_psroi(ctx, layer, data, rois)
    else:
        pooled = _bilinear_psroi(ctx, layer, data, rois)
    _finish(ctx, layer, ctx.one("Where", [_live_rois(ctx, rois), pooled, _f32(ctx, "zero", 0.0)]))


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
    data, rois = _as_float(ctx, inputs[0]), _as_float(ctx, inputs[1])
    scale = _f32(ctx, "scale", attrs["spatial_scale"])
    fmap = FeatureMap.of(ctx, data)
    half = _f32(ctx, "half", 0.5)
    centre_x = ctx.one("Sub", [ctx.one("Mul", [_column(ctx, rois, 0), scale]), half])
    centre_y = ctx.one("Sub", [ctx.one("Mul", [_column(ctx, rois, 1), scale]), half])
    width = ctx.one("Mul", [_column(ctx, rois, 2), scale])
    height = ctx.one("Mul", [_column(ctx, rois, 3), scale])
    angle = _column(ctx, rois, 4)
    if attrs["clockwise_mode"]:
        angle = ctx.one("Neg", [angle])
    cos, sin = ctx.one("Cos", [angle]), ctx.one("Sin", [angle])
    minus_half = _f32(ctx, "minus_half", -0.5)
    ratio = attrs["sampling_ratio"]
    yy, y_exists, y_count = _sample_axis(
        ctx, ctx.one("Mul", [height, minus_half]), height, attrs["pooled_h"], ratio
    )
    xx, x_exists, x_count = _sample_axis(
        ctx, ctx.one("Mul", [width, minus_half]), width, attrs["pooled_w"], ratio
    )
    yy = ctx.one("Unsqueeze", [yy, _i64(ctx, "ax", [2])])  # [R, A, 1]
    xx = ctx.one("Unsqueeze", [xx, _i64(ctx, "ax", [1])])  # [R, 1, B]
    r3 = _i64(ctx, "ax", [2])
    cos, sin, centre_x, centre_y = (
        ctx.one("Unsqueeze", [t, r3]) for t in (cos, sin, centre_x, centre_y)
    )
    ys = ctx.one(
        "Add", [ctx.one("Sub", [ctx.one("Mul", [yy, cos]), ctx.one("Mul", [xx, sin])]), centre_y]
    )
    xs = ctx.one(
        "Add", [ctx.one("Add", [ctx.one("Mul", [yy, sin]), ctx.one("Mul", [xx, cos])]), centre_x]
    )
    batch = ctx.one("Unsqueeze", [ctx.int64(inputs[2]), _i64(ctx, "ax", [1])])
    values = fmap.points(ctx, batch, ys, xs)
    used = ctx.one(
        "And",
        [
            ctx.one(
                "And",
                [
                    ctx.one("Unsqueeze", [y_exists, _i64(ctx, "ax", [2])]),
                    ctx.one("Unsqueeze", [x_exists, _i64(ctx, "ax", [1])]),
                ],
            ),
            ctx.one("And", [_inside(ctx, ys, fmap.height), _inside(ctx, xs, fmap.width)]),
        ],
    )
    count = ctx.one("Mul", [y_count, x_count])
    _finish(ctx, layer, _pool_samples(ctx, layer, values, used, count, "avg"))


def _live_rois(ctx: ConversionContext, rois: str) -> str:
    """[R, 1, 1, 1] mask of the ROIs before the first one whose batch id is -1, where
    OpenVINO stops reading the list (the rest of the output is zeros)."""
    ended = ctx.one("Equal", [_column(ctx, rois, 0), _f32(ctx, "end", -1.0)])
    seen = ctx.one("CumSum", [ctx.one("Cast", [ended], to=TensorProto.FLOAT), _i64(ctx, "a", 0)])
    live = ctx.one("Equal", [seen, _f32(ctx, "zero", 0.0)])
    return ctx.one("Unsqueeze", [live, _i64(ctx, "ax", [2, 3])])


# -- DeformablePSROIPooling ------------------------------------------------------------------


@converts(
    "DeformablePSROIPooling",
    (1,),
    inputs=(2, 3),
    attrs={
        "output_dim": Int(required=True, minimum=1),
        "spatial_scale": Float(required=True),
        "group_size": Int(default=1, minimum=1),
        "mode": Choice(allowed=("bilinear_deformable",), default="bilinear_deformable"),
        "spatial_bins_x": Int(default=1, minimum=1),
        "spatial_bins_y": Int(default=1, minimum=1),
        "trans_std": Float(default=1.0),
        "part_size": Int(default=1, minimum=1),
    },
)
def deformable_psroi_pooling(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """Each output (roi, c, h, w) averages ``spatial_bins_y x spatial_bins_x`` bilinear
    samples of one position-sensitive channel, from a bin moved by the optional offsets
    (third input, scaled by ``trans_std`` and the ROI size). The samples are gathered
    directly from the flattened input: [R, C, G, G, Sy, Sx] indices per corner."""
    attrs = layer.attrs
    data, rois = _as_float(ctx, inputs[0]), _as_float(ctx, inputs[1])
    groups, channels = attrs["group_size"], attrs["output_dim"]
    bins_y, bins_x, part = attrs["spatial_bins_y"], attrs["spatial_bins_x"], attrs["part_size"]
    scale = _f32(ctx, "scale", attrs["spatial_scale"])
    shape = ctx.one("Shape", [data])
    in_channels = ctx.one("Gather", [shape, _i64(ctx, "c", 1)])
    height = ctx.one("Gather", [shape, _i64(ctx, "h", 2)])
    width = ctx.one("Gather", [shape, _i64(ctx, "w", 3)])

    def axis_of(values: np.ndarray, position: int, rank: int = 6) -> np.ndarray:
        shape = [1] * rank
        shape[position] = len(values)
        return np.asarray(values).reshape(shape)

    half = _f32(ctx, "half", 0.5)
    starts, sizes = [], []
    for low, high in ((2, 4), (1, 3)):  # y from columns 2/4, x from 1/3
        begin = ctx.one(
            "Sub", [ctx.one("Mul", [_round_half_away(ctx, _column(ctx, rois, low)), scale]), half]
        )
        end = ctx.one(
            "Sub",
            [
                ctx.one(
                    "Mul",
                    [
                        ctx.one(
                            "Add",
                            [
                                _round_half_away(ctx, _column(ctx, rois, high)),
                                _f32(ctx, "one", 1.0),
                            ],
                        ),
                        scale,
                    ],
                ),
                half,
            ],
        )
        size = ctx.one("Max", [ctx.one("Sub", [end, begin]), _f32(ctx, "min", 0.1)])
        six = _i64(ctx, "ax", [2, 3, 4, 5])
        starts.append(ctx.one("Unsqueeze", [begin, six]))
        sizes.append(ctx.one("Unsqueeze", [size, six]))
    moves = [None, None]
    if len(inputs) > 2:
        trans_shape = ctx.shape(inputs[2])
        if trans_shape is None or len(trans_shape) != 4 or trans_shape[1] is None:
            raise B2SError(
                f"{layer.where()}: input 'offsets' needs a static [R, 2 * classes, P, P] shape"
            )
        classes = trans_shape[1] // 2
        if classes < 1 or channels % classes:
            raise B2SError(
                f"{layer.where()}: attribute output_dim='{channels}' is not divisible by the "
                f"{classes} offset classes"
            )
        trans = _as_float(ctx, inputs[2])
        class_of = np.arange(channels) // (channels // classes)
        part_of = np.arange(groups) * part // groups
        for k in (0, 1):  # x offsets at 2 * class, y offsets at 2 * class + 1
            picked = ctx.one("Gather", [trans, _i64(ctx, "cls", 2 * class_of + k)], axis=1)
            picked = ctx.one("Gather", [picked, _i64(ctx, "ph", part_of)], axis=2)
            picked = ctx.one("Gather", [picked, _i64(ctx, "pw", part_of)], axis=3)
            picked = ctx.one("Mul", [picked, _f32(ctx, "std", attrs["trans_std"])])
            moves[k] = ctx.one("Unsqueeze", [picked, _i64(ctx, "ax", [4, 5])])  # [R, C, G, G, 1, 1]
    points = []
    for start, size, move, bins, cells_at, sub_at in (
        (starts[0], sizes[0], moves[1], bins_y, 2, 4),
        (starts[1], sizes[1], moves[0], bins_x, 3, 5),
    ):
        bin_size = ctx.one("Div", [size, _f32(ctx, "g", float(groups))])
        sub_size = ctx.one("Div", [bin_size, _f32(ctx, "s", float(bins))])
        cells = _f32(ctx, "cells", axis_of(np.arange(groups, dtype=np.float32), cells_at))
        subs = _f32(ctx, "subs", axis_of(np.arange(bins, dtype=np.float32), sub_at))
        origin = ctx.one("Add", [ctx.one("Mul", [cells, bin_size]), start])
        if move is not None:
            origin = ctx.one("Add", [origin, ctx.one("Mul", [move, size])])
        points.append(ctx.one("Add", [origin, ctx.one("Mul", [subs, sub_size])]))
    ys, xs = points
    h_f = ctx.one("Cast", [height], to=TensorProto.FLOAT)
    w_f = ctx.one("Cast", [width], to=TensorProto.FLOAT)
    minus_half = _f32(ctx, "mh", -0.5)

    def inside(coords: str, size_f: str) -> str:
        return ctx.one(
            "And",
            [
                ctx.one("GreaterOrEqual", [coords, minus_half]),
                ctx.one("LessOrEqual", [coords, ctx.one("Sub", [size_f, half])]),
            ],
        )

    used = ctx.one("And", [inside(ys, h_f), inside(xs, w_f)])
    fmap = FeatureMap.of(ctx, data)
    y_lo, y_hi, y_frac = fmap.neighbours(ctx, ys, height, [])
    x_lo, x_hi, x_frac = fmap.neighbours(ctx, xs, width, [])
    grid = np.arange(groups)
    source = (np.arange(channels)[:, None, None] * groups + grid[None, :, None]) * groups + grid[
        None, None, :
    ]
    source = _i64(ctx, "source", source.reshape(1, channels, groups, groups, 1, 1))
    batch = ctx.one("Cast", [_column(ctx, rois, 0)], to=TensorProto.INT64)
    batch = ctx.one(
        "Unsqueeze", [ctx.one("Max", [batch, _i64(ctx, "z", 0)]), _i64(ctx, "ax", [2, 3, 4, 5])]
    )
    plane = ctx.one("Mul", [ctx.one("Add", [ctx.one("Mul", [batch, in_channels]), source]), height])
    flat = ctx.one("Reshape", [data, _i64(ctx, "flat", [-1])])
    one = _f32(ctx, "one", 1.0)
    terms = []
    for y_idx, y_weight in ((y_lo, ctx.one("Sub", [one, y_frac])), (y_hi, y_frac)):
        for x_idx, x_weight in ((x_lo, ctx.one("Sub", [one, x_frac])), (x_hi, x_frac)):
            index = ctx.one("Add", [ctx.one("Mul", [ctx.one("Add", [plane, y_idx]), width]), x_idx])
            value = ctx.one("Gather", [flat, index], axis=0)
            terms.append(ctx.one("Mul", [ctx.one("Mul", [y_weight, x_weight]), value]))
    samples = ctx.one("Where", [used, ctx.one("Sum", terms), _f32(ctx, "zero", 0.0)])
    total = ctx.reduce("ReduceSum", samples, [4, 5], False)
    count = ctx.reduce("ReduceSum", ctx.one("Cast", [used], to=TensorProto.FLOAT), [4, 5], False)
    mean = ctx.one("Div", [total, ctx.one("Max", [count, one])])
    _finish(ctx, layer, ctx.one("Where", [_live_rois(ctx, rois), mean, _f32(ctx, "zero", 0.0)]))
