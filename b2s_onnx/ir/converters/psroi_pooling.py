"""Position-sensitive ROI pooling: PSROIPooling-1 (average and bilinear) and
DeformablePSROIPooling-1, composed from gathers of the feature map and masked sums.
Both stop at the first ROI whose batch index is -1, as OpenVINO's CPU plugin does.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.roi_sampling import (
    FeatureMap,
    as_float,
    column,
    f32,
    finish,
    i64,
    live_rois,
    round_half_away,
)
from b2s_onnx.ir.converters.schema import Choice, Float, Int
from b2s_onnx.ir.reader import Layer

# -- PSROIPooling ---------------------------------------------------------------------------


def _bin_edges(
    ctx: ConversionContext, start: str, bin_size: str, bins: int, size: str
) -> tuple[str, str]:
    """First and past-the-end pixel of each of ``bins`` bins per ROI, clipped to the map
    (a bin wholly outside it is empty): two [R, bins] float tensors."""
    cells = f32(ctx, "cells", np.arange(bins + 1, dtype=np.float32)[None])
    edges = ctx.one("Add", [start, ctx.one("Mul", [cells, bin_size])])  # [R, bins + 1]
    lower = ctx.one("Slice", [edges, i64(ctx, "b", [0]), i64(ctx, "e", [bins]), i64(ctx, "a", [1])])
    upper = ctx.one(
        "Slice", [edges, i64(ctx, "b", [1]), i64(ctx, "e", [bins + 1]), i64(ctx, "a", [1])]
    )
    size_f = ctx.one("Cast", [size], to=TensorProto.FLOAT)
    zero = f32(ctx, "zero", 0.0)
    first = ctx.one("Min", [ctx.one("Max", [ctx.one("Floor", [lower]), zero]), size_f])
    end = ctx.one("Max", [ctx.one("Min", [ctx.one("Ceil", [upper]), size_f]), first])
    return first, end


def _in_bins(ctx: ConversionContext, first: str, end: str, size: str, axis: list[int]) -> str:
    """Float mask [R, bins, size] of the pixels in each bin, unsqueezed at ``axis``."""
    pixels = ctx.one(
        "Cast",
        [ctx.one("Range", [i64(ctx, "z", 0), size, i64(ctx, "s", 1)])],
        to=TensorProto.FLOAT,
    )
    last = i64(ctx, "ax", [2])
    inside = ctx.one(
        "And",
        [
            ctx.one("GreaterOrEqual", [pixels, ctx.one("Unsqueeze", [first, last])]),
            ctx.one("Less", [pixels, ctx.one("Unsqueeze", [end, last])]),
        ],
    )
    mask = ctx.one("Cast", [inside], to=TensorProto.FLOAT)
    return ctx.one("Unsqueeze", [mask, i64(ctx, "ax", axis)])


def _average_psroi(ctx: ConversionContext, layer: Layer, data: str, rois: str) -> str:
    groups, channels = layer.attrs["group_size"], layer.attrs["output_dim"]
    scale = f32(ctx, "scale", layer.attrs["spatial_scale"])
    shape = ctx.one("Shape", [data])
    height = ctx.one("Gather", [shape, i64(ctx, "h", 2)])
    width = ctx.one("Gather", [shape, i64(ctx, "w", 3)])
    edges = []
    for low, high, size in ((2, 4, height), (1, 3, width)):
        start = ctx.one("Mul", [round_half_away(ctx, column(ctx, rois, low)), scale])
        end = ctx.one(
            "Mul",
            [
                ctx.one(
                    "Add", [round_half_away(ctx, column(ctx, rois, high)), f32(ctx, "one", 1.0)]
                ),
                scale,
            ],
        )
        bin_size = ctx.one("Div", [ctx.one("Sub", [end, start]), f32(ctx, "g", float(groups))])
        edges.append(_bin_edges(ctx, start, bin_size, groups, size))
    batch = ctx.one(
        "Cast",
        [ctx.one("Squeeze", [column(ctx, rois, 0), i64(ctx, "ax", [1])])],
        to=TensorProto.INT64,
    )
    picked = ctx.one("Gather", [data, batch], axis=0)  # [R, C, H, W]
    grid = ctx.one(
        "Concat",
        [
            i64(ctx, "grid", [0, channels, groups, groups]),
            ctx.one("Slice", [shape, i64(ctx, "b", [2]), i64(ctx, "e", [4])]),
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
            ctx.one("Unsqueeze", [ctx.one("Sub", [y_end, y_first]), i64(ctx, "ax", [1, 3])]),
            ctx.one("Unsqueeze", [ctx.one("Sub", [x_end, x_first]), i64(ctx, "ax", [1, 2])]),
        ],
    )
    empty = ctx.one("Equal", [counts, f32(ctx, "zero", 0.0)])
    safe = ctx.one("Where", [empty, f32(ctx, "one", 1.0), counts])
    return ctx.one("Where", [empty, f32(ctx, "zero", 0.0), ctx.one("Div", [summed, safe])])


def _bilinear_psroi(ctx: ConversionContext, layer: Layer, data: str, rois: str) -> str:
    """Each output averages one bilinear sample per spatial bin, each bin read from its own
    block of channels; the samples of all channels are taken, then the matching block is
    picked by an identity mask over (bin, channel block)."""
    groups, channels = layer.attrs["group_size"], layer.attrs["output_dim"]
    bins_x, bins_y = layer.attrs["spatial_bins_x"], layer.attrs["spatial_bins_y"]
    scale = f32(ctx, "scale", layer.attrs["spatial_scale"])
    fmap = FeatureMap.of(ctx, data)
    points, inside = [], []
    for low, high, size, bins in ((2, 4, fmap.height, bins_y), (1, 3, fmap.width, bins_x)):
        start = ctx.one("Mul", [column(ctx, rois, low), scale])
        end = ctx.one("Mul", [column(ctx, rois, high), scale])
        bin_size = ctx.one("Div", [ctx.one("Sub", [end, start]), f32(ctx, "n", float(bins))])
        size_f = ctx.one("Cast", [size], to=TensorProto.FLOAT)
        last = ctx.one("Sub", [size_f, f32(ctx, "one", 1.0)])
        spatial = f32(ctx, "bins", np.arange(bins, dtype=np.float32).reshape(1, 1, bins))
        bin_start = ctx.one(
            "Add",
            [
                ctx.one("Unsqueeze", [start, i64(ctx, "ax", [2])]),
                ctx.one("Mul", [spatial, ctx.one("Unsqueeze", [bin_size, i64(ctx, "ax", [2])])]),
            ],
        )  # [R, 1, bins]
        if groups > 1:
            step = ctx.one(
                "Div", [ctx.one("Mul", [bin_size, last]), f32(ctx, "g", float(groups - 1))]
            )
            cells = f32(ctx, "cells", np.arange(groups, dtype=np.float32).reshape(1, groups, 1))
            point = ctx.one(
                "Add",
                [
                    ctx.one("Mul", [cells, ctx.one("Unsqueeze", [step, i64(ctx, "ax", [2])])]),
                    ctx.one("Mul", [bin_start, last]),
                ],
            )
        else:
            twice = ctx.one(
                "Add",
                [
                    ctx.one("Add", [bin_start, bin_start]),
                    ctx.one("Unsqueeze", [bin_size, i64(ctx, "ax", [2])]),
                ],
            )
            point = ctx.one("Div", [ctx.one("Mul", [twice, last]), f32(ctx, "two", 2.0)])
        point = ctx.one("Flatten", [point], axis=1)  # [R, groups * bins]
        points.append(point)
        inside.append(ctx.one("Less", [point, size_f]))
    batch = ctx.one("Cast", [column(ctx, rois, 0)], to=TensorProto.INT64)
    values = fmap.bilinear(ctx, batch, points[0], points[1])  # [R, PH*BY, PW*BX, C]
    used = ctx.one(
        "And",
        [
            ctx.one("Unsqueeze", [inside[0], i64(ctx, "ax", [2, 3])]),
            ctx.one("Unsqueeze", [inside[1], i64(ctx, "ax", [1, 3])]),
        ],
    )
    values = ctx.one("Where", [used, values, f32(ctx, "zero", 0.0)])
    split = i64(ctx, "split", [0, groups, bins_y, groups, bins_x, bins_y, bins_x, channels])
    values = ctx.one("Reshape", [values, split])
    pick_y = np.eye(bins_y, dtype=np.float32).reshape(1, 1, bins_y, 1, 1, bins_y, 1, 1)
    pick_x = np.eye(bins_x, dtype=np.float32).reshape(1, 1, 1, 1, bins_x, 1, bins_x, 1)
    picked = ctx.one(
        "Mul", [ctx.one("Mul", [values, f32(ctx, "pick_y", pick_y)]), f32(ctx, "pick_x", pick_x)]
    )
    total = ctx.reduce("ReduceSum", picked, [2, 4, 5, 6], False)  # [R, PH, PW, OD]
    mean = ctx.one("Div", [total, f32(ctx, "bins", float(bins_x * bins_y))])
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
    data, rois = as_float(ctx, inputs[0]), as_float(ctx, inputs[1])
    if layer.attrs["mode"] == "average":
        pooled = _average_psroi(ctx, layer, data, rois)
    else:
        pooled = _bilinear_psroi(ctx, layer, data, rois)
    finish(ctx, layer, ctx.one("Where", [live_rois(ctx, rois), pooled, f32(ctx, "zero", 0.0)]))


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
    data, rois = as_float(ctx, inputs[0]), as_float(ctx, inputs[1])
    groups, channels = attrs["group_size"], attrs["output_dim"]
    bins_y, bins_x, part = attrs["spatial_bins_y"], attrs["spatial_bins_x"], attrs["part_size"]
    scale = f32(ctx, "scale", attrs["spatial_scale"])
    shape = ctx.one("Shape", [data])
    in_channels = ctx.one("Gather", [shape, i64(ctx, "c", 1)])
    height = ctx.one("Gather", [shape, i64(ctx, "h", 2)])
    width = ctx.one("Gather", [shape, i64(ctx, "w", 3)])

    def axis_of(values: np.ndarray, position: int, rank: int = 6) -> np.ndarray:
        shape = [1] * rank
        shape[position] = len(values)
        return np.asarray(values).reshape(shape)

    half = f32(ctx, "half", 0.5)
    starts, sizes = [], []
    for low, high in ((2, 4), (1, 3)):  # y from columns 2/4, x from 1/3
        begin = ctx.one(
            "Sub", [ctx.one("Mul", [round_half_away(ctx, column(ctx, rois, low)), scale]), half]
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
                                round_half_away(ctx, column(ctx, rois, high)),
                                f32(ctx, "one", 1.0),
                            ],
                        ),
                        scale,
                    ],
                ),
                half,
            ],
        )
        size = ctx.one("Max", [ctx.one("Sub", [end, begin]), f32(ctx, "min", 0.1)])
        six = i64(ctx, "ax", [2, 3, 4, 5])
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
        trans = as_float(ctx, inputs[2])
        class_of = np.arange(channels) // (channels // classes)
        part_of = np.arange(groups) * part // groups
        for k in (0, 1):  # x offsets at 2 * class, y offsets at 2 * class + 1
            picked = ctx.one("Gather", [trans, i64(ctx, "cls", 2 * class_of + k)], axis=1)
            picked = ctx.one("Gather", [picked, i64(ctx, "ph", part_of)], axis=2)
            picked = ctx.one("Gather", [picked, i64(ctx, "pw", part_of)], axis=3)
            picked = ctx.one("Mul", [picked, f32(ctx, "std", attrs["trans_std"])])
            moves[k] = ctx.one("Unsqueeze", [picked, i64(ctx, "ax", [4, 5])])  # [R, C, G, G, 1, 1]
    points = []
    for start, size, move, bins, cells_at, sub_at in (
        (starts[0], sizes[0], moves[1], bins_y, 2, 4),
        (starts[1], sizes[1], moves[0], bins_x, 3, 5),
    ):
        bin_size = ctx.one("Div", [size, f32(ctx, "g", float(groups))])
        sub_size = ctx.one("Div", [bin_size, f32(ctx, "s", float(bins))])
        cells = f32(ctx, "cells", axis_of(np.arange(groups, dtype=np.float32), cells_at))
        subs = f32(ctx, "subs", axis_of(np.arange(bins, dtype=np.float32), sub_at))
        origin = ctx.one("Add", [ctx.one("Mul", [cells, bin_size]), start])
        if move is not None:
            origin = ctx.one("Add", [origin, ctx.one("Mul", [move, size])])
        points.append(ctx.one("Add", [origin, ctx.one("Mul", [subs, sub_size])]))
    ys, xs = points
    h_f = ctx.one("Cast", [height], to=TensorProto.FLOAT)
    w_f = ctx.one("Cast", [width], to=TensorProto.FLOAT)
    minus_half = f32(ctx, "mh", -0.5)

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
    source = i64(ctx, "source", source.reshape(1, channels, groups, groups, 1, 1))
    batch = ctx.one("Cast", [column(ctx, rois, 0)], to=TensorProto.INT64)
    batch = ctx.one(
        "Unsqueeze", [ctx.one("Max", [batch, i64(ctx, "z", 0)]), i64(ctx, "ax", [2, 3, 4, 5])]
    )
    plane = ctx.one("Mul", [ctx.one("Add", [ctx.one("Mul", [batch, in_channels]), source]), height])
    flat = ctx.one("Reshape", [data, i64(ctx, "flat", [-1])])
    one = f32(ctx, "one", 1.0)
    terms = []
    for y_idx, y_weight in ((y_lo, ctx.one("Sub", [one, y_frac])), (y_hi, y_frac)):
        for x_idx, x_weight in ((x_lo, ctx.one("Sub", [one, x_frac])), (x_hi, x_frac)):
            index = ctx.one("Add", [ctx.one("Mul", [ctx.one("Add", [plane, y_idx]), width]), x_idx])
            value = ctx.one("Gather", [flat, index], axis=0)
            terms.append(ctx.one("Mul", [ctx.one("Mul", [y_weight, x_weight]), value]))
    samples = ctx.one("Where", [used, ctx.one("Sum", terms), f32(ctx, "zero", 0.0)])
    total = ctx.reduce("ReduceSum", samples, [4, 5], False)
    count = ctx.reduce("ReduceSum", ctx.one("Cast", [used], to=TensorProto.FLOAT), [4, 5], False)
    mean = ctx.one("Div", [total, ctx.one("Max", [count, one])])
    finish(ctx, layer, ctx.one("Where", [live_rois(ctx, rois), mean, f32(ctx, "zero", 0.0)]))
