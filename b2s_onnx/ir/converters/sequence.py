"""Layers that reorder or accumulate along an axis: CumSum, Roll, Reverse, ReverseSequence,
ShuffleChannels."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import INT64_MAX, axis_size, int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, Int
from b2s_onnx.ir.reader import Layer


def _axis(layer: Layer, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise B2SError(f"{layer.where()}: {what} = {axis} is outside rank {rank}")
    return axis + rank if axis < 0 else axis


@converts(
    "CumSum",
    (3,),
    inputs=(1, 2),
    attrs={"exclusive": Bool(default=False), "reverse": Bool(default=False)},
)
def cumsum(ctx, layer, inputs):
    """onnxruntime's CumSum takes f32, f64, i32 and i64. Other integers accumulate in i64
    and are cast back (sums wrap, as in OpenVINO's reference); booleans accumulate as
    OpenVINO's do, saturating at true: a running OR, ``cumsum(x as i64) > 0``."""
    axis = ctx.int64(inputs[1]) if len(inputs) > 1 else int64s(ctx, "axis", 0)
    attrs = {"exclusive": int(layer.attrs["exclusive"]), "reverse": int(layer.attrs["reverse"])}
    elem = ctx.type_of(inputs[0])
    if elem in _CUMSUM_TYPES:
        ctx.one("CumSum", [inputs[0], axis], ctx.out(layer), **attrs)
        return
    wide = ctx.one("Cast", [inputs[0]], to=TensorProto.INT64)
    total = ctx.one("CumSum", [wide, axis], **attrs)
    if elem == TensorProto.BOOL:
        ctx.one("Greater", [total, int64s(ctx, "zero", 0)], ctx.out(layer))
    else:
        ctx.one("Cast", [total], ctx.out(layer), to=elem)


#: The element types onnxruntime's CumSum kernel takes.
_CUMSUM_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64)


def _roll_axis(ctx: ConversionContext, data: str, axis: int, shift: str, output: str | None) -> str:
    """out = concat(x[dim - k:], x[:dim - k]) along ``axis``, k = shift mod dim."""
    size = axis_size(ctx, data, axis)
    split = ctx.one("Sub", [size, ctx.one("Mod", [shift, size])])
    where = int64s(ctx, "axis", [axis])
    tail = ctx.one("Slice", [data, split, int64s(ctx, "end", [INT64_MAX]), where])
    head = ctx.one("Slice", [data, int64s(ctx, "zero", [0]), split, where])
    return ctx.one("Concat", [tail, head], output, axis=axis)


@converts("Roll", (7,), inputs=(3, 3), attrs={})
def roll(ctx, layer, inputs):
    """Each (shift, axis) pair rolls in turn; a scalar shift applies to every axis. Shifts
    may be computed at run time; the axes must be constants."""
    data, shift, axes_input = inputs
    rank = ctx.rank(layer, data)
    axes = [
        _axis(layer, int(a), rank, "input 'axes'")
        for a in ctx.require_value(layer, axes_input, "the axes input").reshape(-1)
    ]
    shifts = ctx.int64(shift)
    count = ctx.value(shift)
    if count is not None and count.size not in (1, len(axes)):
        raise B2SError(
            f"{layer.where()}: input 'shift' has {count.size} values for {len(axes)} axes"
        )
    shifts = ctx.one(
        "Expand",
        [
            ctx.one("Reshape", [shifts, int64s(ctx, "flat", [-1])]),
            int64s(ctx, "count", [len(axes)]),
        ],
    )
    current = data
    for position, axis in enumerate(axes):
        amount = ctx.one(
            "Slice", [shifts, int64s(ctx, "at", [position]), int64s(ctx, "next", [position + 1])]
        )
        last = position == len(axes) - 1
        current = _roll_axis(ctx, current, axis, amount, ctx.out(layer) if last else None)
    if not axes:
        ctx.one("Identity", [data], ctx.out(layer))


@converts(
    "Reverse", (1,), inputs=(2, 2), attrs={"mode": Choice(allowed=("index", "mask"), required=True)}
)
def reverse(ctx, layer, inputs):
    data, axes_input = inputs
    rank = ctx.rank(layer, data)
    values = ctx.require_value(layer, axes_input, "the axes input").reshape(-1)
    if layer.attrs["mode"] == "mask":
        if values.size != rank:
            raise B2SError(
                f"{layer.where()}: mode='mask' needs {rank} mask values, got {values.size}"
            )
        axes = [i for i, flag in enumerate(values) if flag]
    else:
        axes = sorted({_axis(layer, int(a), rank, "input 'axes'") for a in values})
    if not axes:
        ctx.one("Identity", [data], ctx.out(layer))
        return
    ctx.one(
        "Slice",
        [
            data,
            int64s(ctx, "starts", [-1] * len(axes)),
            int64s(ctx, "ends", [-INT64_MAX - 1] * len(axes)),
            int64s(ctx, "axes", axes),
            int64s(ctx, "steps", [-1] * len(axes)),
        ],
        ctx.out(layer),
    )


@converts(
    "ReverseSequence",
    (1,),
    inputs=(2, 2),
    attrs={"batch_axis": Int(default=0), "seq_axis": Int(default=1)},
)
def reverse_sequence(ctx, layer, inputs):
    """ONNX ReverseSequence takes only batch/time axes 0 and 1: other axes are transposed
    there and back."""
    data, lengths = inputs
    rank = ctx.rank(layer, data)
    batch = _axis(layer, layer.attrs["batch_axis"], rank, "attribute batch_axis")
    sequence = _axis(layer, layer.attrs["seq_axis"], rank, "attribute seq_axis")
    if batch == sequence:
        raise B2SError(f"{layer.where()}: attributes batch_axis and seq_axis name the same axis")
    order = [batch, sequence, *(a for a in range(rank) if a not in (batch, sequence))]
    moved = data if order == list(range(rank)) else ctx.one("Transpose", [data], perm=order)
    lengths64 = ctx.int64(lengths)
    if order == list(range(rank)):
        ctx.one("ReverseSequence", [moved, lengths64], ctx.out(layer), batch_axis=0, time_axis=1)
        return
    reversed_ = ctx.one("ReverseSequence", [moved, lengths64], batch_axis=0, time_axis=1)
    ctx.one("Transpose", [reversed_], ctx.out(layer), perm=[int(i) for i in np.argsort(order)])


@converts(
    "ShuffleChannels",
    (1,),
    inputs=(1, 1),
    attrs={"axis": Int(default=1), "group": Int(default=1, minimum=1)},
)
def shuffle_channels(ctx, layer, inputs):
    """Split ``axis`` into (group, rest), swap the two, merge them back."""
    data = inputs[0]
    rank = ctx.rank(layer, data)
    axis = _axis(layer, layer.attrs["axis"], rank, "attribute axis")
    group = layer.attrs["group"]
    shape = ctx.shape(data)
    if shape is not None and shape[axis] is not None and shape[axis] % group:
        raise B2SError(
            f"{layer.where()}: attribute group={group} does not divide dimension {axis} "
            f"({shape[axis]})"
        )
    full = ctx.one("Shape", [data])
    before = ctx.one("Slice", [full, int64s(ctx, "zero", [0]), int64s(ctx, "axis", [axis])])
    after = ctx.one(
        "Slice", [full, int64s(ctx, "next", [axis + 1]), int64s(ctx, "end", [INT64_MAX])]
    )
    split = ctx.one("Concat", [before, int64s(ctx, "groups", [group, -1]), after], axis=0)
    grouped = ctx.one("Reshape", [data, split])
    perm = list(range(rank + 1))
    perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
    swapped = ctx.one("Transpose", [grouped], perm=perm)
    ctx.one("Reshape", [swapped, full], ctx.out(layer))
