"""DeformableConvolution: a convolution whose taps sample the input at learned offsets.

Each tap's sampling point is the regular one plus its offset; the input is sampled there
bilinearly with ONNX GridSample (all taps of a deformable group in one call), scaled by
the modulation mask, and the columns are multiplied by the filters per group. Border rule:
with bilinear_interpolation_pad (v8) points within one pixel outside the image blend with
zeros, which is GridSample's zero padding; without it (v1, and v8's default) OpenVINO drops
points outside [0, size) and repeats the last row/column for points beyond size - 1, which
is done by masking those points and clamping the others.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters._constants import float32s, int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import SPATIAL, Bool, Choice, Int, Ints
from b2s_onnx.ir.reader import Layer

ATTRS = {
    "strides": Ints(required=True, minimum=1, length=SPATIAL),
    "pads_begin": Ints(required=True, length=SPATIAL),
    "pads_end": Ints(required=True, length=SPATIAL),
    "dilations": Ints(required=True, minimum=1, length=SPATIAL),
    "auto_pad": Choice(
        allowed=("explicit", "same_upper", "same_lower", "valid"), default="explicit"
    ),
    "group": Int(default=1, minimum=1),
    "deformable_group": Int(default=1, minimum=1),
}


def _pads(layer: Layer, size: list[int], kernel: list[int]) -> tuple[list[int], list[int]]:
    attrs = layer.attrs
    mode = attrs["auto_pad"]
    if mode == "explicit":
        return attrs["pads_begin"], attrs["pads_end"]
    if mode == "valid":
        return [0, 0], [0, 0]
    begin, end = [], []
    for d in (0, 1):
        stride, dilation = attrs["strides"][d], attrs["dilations"][d]
        total = max(
            (-(-size[d] // stride) - 1) * stride + (kernel[d] - 1) * dilation + 1 - size[d], 0
        )
        small = total // 2
        begin.append(small if mode == "same_upper" else total - small)
        end.append(total - begin[-1])
    return begin, end


@converts("DeformableConvolution", (1,), inputs=(3, 3), attrs=ATTRS)
@converts(
    "DeformableConvolution",
    (8,),
    inputs=(3, 4),
    attrs={**ATTRS, "bilinear_interpolation_pad": Bool(default=False)},
)
def deformable_convolution(ctx, layer, inputs):
    data, offsets, filters = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    if ctx.opset < 16:
        raise B2SError(f"{layer.where()}: needs ONNX opset 16 or later for GridSample")
    shape, filter_shape = ctx.shape(data), ctx.shape(filters)
    if (
        shape is None
        or len(shape) != 4
        or None in shape[1:]
        or filter_shape is None
        or None in filter_shape
    ):
        raise B2SError(
            f"{layer.where()}: only 2-D deformable convolutions with static channels, size "
            "and filters convert"
        )
    channels, height, width = shape[1], shape[2], shape[3]
    outputs_count, kernel = filter_shape[0], list(filter_shape[2:])
    attrs = layer.attrs
    groups, deformable_groups = attrs["group"], attrs["deformable_group"]
    if channels % groups or channels % deformable_groups or outputs_count % groups:
        raise B2SError(
            f"{layer.where()}: group={groups} / deformable_group={deformable_groups} must divide "
            f"the {channels} input and {outputs_count} output channels"
        )
    begin, end = _pads(layer, [height, width], kernel)
    strides, dilations = attrs["strides"], attrs["dilations"]
    out_size = [
        ([height, width][d] + begin[d] + end[d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d]
        + 1
        for d in (0, 1)
    ]
    taps = kernel[0] * kernel[1]
    ky, kx, oy, ox = np.meshgrid(
        np.arange(kernel[0]),
        np.arange(kernel[1]),
        np.arange(out_size[0]),
        np.arange(out_size[1]),
        indexing="ij",
    )
    base_y = (oy * strides[0] - begin[0] + ky * dilations[0]).reshape(taps, *out_size)
    base_x = (ox * strides[1] - begin[1] + kx * dilations[1]).reshape(taps, *out_size)
    grouped = ctx.one(
        "Reshape", [offsets, int64s(ctx, "offsets", [0, deformable_groups, taps, 2, *out_size])]
    )
    y = ctx.one(
        "Add",
        [
            ctx.one("Gather", [grouped, int64s(ctx, "y", 0)], axis=3),
            float32s(ctx, "base_y", base_y),
        ],
    )
    x = ctx.one(
        "Add",
        [
            ctx.one("Gather", [grouped, int64s(ctx, "x", 1)], axis=3),
            float32s(ctx, "base_x", base_x),
        ],
    )
    scale = None
    if mask is not None:
        scale = ctx.one(
            "Reshape", [mask, int64s(ctx, "mask", [0, deformable_groups, taps, *out_size])]
        )
    padded_blend = layer.version == "opset8" and attrs["bilinear_interpolation_pad"]
    if not padded_blend:
        zero = float32s(ctx, "zero", 0.0)
        inside = ctx.one(
            "And",
            [
                ctx.one(
                    "And",
                    [
                        ctx.one("GreaterOrEqual", [y, zero]),
                        ctx.one("Less", [y, float32s(ctx, "h", float(height))]),
                    ],
                ),
                ctx.one(
                    "And",
                    [
                        ctx.one("GreaterOrEqual", [x, zero]),
                        ctx.one("Less", [x, float32s(ctx, "w", float(width))]),
                    ],
                ),
            ],
        )
        inside = ctx.one("Cast", [inside], to=TensorProto.FLOAT)
        scale = inside if scale is None else ctx.one("Mul", [scale, inside])
        y = ctx.one("Min", [y, float32s(ctx, "last_row", float(height - 1))])
        x = ctx.one("Min", [x, float32s(ctx, "last_column", float(width - 1))])
    # GridSample's normalised coordinates with align_corners: -1 is pixel 0, 1 the last one.
    ny = ctx.one(
        "Sub",
        [
            ctx.one("Mul", [y, float32s(ctx, "sy", 2.0 / max(height - 1, 1))]),
            float32s(ctx, "one", 1.0),
        ],
    )
    nx = ctx.one(
        "Sub",
        [
            ctx.one("Mul", [x, float32s(ctx, "sx", 2.0 / max(width - 1, 1))]),
            float32s(ctx, "one", 1.0),
        ],
    )
    grid = ctx.one(
        "Concat",
        [
            ctx.one("Unsqueeze", [nx, int64s(ctx, "last", [-1])]),
            ctx.one("Unsqueeze", [ny, int64s(ctx, "last", [-1])]),
        ],
        axis=-1,
    )
    mode = "linear" if ctx.opset >= 20 else "bilinear"
    per_group = channels // deformable_groups
    sampled = []
    for g in range(deformable_groups):
        part = ctx.one(
            "Slice",
            [
                data,
                int64s(ctx, "s", [g * per_group]),
                int64s(ctx, "e", [(g + 1) * per_group]),
                int64s(ctx, "c", [1]),
            ],
        )
        points = ctx.one(
            "Reshape",
            [
                ctx.one("Gather", [grid, int64s(ctx, "g", g)], axis=1),
                int64s(ctx, "points", [0, taps * out_size[0], out_size[1], 2]),
            ],
        )
        values = ctx.one(
            "GridSample", [part, points], align_corners=1, mode=mode, padding_mode="zeros"
        )
        values = ctx.one("Reshape", [values, int64s(ctx, "taps", [0, per_group, taps, *out_size])])
        if scale is not None:
            weight = ctx.one(
                "Unsqueeze",
                [ctx.one("Gather", [scale, int64s(ctx, "g", g)], axis=1), int64s(ctx, "c", [1])],
            )
            values = ctx.one("Mul", [values, weight])
        sampled.append(values)
    columns = sampled[0] if len(sampled) == 1 else ctx.one("Concat", sampled, axis=1)
    columns = ctx.one(
        "Reshape",
        [columns, int64s(ctx, "columns", [0, channels * taps, out_size[0] * out_size[1]])],
    )
    per_conv = channels // groups
    per_out = outputs_count // groups
    results = []
    for g in range(groups):
        cols = ctx.one(
            "Slice",
            [
                columns,
                int64s(ctx, "s", [g * per_conv * taps]),
                int64s(ctx, "e", [(g + 1) * per_conv * taps]),
                int64s(ctx, "c", [1]),
            ],
        )
        weights = ctx.one(
            "Slice",
            [
                filters,
                int64s(ctx, "s", [g * per_out]),
                int64s(ctx, "e", [(g + 1) * per_out]),
                int64s(ctx, "o", [0]),
            ],
        )
        weights = ctx.one("Reshape", [weights, int64s(ctx, "rows", [per_out, per_conv * taps])])
        results.append(ctx.one("MatMul", [weights, cols]))
    product = results[0] if len(results) == 1 else ctx.one("Concat", results, axis=1)
    ctx.one(
        "Reshape", [product, int64s(ctx, "image", [0, outputs_count, *out_size])], ctx.out(layer)
    )
