"""Resampling layers: GridSample-9, ExtractImagePatches-3, AdaptiveAvgPool-8 and
AdaptiveMaxPool-8.

Adaptive pooling bins overlap and differ in size (``floor(i * L / O)`` to
``ceil((i + 1) * L / O)``), which no ONNX pooling expresses; with static sizes the bins are
known here, so every bin's elements are gathered at once (short bins padded with a copy of
their first element) and reduced, which also gives max pooling's argmax as an input index.
"""

from __future__ import annotations

import itertools

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import axis_size
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.convolution import run_time_same_geometry
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, ElementType, Ints
from b2s_onnx.ir.reader import Layer


def _typed(ctx: ConversionContext, hint: str, value, like: str) -> str:
    """A float constant in the element type of ``like`` (CastLike needs opset 15)."""
    return ctx.one("Cast", [ctx.const(hint, np.asarray(value, np.float32))], to=ctx.type_of(like))


def _static_spatial(ctx: ConversionContext, layer: Layer, data: str) -> list[int]:
    shape = ctx.shape(data)
    if shape is None or len(shape) < 3 or any(d is None for d in shape[2:]):
        raise B2SError(
            f"{layer.where()}: input 'data' needs static spatial dimensions to convert this layer"
        )
    return [int(d) for d in shape[2:]]


# -- GridSample -----------------------------------------------------------------------------

_GRID_MODES = {
    16: {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest"},
    20: {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"},
}


@converts(
    "GridSample",
    (9,),
    inputs=(2, 2),
    attrs={
        "align_corners": Bool(default=False),
        "mode": Choice(allowed=("bilinear", "bicubic", "nearest"), default="bilinear"),
        "padding_mode": Choice(allowed=("zeros", "border", "reflection"), default="zeros"),
    },
)
def grid_sample(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    if ctx.opset < 16:
        raise B2SError(
            f"{layer.where()}: GridSample needs ONNX opset 16 or later (converting at {ctx.opset})"
        )
    names = _GRID_MODES[20 if ctx.opset >= 20 else 16]
    data, grid = inputs
    out = ctx.out(layer)
    if ctx.type_of(grid) != ctx.type_of(data):
        grid = ctx.one("Cast", [grid], to=ctx.type_of(data))
    ctx.one(
        "GridSample",
        [data, grid],
        out,
        align_corners=int(layer.attrs["align_corners"]),
        mode=names[layer.attrs["mode"]],
        padding_mode=layer.attrs["padding_mode"],
    )


# -- ExtractImagePatches --------------------------------------------------------------------


def _patch_geometry(
    size: int, kernel: int, stride: int, rate: int, auto_pad: str
) -> tuple[int, int, int]:
    """(output size, padding before, padding after) of one axis, as TensorFlow computes."""
    extent = (kernel - 1) * rate + 1
    if auto_pad == "valid":
        return max((size - extent) // stride + 1, 0), 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + extent - size, 0)
    before = total // 2 if auto_pad == "same_upper" else total - total // 2
    return out, before, total - before


@converts(
    "ExtractImagePatches",
    (3,),
    inputs=(1, 1),
    attrs={
        "sizes": Ints(required=True, length=2, minimum=1),
        "strides": Ints(required=True, length=2, minimum=1),
        "rates": Ints(required=True, length=2, minimum=1),
        "auto_pad": Choice(allowed=("valid", "same_upper", "same_lower"), required=True),
    },
)
def extract_image_patches(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """Each kernel offset (row, column) is one strided slice of the padded image; their
    concatenation orders the output channels as [row, column, input channel]. With H or W
    known only at run time the same geometry is computed from the data's shape."""
    data = inputs[0]
    attrs = layer.attrs
    (kh, kw), (sh, sw), (rh, rw) = attrs["sizes"], attrs["strides"], attrs["rates"]
    shape = ctx.shape(data)
    if shape is not None and len(shape) == 4 and None in shape[2:]:
        _patches_at_run_time(ctx, layer, data)
        return
    height, width = _static_spatial(ctx, layer, data)
    out_h, top, bottom = _patch_geometry(height, kh, sh, rh, attrs["auto_pad"])
    out_w, left, right = _patch_geometry(width, kw, sw, rw, attrs["auto_pad"])
    if top or bottom or left or right:
        zero = _typed(ctx, "zero", 0.0, data)
        data = ctx.one(
            "Pad", [data, _i64(ctx, "pads", [0, 0, top, left, 0, 0, bottom, right]), zero]
        )
    axes, steps = _i64(ctx, "axes", [2, 3]), _i64(ctx, "steps", [sh, sw])
    patches = []
    for row, col in itertools.product(range(kh), range(kw)):
        begin = [row * rh, col * rw]
        end = [begin[0] + (out_h - 1) * sh + 1, begin[1] + (out_w - 1) * sw + 1]
        patches.append(
            ctx.one("Slice", [data, _i64(ctx, "b", begin), _i64(ctx, "e", end), axes, steps])
        )
    ctx.one("Concat", patches, ctx.out(layer), axis=1)


def _patches_at_run_time(ctx: ConversionContext, layer: Layer, data: str) -> None:
    """:func:`_patch_geometry` on sizes read at run time, then the same strided slices."""
    attrs = layer.attrs
    (kh, kw), (sh, sw), (rh, rw) = attrs["sizes"], attrs["strides"], attrs["rates"]
    sizes = ctx.one("Slice", [ctx.one("Shape", [data]), _i64(ctx, "s", [2]), _i64(ctx, "e", [4])])
    reach = [(kh - 1) * rh + 1, (kw - 1) * rw + 1]
    stride = _i64(ctx, "stride", [sh, sw])
    zero, one = _i64(ctx, "zero", 0), _i64(ctx, "one", 1)
    if attrs["auto_pad"] == "valid":
        extent = _i64(ctx, "extent", reach)
        fits = ctx.one("Div", [ctx.one("Sub", [sizes, extent]), stride])
        counts = ctx.one("Add", [fits, one])
        counts = ctx.one("Where", [ctx.one("Less", [sizes, extent]), zero, counts])
    else:
        upper = attrs["auto_pad"] == "same_upper"
        counts, before, after = run_time_same_geometry(ctx, sizes, [sh, sw], reach, upper=upper)
        pads = ctx.one(
            "Concat", [_i64(ctx, "none", [0, 0]), before, _i64(ctx, "none", [0, 0]), after], axis=0
        )
        data = ctx.one("Pad", [data, pads, _typed(ctx, "zero_value", 0.0, data)])
    span = ctx.one("Add", [ctx.one("Mul", [ctx.one("Sub", [counts, one]), stride]), one])
    axes, steps = _i64(ctx, "axes", [2, 3]), _i64(ctx, "steps", [sh, sw])
    patches = []
    for row, col in itertools.product(range(kh), range(kw)):
        begin = _i64(ctx, "b", [row * rh, col * rw])
        end = ctx.one("Add", [begin, span])
        patches.append(ctx.one("Slice", [data, begin, end, axes, steps]))
    ctx.one("Concat", patches, ctx.out(layer), axis=1)


# -- Adaptive pooling -----------------------------------------------------------------------


def _bin_table(sizes: list[int], outputs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Flat input index of every element of every bin, [*outputs, M] (M: the largest bin;
    padding repeats the bin's first element), and the mask of real elements."""
    per_axis = []
    for length, count in zip(sizes, outputs, strict=True):
        starts = [(i * length) // count for i in range(count)]
        ends = [-(-((i + 1) * length) // count) for i in range(count)]
        per_axis.append([list(range(s, e)) for s, e in zip(starts, ends, strict=True)])
    strides = [int(np.prod(sizes[i + 1 :])) for i in range(len(sizes))]
    most = int(np.prod([max(len(b) for b in bins) for bins in per_axis]))
    table = np.zeros((*outputs, most), np.int64)
    real = np.zeros((*outputs, most), bool)
    for cell in itertools.product(*(range(o) for o in outputs)):
        members = [
            sum(i * s for i, s in zip(point, strides, strict=True))
            for point in itertools.product(*(per_axis[a][c] for a, c in enumerate(cell)))
        ]
        table[cell] = members + [members[0]] * (most - len(members))
        real[cell][: len(members)] = True
    return table, real


def _gathered_bins(ctx: ConversionContext, layer: Layer, inputs: list[str]):
    data = inputs[0]
    sizes = _static_spatial(ctx, layer, data)
    wanted = ctx.require_value(layer, inputs[1], "input 'output_shape'").reshape(-1)
    outputs = [int(v) for v in wanted]
    if len(outputs) != len(sizes) or any(v < 1 for v in outputs):
        raise B2SError(
            f"{layer.where()}: input 'output_shape' {outputs} needs one positive size per "
            f"spatial axis ({len(sizes)})"
        )
    table, real = _bin_table(sizes, outputs)
    flat = ctx.one("Reshape", [data, _i64(ctx, "flat", [0, 0, -1])])
    return ctx.one("Gather", [flat, ctx.const("bins", table)], axis=2), table, real


def _bins_on_dynamic_sizes(
    ctx: ConversionContext, layer: Layer, inputs: list[str], reduce: str
) -> bool:
    """Adaptive pooling on spatial sizes known only at run time, for a constant number of
    bins: the box is separable, so each axis in turn is cut into its bins (``floor(i L /
    O)`` to ``ceil((i + 1) L / O)``, computed from the run-time size L) and each bin
    reduced (a mean of means over a box is the box's mean). Writes the layer's output and
    returns True, or returns False when the sizes are static (the gathered bins then)."""
    shape = ctx.shape(inputs[0])
    if shape is None or len(shape) < 3 or all(d is not None for d in shape[2:]):
        return False
    wanted = ctx.require_value(layer, inputs[1], "input 'output_shape'").reshape(-1)
    outputs = [int(v) for v in wanted]
    if len(outputs) != len(shape) - 2 or any(v < 1 for v in outputs):
        raise B2SError(
            f"{layer.where()}: input 'output_shape' {outputs} needs one positive size per "
            f"spatial axis ({len(shape) - 2})"
        )
    current = inputs[0]
    for position, count in enumerate(outputs):
        axis = 2 + position
        size = axis_size(ctx, current, axis)
        bins = []
        for i in range(count):
            start = ctx.one(
                "Div", [ctx.one("Mul", [size, _i64(ctx, "i", [i])]), _i64(ctx, "o", [count])]
            )
            reach = ctx.one("Mul", [size, _i64(ctx, "next", [i + 1])])
            end = ctx.one(
                "Div",
                [
                    ctx.one("Add", [reach, _i64(ctx, "round_up", [count - 1])]),
                    _i64(ctx, "o", [count]),
                ],
            )
            part = ctx.one("Slice", [current, start, end, _i64(ctx, "axes", [axis])])
            bins.append(ctx.reduce(reduce, part, [axis], True))
        last = position == len(outputs) - 1
        output = ctx.out(layer) if last else None
        current = (
            ctx.one("Concat", bins, output, axis=axis)
            if count > 1
            else ctx.one("Identity", bins, output)
        )
    return True


def _global_on_dynamic_sizes(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> bool:
    """Whether the pooling is global (one bin per axis) over spatial sizes known only at
    run time: PyTorch's AdaptiveAvgPool2d(1) in a model converted with dynamic shapes."""
    shape = ctx.shape(inputs[0])
    if shape is None or len(shape) < 3 or all(d is not None for d in shape[2:]):
        return False
    wanted = ctx.value(inputs[1])
    return wanted is not None and wanted.size == len(shape) - 2 and bool((wanted == 1).all())


@converts("AdaptiveAvgPool", (8,), inputs=(2, 2), attrs={})
def adaptive_avg_pool(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    if _global_on_dynamic_sizes(ctx, layer, inputs):
        ctx.one("GlobalAveragePool", inputs[:1], ctx.out(layer))
        return
    if _bins_on_dynamic_sizes(ctx, layer, inputs, "ReduceMean"):
        return
    bins, _, real = _gathered_bins(ctx, layer, inputs)
    zero = _typed(ctx, "zero", 0.0, bins)
    members = ctx.one("Where", [ctx.const("real", real), bins, zero])
    total = ctx.reduce("ReduceSum", members, [-1], False)
    counts = real.sum(axis=-1).astype(np.float32)
    ctx.one("Div", [total, _typed(ctx, "counts", counts, bins)], ctx.out(layer))


@converts(
    "AdaptiveMaxPool",
    (8,),
    inputs=(2, 2),
    attrs={"index_element_type": ElementType(allowed=("i32", "i64"), default="i64")},
)
def adaptive_max_pool(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """Values and the flat spatial index of each maximum (the first one in row-major order
    on ties)."""
    if _global_on_dynamic_sizes(ctx, layer, inputs):
        ctx.one("GlobalMaxPool", inputs[:1], ctx.out(layer, 0))
        if len(layer.outputs) > 1:
            flat = ctx.one("Reshape", [inputs[0], _i64(ctx, "flat", [0, 0, -1])])
            first = ctx.one("ArgMax", [flat], axis=2, keepdims=1, select_last_index=0)
            shape = ctx.one("Shape", [ctx.out(layer, 0)])
            index = ctx.one("Reshape", [first, shape])
            if layer.attrs["index_element_type"] == "i64":
                ctx.one("Identity", [index], ctx.out(layer, 1))
            else:
                ctx.one("Cast", [index], ctx.out(layer, 1), to=TensorProto.INT32)
        return
    values_only = len(layer.outputs) < 2 or not ctx.is_read(layer, 1)
    if values_only and _bins_on_dynamic_sizes(ctx, layer, inputs, "ReduceMax"):
        return
    bins, table, _ = _gathered_bins(ctx, layer, inputs)
    ctx.reduce("ReduceMax", bins, [-1], False, ctx.out(layer, 0))
    if len(layer.outputs) < 2:
        return
    position = ctx.one("ArgMax", [bins], axis=-1, keepdims=1, select_last_index=0)
    full = ctx.one("Expand", [ctx.const("table", table), ctx.one("Shape", [bins])])
    index = ctx.one(
        "Squeeze", [ctx.one("GatherElements", [full, position], axis=-1), _i64(ctx, "ax", [-1])]
    )
    if layer.attrs["index_element_type"] == "i64":
        ctx.one("Identity", [index], ctx.out(layer, 1))
    else:
        ctx.one("Cast", [index], ctx.out(layer, 1), to=TensorProto.INT32)
