"""Shared machinery of the ROI layers: a feature map viewed as pixel rows for gathering,
bilinear samples, per-ROI sample grids (with a per-ROI count when ``sampling_ratio`` is 0:
the largest count over all ROIs and a mask) and their masked pooling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.reader import Layer


def i64(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, np.int64))


def f32(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, np.float32))


def as_float(ctx: ConversionContext, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


def finish(ctx: ConversionContext, layer: Layer, value: str) -> None:
    """Writes a float32 result as the layer's output, in the element type the IR declares."""
    out = ctx.out(layer)
    if ctx.type_of(out) == TensorProto.FLOAT:
        ctx.one("Identity", [value], out)
    else:
        ctx.one("Cast", [value], out, to=ctx.type_of(out))


def column(ctx: ConversionContext, rois: str, index: int) -> str:
    """Column ``index`` of a [R, K] tensor, as [R, 1]."""
    return ctx.one(
        "Slice", [rois, i64(ctx, "b", [index]), i64(ctx, "e", [index + 1]), i64(ctx, "ax", [1])]
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
        height = ctx.one("Gather", [shape, i64(ctx, "h", 2)])
        width = ctx.one("Gather", [shape, i64(ctx, "w", 3)])
        channels = ctx.one("Slice", [shape, i64(ctx, "b", [1]), i64(ctx, "e", [2])])
        rows = ctx.one(
            "Reshape",
            [
                ctx.one("Transpose", [data], perm=[0, 2, 3, 1]),
                ctx.one("Concat", [i64(ctx, "all", [-1]), channels], axis=0),
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
        batch = ctx.one("Unsqueeze", [batch, i64(ctx, "ax", [2])])
        one = f32(ctx, "one", 1.0)
        y_frac = ctx.one("Unsqueeze", [y_frac, i64(ctx, "ax", [2, 3])])
        x_frac = ctx.one("Unsqueeze", [x_frac, i64(ctx, "ax", [1, 3])])
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
        limit = ctx.one("Cast", [ctx.one("Sub", [size, i64(ctx, "one", 1)])], to=TensorProto.FLOAT)
        clamped = ctx.one("Min", [ctx.one("Max", [coords, f32(ctx, "zero", 0.0)]), limit])
        low = ctx.one("Floor", [clamped])
        frac = ctx.one("Sub", [clamped, low])
        low_i = ctx.one("Cast", [low], to=TensorProto.INT64)
        high_i = ctx.one(
            "Min",
            [
                ctx.one("Add", [low_i, i64(ctx, "one", 1)]),
                ctx.one("Sub", [size, i64(ctx, "one", 1)]),
            ],
        )
        if not axis:
            return low_i, high_i, frac
        ax = i64(ctx, "ax", axis)
        return ctx.one("Unsqueeze", [low_i, ax]), ctx.one("Unsqueeze", [high_i, ax]), frac

    def points(self, ctx: ConversionContext, batch: str, ys: str, xs: str) -> str:
        """Bilinear samples at arbitrary points, ys and xs both [R, A, B], clamped into the
        map; ``batch`` is [R, 1]: [R, A, B, C]."""
        y_lo, y_hi, y_frac = self.neighbours(ctx, ys, self.height, [])
        x_lo, x_hi, x_frac = self.neighbours(ctx, xs, self.width, [])
        batch = ctx.one("Unsqueeze", [batch, i64(ctx, "ax", [2])])
        one = f32(ctx, "one", 1.0)
        y_frac = ctx.one("Unsqueeze", [y_frac, i64(ctx, "ax", [3])])
        x_frac = ctx.one("Unsqueeze", [x_frac, i64(ctx, "ax", [3])])
        y_rest, x_rest = ctx.one("Sub", [one, y_frac]), ctx.one("Sub", [one, x_frac])
        terms = [
            ctx.one("Mul", [ctx.one("Mul", [wy, wx]), self.pixels(ctx, batch, y, x)])
            for y, wy in ((y_lo, y_rest), (y_hi, y_frac))
            for x, wx in ((x_lo, x_rest), (x_hi, x_frac))
        ]
        return ctx.one("Sum", terms)


def sample_axis(
    ctx: ConversionContext, start: str, size: str, bins: int, ratio: int
) -> tuple[str, str, str]:
    """Sample coordinates of one axis: [R, bins * S] where S is the largest per-ROI sample
    count, the mask of samples that exist for their ROI, and the per-ROI count [R, 1]."""
    bin_size = ctx.one("Div", [size, f32(ctx, "bins", float(bins))])
    if ratio > 0:
        count = f32(ctx, "ratio", [[float(ratio)]])
        most = f32(ctx, "most", float(ratio))
    else:
        count = ctx.one("Ceil", [bin_size])
        # At least one sample slot (masked when unused): no ROIs, or only empty ones,
        # must still give well-formed grids.
        counts = ctx.one(
            "Concat", [ctx.one("Flatten", [count], axis=0), f32(ctx, "one", [[1.0]])], axis=1
        )
        most = ctx.reduce("ReduceMax", counts, None, False)
    samples = ctx.one("Range", [f32(ctx, "zero", 0.0), most, f32(ctx, "one", 1.0)])
    samples = ctx.one("Unsqueeze", [samples, i64(ctx, "ax", [0, 1])])  # [1, 1, S]
    cells = f32(ctx, "cells", np.arange(bins, dtype=np.float32).reshape(1, bins, 1))
    r3 = i64(ctx, "ax", [2])
    start3, bin3, count3 = (ctx.one("Unsqueeze", [t, r3]) for t in (start, bin_size, count))
    step = ctx.one("Div", [bin3, count3])
    coords = ctx.one(
        "Add",
        [
            ctx.one("Add", [start3, ctx.one("Mul", [cells, bin3])]),
            ctx.one("Mul", [ctx.one("Add", [samples, f32(ctx, "half", 0.5)]), step]),
        ],
    )
    exists = ctx.one("Less", [samples, count3])
    exists = ctx.one("Expand", [exists, ctx.one("Shape", [coords])])
    coords = ctx.one("Where", [exists, coords, f32(ctx, "zero", 0.0)])
    return (
        ctx.one("Flatten", [coords], axis=1),
        ctx.one("Flatten", [exists], axis=1),
        count,
    )


def inside(ctx: ConversionContext, coords: str, size: str) -> str:
    """Sample points that contribute: within one pixel of the map, [-1, size]."""
    limit = ctx.one("Cast", [size], to=TensorProto.FLOAT)
    return ctx.one(
        "And",
        [
            ctx.one("GreaterOrEqual", [coords, f32(ctx, "m1", -1.0)]),
            ctx.one("LessOrEqual", [coords, limit]),
        ],
    )


def pool_samples(
    ctx: ConversionContext, layer: Layer, values: str, used: str, count: str, mode: str
) -> str:
    """Pools samples [R, PH*S, PW*S, C] (``used`` [R, PH*S, PW*S] marks those that count,
    ``count`` [R, 1] the samples per bin) into [R, C, PH, PW]."""
    attrs = layer.attrs
    used = ctx.one("Unsqueeze", [used, i64(ctx, "ax", [3])])
    values = ctx.one("Where", [used, values, f32(ctx, "zero", 0.0)])
    shape = ctx.one("Shape", [values])

    def dim(index: int) -> str:
        return ctx.one("Slice", [shape, i64(ctx, "b", [index]), i64(ctx, "e", [index + 1])])

    per_h, per_w = attrs["pooled_h"], attrs["pooled_w"]
    grid = ctx.one(
        "Concat",
        [
            dim(0),
            i64(ctx, "ph", [per_h]),
            ctx.one("Div", [dim(1), i64(ctx, "ph", [per_h])]),
            i64(ctx, "pw", [per_w]),
            ctx.one("Div", [dim(2), i64(ctx, "pw", [per_w])]),
            dim(3),
        ],
        axis=0,
    )
    cells = ctx.one("Reshape", [values, grid])  # [R, PH, Sy, PW, Sx, C]
    if mode == "max":  # OpenVINO's maximum starts from 0
        pooled = ctx.one(
            "Max", [ctx.reduce("ReduceMax", cells, [2, 4], False), f32(ctx, "zero", 0.0)]
        )
    else:
        total = ctx.reduce("ReduceSum", cells, [2, 4], False)
        count = ctx.one("Unsqueeze", [count, i64(ctx, "ax", [2, 3])])
        pooled = ctx.one("Div", [total, ctx.one("Max", [count, f32(ctx, "one", 1.0)])])
    return ctx.one("Transpose", [pooled], perm=[0, 3, 1, 2])


def round_half_away(ctx: ConversionContext, value: str) -> str:
    """C's roundf (ONNX's Round rounds halves to even)."""
    magnitude = ctx.one("Floor", [ctx.one("Add", [ctx.one("Abs", [value]), f32(ctx, "h", 0.5)])])
    return ctx.one("Mul", [ctx.one("Sign", [value]), magnitude])


def live_rois(ctx: ConversionContext, rois: str) -> str:
    """[R, 1, 1, 1] mask of the ROIs before the first one whose batch id is -1, where
    OpenVINO stops reading the list (the rest of the output is zeros)."""
    ended = ctx.one("Equal", [column(ctx, rois, 0), f32(ctx, "end", -1.0)])
    seen = ctx.one("CumSum", [ctx.one("Cast", [ended], to=TensorProto.FLOAT), i64(ctx, "a", 0)])
    live = ctx.one("Equal", [seen, f32(ctx, "zero", 0.0)])
    return ctx.one("Unsqueeze", [live, i64(ctx, "ax", [2, 3])])
