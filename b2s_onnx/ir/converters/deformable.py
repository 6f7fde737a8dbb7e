"""DeformableConvolution-1/8, composed for every ONNX opset.

ONNX's DeformConv exists only from opset 19 and pads its bilinear samples one way; the
composition here follows OpenVINO's CPU plugin for both of its ways and runs at any
opset: each kernel tap's sampling point (the regular grid plus the learned offset) is
interpolated from its four neighbours, gathered from a [N, deformable groups, H*W, C/dg]
view of the input, weighted (and modulated by the mask of version 8), and the resulting
columns [N, C*K, OH*OW] are multiplied by the filters group by group.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.convolution import same_pads
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, Ints
from b2s_onnx.ir.converters.schema import Int as IntAttr
from b2s_onnx.ir.reader import Layer

_ATTRS = {
    "strides": Ints(required=True, length=2, minimum=1),
    "pads_begin": Ints(required=True, length=2),
    "pads_end": Ints(required=True, length=2),
    "dilations": Ints(required=True, length=2, minimum=1),
    "auto_pad": Choice(
        allowed=("explicit", "notset", "same_upper", "same_lower", "valid"), default="explicit"
    ),
    "group": IntAttr(default=1, minimum=1),
    "deformable_group": IntAttr(default=1, minimum=1),
}


def _leading_pads(ctx: ConversionContext, layer: Layer, data: str, kernel: list[int]) -> list[int]:
    attrs = layer.attrs
    mode = attrs["auto_pad"]
    if mode in ("explicit", "notset"):
        return list(attrs["pads_begin"])
    if mode == "valid":
        return [0, 0]
    shape = ctx.shape(data)
    if shape is None or any(d is None for d in shape[2:]):
        raise B2SError(
            f"{layer.where()}: attribute auto_pad='{mode}' needs static spatial dimensions"
        )
    begins, _ = same_pads(
        shape[2:], kernel, attrs["strides"], attrs["dilations"], upper=mode == "same_upper"
    )
    return begins


def _corners(
    ctx: ConversionContext, coord: str, size: str, padded: bool
) -> tuple[str, str, str, str, str]:
    """For float sampling coordinates: (low index, high index, low weight, high weight,
    inside) as OpenVINO's CPU plugin computes them, indices clamped into [0, size)."""
    size_f = ctx.one("Cast", [size], to=TensorProto.FLOAT)
    last = ctx.one("Sub", [size, _i64(ctx, "one", 1)])
    zero_f = _f32(ctx, "zero", 0.0)
    low = ctx.one("Floor", [coord])
    if padded:  # truncation toward zero must land in [0, size)
        truncated = ctx.one(
            "Cast", [ctx.one("Cast", [coord], to=TensorProto.INT64)], to=TensorProto.FLOAT
        )
        inside = ctx.one(
            "And",
            [
                ctx.one("Greater", [truncated, _f32(ctx, "m1", -1.0)]),
                ctx.one("Less", [truncated, size_f]),
            ],
        )
        high = ctx.one("Add", [low, _f32(ctx, "one", 1.0)])
    else:
        inside = ctx.one(
            "And",
            [ctx.one("GreaterOrEqual", [coord, zero_f]), ctx.one("Less", [coord, size_f])],
        )
        high = ctx.one(
            "Min", [ctx.one("Ceil", [coord]), ctx.one("Sub", [size_f, _f32(ctx, "one", 1.0)])]
        )
    frac = ctx.one("Sub", [coord, low])
    rest = ctx.one("Sub", [_f32(ctx, "one", 1.0), frac])
    low_weight = ctx.one("Where", [ctx.one("GreaterOrEqual", [low, zero_f]), rest, zero_f])
    high_weight = ctx.one("Where", [ctx.one("Less", [high, size_f]), frac, zero_f])
    # Indices are clamped so that the (zero-weighted) gathers stay in bounds.
    low_i = ctx.one("Cast", [low], to=TensorProto.INT64)
    high_i = ctx.one("Cast", [high], to=TensorProto.INT64)
    clamp = [_i64(ctx, "zero_i", 0), last]
    low_i = ctx.one("Max", [ctx.one("Min", [low_i, clamp[1]]), clamp[0]])
    high_i = ctx.one("Max", [ctx.one("Min", [high_i, clamp[1]]), clamp[0]])
    return low_i, high_i, low_weight, high_weight, inside


def deformable_convolution(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    attrs = layer.attrs
    data, offsets, filters = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    to_float = [
        t if ctx.type_of(t) == TensorProto.FLOAT else ctx.one("Cast", [t], to=TensorProto.FLOAT)
        for t in (data, offsets, filters, *(m for m in [mask] if m is not None))
    ]
    data, offsets, filters = to_float[:3]
    mask = to_float[3] if mask is not None else None
    filter_shape = ctx.shape(inputs[2])
    data_shape = ctx.shape(inputs[0])
    if (
        filter_shape is None
        or len(filter_shape) != 4
        or any(d is None for d in filter_shape)
        or data_shape is None
        or len(data_shape) != 4
        or data_shape[1] is None
    ):
        raise B2SError(
            f"{layer.where()}: needs a 4-D input with static channels and static 4-D filters"
        )
    out_channels, _, kh, kw = (int(d) for d in filter_shape)
    channels = int(data_shape[1])
    groups, dgroups = attrs["group"], attrs["deformable_group"]
    if channels % groups or out_channels % groups or channels % dgroups:
        raise B2SError(
            f"{layer.where()}: attributes group='{groups}' and deformable_group='{dgroups}' "
            f"must divide the {channels} input and {out_channels} output channels"
        )
    taps = kh * kw
    pad_t, pad_l = _leading_pads(ctx, layer, inputs[0], [kh, kw])
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    # Version 8 adds the attribute; version 1 behaves as its default.
    padded = attrs["bilinear_interpolation_pad"] if layer.version == "opset8" else False

    shape = ctx.one("Shape", [data])
    height = ctx.one("Gather", [shape, _i64(ctx, "h", 2)])
    width = ctx.one("Gather", [shape, _i64(ctx, "w", 3)])
    off_shape = ctx.one("Shape", [offsets])
    out_h = ctx.one("Gather", [off_shape, _i64(ctx, "oh", 2)])
    out_w = ctx.one("Gather", [off_shape, _i64(ctx, "ow", 3)])

    def grid(size: str, stride: int, pad: int, axis: list[int]) -> str:
        steps = ctx.one("Range", [_i64(ctx, "z", 0), size, _i64(ctx, "o", 1)])
        start = ctx.one(
            "Sub", [ctx.one("Mul", [steps, _i64(ctx, "s", stride)]), _i64(ctx, "p", pad)]
        )
        return ctx.one(
            "Unsqueeze", [ctx.one("Cast", [start], to=TensorProto.FLOAT), _i64(ctx, "ax", axis)]
        )

    tap_rows = np.repeat(np.arange(kh) * dh, kw).astype(np.float32).reshape(1, 1, taps, 1, 1)
    tap_cols = np.tile(np.arange(kw) * dw, kh).astype(np.float32).reshape(1, 1, taps, 1, 1)
    out_hw = ctx.one("Slice", [off_shape, _i64(ctx, "b", [2]), _i64(ctx, "e", [4])])

    def split_taps(tensor: str, lead: list[int]) -> str:
        target = ctx.one("Concat", [_i64(ctx, "lead", lead), out_hw], axis=0)
        return ctx.one("Reshape", [tensor, target])

    moves = split_taps(offsets, [0, dgroups, taps, 2])
    move_h = ctx.one("Gather", [moves, _i64(ctx, "dy", 0)], axis=3)  # [N, DG, K, OH, OW]
    move_w = ctx.one("Gather", [moves, _i64(ctx, "dx", 1)], axis=3)
    map_h = ctx.one(
        "Add",
        [
            ctx.one("Add", [grid(out_h, sh, pad_t, [0, 1, 2, 4]), _f32(ctx, "taps_h", tap_rows)]),
            move_h,
        ],
    )
    map_w = ctx.one(
        "Add",
        [
            ctx.one("Add", [grid(out_w, sw, pad_l, [0, 1, 2, 3]), _f32(ctx, "taps_w", tap_cols)]),
            move_w,
        ],
    )
    h_lo, h_hi, h_lo_w, h_hi_w, h_in = _corners(ctx, map_h, height, padded)
    w_lo, w_hi, w_lo_w, w_hi_w, w_in = _corners(ctx, map_w, width, padded)
    inside = ctx.one("Cast", [ctx.one("And", [h_in, w_in])], to=TensorProto.FLOAT)
    if mask is not None:
        modulation = split_taps(mask, [0, dgroups, taps])
        inside = ctx.one("Mul", [inside, modulation])

    # Pixels as [N, DG, H*W, C/DG] rows, gathered per sampling point.
    rows = ctx.one("Reshape", [data, _i64(ctx, "rows", [0, dgroups, channels // dgroups, -1])])
    rows = ctx.one("Transpose", [rows], perm=[0, 1, 3, 2])
    flat = _i64(ctx, "flat", [0, 0, -1, 1])
    terms = []
    for h_idx, h_weight in ((h_lo, h_lo_w), (h_hi, h_hi_w)):
        for w_idx, w_weight in ((w_lo, w_lo_w), (w_hi, w_hi_w)):
            index = ctx.one("Add", [ctx.one("Mul", [h_idx, width]), w_idx])
            pixels = ctx.one("GatherND", [rows, ctx.one("Reshape", [index, flat])], batch_dims=2)
            weight = ctx.one("Mul", [ctx.one("Mul", [h_weight, w_weight]), inside])
            terms.append(ctx.one("Mul", [pixels, ctx.one("Reshape", [weight, flat])]))
    sampled = ctx.one("Sum", terms)  # [N, DG, K*OH*OW, C/DG]
    sampled = ctx.one(
        "Reshape", [sampled, _i64(ctx, "taps", [0, dgroups, taps, -1, channels // dgroups])]
    )
    columns = ctx.one("Transpose", [sampled], perm=[0, 1, 4, 2, 3])  # [N, DG, C/DG, K, L]
    per_group = channels // groups * taps
    columns = ctx.one("Reshape", [columns, _i64(ctx, "cols", [0, groups, per_group, -1])])
    weights = ctx.one(
        "Reshape", [filters, _i64(ctx, "w", [groups, out_channels // groups, per_group])]
    )
    product = ctx.one("MatMul", [weights, columns])  # [N, G, Co/G, L]
    target = ctx.one("Concat", [_i64(ctx, "nc", [0, out_channels]), out_hw], axis=0)
    out = ctx.out(layer)
    result = ctx.one("Reshape", [product, target])
    if ctx.type_of(out) == TensorProto.FLOAT:
        ctx.one("Identity", [result], out)
    else:
        ctx.one("Cast", [result], out, to=ctx.type_of(out))


converts("DeformableConvolution", (1,), inputs=(3, 3), attrs=_ATTRS)(deformable_convolution)
converts(
    "DeformableConvolution",
    (8,),
    inputs=(3, 4),
    attrs={**_ATTRS, "bilinear_interpolation_pad": Bool(default=False)},
)(deformable_convolution)
