"""MaxPool-1/8/14 (with the indices output) and AvgPool-1/14/16, in every rounding type.

onnxruntime's ``ceil_mode`` is OpenVINO's ``ceil_torch``: a window that would start in the
end padding is dropped. OpenVINO's plain ``ceil`` keeps that window, which then covers
padding only (or nothing); OpenVINO gives it the lowest float (MaxPool), 0 (AvgPool
counting padding) or 0 over a count that may be 0 or negative (AvgPool excluding it: NaN or
-0, see ``_empty_window_divisors``), and the index of its plane's first element. Those
windows are appended here with a Pad, so every rounding type matches, on sizes known only
at run time too."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import axis_size
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import SPATIAL, Bool, Choice, ElementType, Int, Ints
from b2s_onnx.ir.reader import Layer

_AUTO_PAD = {"same_upper": "SAME_UPPER", "same_lower": "SAME_LOWER"}
_POOL = {
    "strides": Ints(required=True, length=SPATIAL, minimum=1),
    "pads_begin": Ints(required=True, length=SPATIAL, minimum=0),
    "pads_end": Ints(required=True, length=SPATIAL, minimum=0),
    "kernel": Ints(required=True, length=SPATIAL, minimum=1),
    "auto_pad": Choice(
        allowed=("explicit", "same_upper", "same_lower", "valid", "notset"), default="explicit"
    ),
}
_ROUNDING_1 = Choice(allowed=("floor", "ceil"), default="floor")
_ROUNDING_14 = Choice(allowed=("floor", "ceil", "ceil_torch"), default="floor")
_MAX_POOL_8 = {
    **_POOL,
    "dilations": Ints(length=SPATIAL, minimum=1),
    "index_element_type": ElementType(allowed=("i32", "i64"), default="i64"),
    "axis": Int(default=0),
}


#: A window count per spatial axis: OpenVINO's 'ceil' count and its 'ceil_torch' count, or
#: None where the axis is only known at run time.
Counts = list[tuple[int, int] | None]
#: Windows to append per spatial axis: a number, or an int64 [1] tensor computed at run time.
Extra = list[int | str]


def _window_counts(ctx: ConversionContext, data: str, attrs: dict, dilations: list[int]) -> Counts:
    """Per spatial axis, (OpenVINO 'ceil' count, 'ceil_torch' count) of windows, or None for
    an axis whose size is only known at run time."""
    shape = ctx.shape(data)
    spatial = len(dilations)
    counts: Counts = []
    for axis in range(spatial):
        stride = attrs["strides"][axis]
        begin, end = attrs["pads"][axis], attrs["pads"][spatial + axis]
        reach = _reach(attrs, dilations, axis)
        dim = None if shape is None else shape[axis + 2]
        if dim is None:
            counts.append(None)
            continue
        count = math.ceil((dim + begin + end - reach) / stride) + 1
        counts.append((count, count - 1 if (count - 1) * stride >= dim + begin else count))
    return counts


def _ceil_count_at_run_time(
    ctx: ConversionContext, data: str, attrs: dict, dilations: list[int], axis: int
) -> tuple[str, str]:
    """OpenVINO's 'ceil' window count along a spatial axis known only at run time, and
    whether its last window starts in the end padding (then 'ceil_torch' drops it), as int64
    [1] tensors (the second 0 or 1)."""
    spatial = len(dilations)
    stride = attrs["strides"][axis]
    begin, end = attrs["pads"][axis], attrs["pads"][spatial + axis]
    reach = _reach(attrs, dilations, axis)
    dim = axis_size(ctx, data, axis + 2)
    # ceil(room / stride) + 1 for a room >= 0 (a smaller one fails in both runtimes)
    room = ctx.one("Add", [dim, _i64(ctx, "room", [begin + end - reach + stride - 1])])
    count = ctx.one(
        "Add", [ctx.one("Div", [room, _i64(ctx, "stride", [stride])]), _i64(ctx, "one", [1])]
    )
    last_start = ctx.one(
        "Mul", [ctx.one("Sub", [count, _i64(ctx, "one", [1])]), _i64(ctx, "stride", [stride])]
    )
    in_padding = ctx.one(
        "Not", [ctx.one("Less", [last_start, ctx.one("Add", [dim, _i64(ctx, "begin", [begin])])])]
    )
    return count, ctx.one("Cast", [in_padding], to=TensorProto.INT64)


def _reach(attrs: dict, dilations: list[int], axis: int) -> int:
    """How many input positions a window spans along a spatial axis."""
    return (attrs["kernel_shape"][axis] - 1) * dilations[axis] + 1


def _may_start_in_end_padding(attrs: dict, dilations: list[int], axis: int) -> bool:
    """Whether some size of the axis puts a 'ceil' window's start in the end padding."""
    spatial = len(dilations)
    return attrs["pads"][spatial + axis] + attrs["strides"][axis] > _reach(attrs, dilations, axis)


def _same_pads(
    ctx: ConversionContext, layer: Layer, data: str, dilations: list[int], upper: bool
) -> list[int]:
    """SAME padding as OpenVINO computes it: ``ceil(size / stride)`` windows, the odd
    padding element at the end (same_upper) or the beginning (same_lower)."""
    shape = ctx.shape(data)
    if shape is None or any(d is None for d in shape[2:]):
        raise B2SError(f"{layer.where()}: SAME padding with dilations needs static spatial dims")
    begins, ends = [], []
    for axis, (kernel, stride, dilation) in enumerate(
        zip(layer.attrs["kernel"], layer.attrs["strides"], dilations, strict=True)
    ):
        size = shape[2 + axis]
        windows = -(-size // stride)
        total = max(0, (windows - 1) * stride + (kernel - 1) * dilation + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins + ends


def _pool_attrs(ctx: ConversionContext, layer: Layer, data: str, dilations: list[int]):
    """ONNX pooling attributes, and per spatial axis the end windows to append.

    onnx's shape inference counts ceil windows as OpenVINO's 'ceil' does, onnxruntime as
    'ceil_torch' does; where the two differ, floor mode with the same pads yields exactly the
    'ceil_torch' windows (the dropped one starts in the end padding, so the others end
    inside it), and for 'ceil' the dropped window is appended (see the module doc)."""
    values = layer.attrs
    spatial = len(values["kernel"])
    attrs = {"kernel_shape": values["kernel"], "strides": values["strides"]}
    none = [0] * spatial
    auto_pad = values["auto_pad"]
    sparse = [
        stride > _reach(attrs, dilations, axis) for axis, stride in enumerate(values["strides"])
    ]
    if auto_pad in _AUTO_PAD and any(sparse):
        # A stride past the window makes SAME's total padding negative: OpenVINO clamps it
        # to 0 and then counts windows by rounding_type (a ceil window may start past the
        # data); onnxruntime refuses negative pads at run time. The explicit pads instead,
        # through the rounding below.
        shape = ctx.shape(data)
        if shape is None or any(d is None for d in shape[2:]):
            raise B2SError(
                f"{layer.where()}: SAME padding with a stride larger than the window "
                f"(strides {values['strides']}, kernel {values['kernel']}) needs static "
                "spatial dims"
            )
        attrs["pads"] = _same_pads(ctx, layer, data, dilations, upper=auto_pad == "same_upper")
    elif auto_pad in _AUTO_PAD and any(d != 1 for d in dilations):
        # onnxruntime refuses SAME auto-padding with dilations: the explicit pads instead.
        attrs["pads"] = _same_pads(ctx, layer, data, dilations, upper=auto_pad == "same_upper")
        return attrs, none
    elif auto_pad in _AUTO_PAD:
        attrs["auto_pad"] = _AUTO_PAD[auto_pad]
        return attrs, none
    elif auto_pad == "valid":
        attrs["pads"] = [0] * (2 * spatial)
    else:
        attrs["pads"] = values["pads_begin"] + values["pads_end"]
    for axis, size in enumerate(values["kernel"]):
        if max(attrs["pads"][axis], attrs["pads"][spatial + axis]) >= size:
            raise B2SError(
                f"{layer.where()}: pads on spatial axis {axis} must be smaller than the kernel "
                f"({size}) in ONNX, got pads_begin/pads_end {values['pads_begin']}/"
                f"{values['pads_end']}"
            )
    rounding = values["rounding_type"]
    if rounding == "floor":
        return attrs, none
    counts = _window_counts(ctx, data, attrs, dilations)
    if all(count is not None for count in counts):
        if all(ceil == torch for ceil, torch in counts):
            attrs["ceil_mode"] = 1
            return attrs, none
        attrs["pads"] = _floor_pads(ctx, layer, data, attrs, dilations, counts)
        if rounding == "ceil_torch":
            return attrs, none
        return attrs, [ceil - torch for ceil, torch in counts]
    # Some axis is known only at run time: onnxruntime's ceil_mode counts 'ceil_torch'
    # windows at any size, but onnx's shape inference counts 'ceil' ones, so a static axis
    # where the two differ cannot share the node.
    for axis, count in enumerate(counts):
        if count is not None and count[0] != count[1]:
            raise B2SError(
                f"{layer.where()}: a rounding_type of {rounding} with spatial axis {axis} "
                f"static (its last window starts in the end padding) and another one dynamic "
                "is not supported; make every spatial axis static or dynamic"
            )
    attrs["ceil_mode"] = 1
    if rounding == "ceil_torch":
        return attrs, none
    extra: Extra = [
        _ceil_count_at_run_time(ctx, data, attrs, dilations, axis)[1]
        if count is None and _may_start_in_end_padding(attrs, dilations, axis)
        else 0
        for axis, count in enumerate(counts)
    ]
    return attrs, extra


def _floor_pads(
    ctx: ConversionContext,
    layer: Layer,
    data: str,
    attrs: dict,
    dilations: list[int],
    counts: Counts,
) -> list[int]:
    """Pads under which floor mode counts the 'ceil_torch' windows on every static axis.

    Where the last 'ceil' window starts in the end padding floor mode already drops exactly
    it; on another axis of the same node ceil mode may keep a partial window that floor mode
    drops too (30 wide, kernel 3, stride 2: 15 windows, floor 14). There the end padding is
    stretched to that window's end: onnxruntime's max ignores padding and its average
    excluding padding does not count it; counting padding, ``_divide_by_whole_kernel`` sets
    its own pads, and with no padding at all the average excludes it (``_unpadded``).
    Within one ceil window of the data the stretched pad stays below the window's reach, so
    it is below the kernel unless dilated."""
    shape = ctx.shape(data)
    spatial = len(dilations)
    pads = list(attrs["pads"])
    for axis, count in enumerate(counts):
        if count is None:
            continue
        stride, begin = attrs["strides"][axis], pads[axis]
        reach = _reach(attrs, dilations, axis)
        needed = (count[1] - 1) * stride + reach - shape[axis + 2] - begin
        if needed <= pads[spatial + axis]:
            continue
        if needed >= attrs["kernel_shape"][axis]:
            raise B2SError(
                f"{layer.where()}: a rounding_type of {layer.attrs['rounding_type']} keeps a "
                f"partial last window on spatial axis {axis}, which ONNX floor mode reaches only "
                f"with an end pad of {needed}, not smaller than the kernel "
                f"({attrs['kernel_shape'][axis]}) as onnxruntime requires"
            )
        pads[spatial + axis] = needed
    return pads


def _end_pads(ctx: ConversionContext, rank: int, extra: Extra) -> str:
    """Pad's pads for ``extra`` elements at the end of each spatial axis of a rank-``rank``
    tensor: a constant, or a Concat where some count is only known at run time."""
    if all(isinstance(count, int) for count in extra):
        return _i64(ctx, "pads", [0] * rank + [0, 0, *extra])
    parts = [_i64(ctx, "pads", [0] * (rank + 2))]
    parts += [_i64(ctx, "pad", [count]) if isinstance(count, int) else count for count in extra]
    return ctx.one("Concat", parts, axis=0, hint="pads")


def _append_windows(ctx: ConversionContext, tensor: str, extra: Extra, fill: str) -> str:
    pads = _end_pads(ctx, 2 + len(extra), extra)
    return ctx.one("Pad", [tensor, pads, fill], mode="constant")


def _has_extra(extra: Extra) -> bool:
    return any(not isinstance(count, int) or count for count in extra)


def _lowest(ctx: ConversionContext, like: str) -> str:
    dtype = NUMPY_OF_ONNX.get(ctx.type_of(like), np.float32)
    info = np.finfo(dtype) if np.issubdtype(dtype, np.floating) else np.iinfo(dtype)
    return ctx.const("lowest", np.asarray(info.min, dtype))


@converts("MaxPool", (1,), inputs=(1, 1), attrs={**_POOL, "rounding_type": _ROUNDING_1})
def max_pool_1(ctx, layer, inputs):
    attrs, extra = _pool_attrs(ctx, layer, inputs[0], [1] * len(layer.attrs["kernel"]))
    if not _has_extra(extra):
        ctx.one("MaxPool", inputs, ctx.out(layer), **attrs)
        return
    pooled = ctx.one("MaxPool", inputs, **attrs)
    ctx.one(
        "Identity", [_append_windows(ctx, pooled, extra, _lowest(ctx, inputs[0]))], ctx.out(layer)
    )


@converts("MaxPool", (8,), inputs=(1, 1), attrs={**_MAX_POOL_8, "rounding_type": _ROUNDING_1})
def max_pool_8(ctx, layer, inputs):
    _max_pool_with_indices(ctx, layer, inputs[0])


@converts("MaxPool", (14,), inputs=(1, 1), attrs={**_MAX_POOL_8, "rounding_type": _ROUNDING_14})
def max_pool_14(ctx, layer, inputs):
    _max_pool_with_indices(ctx, layer, inputs[0])


def _max_pool_with_indices(ctx: ConversionContext, layer: Layer, data: str) -> None:
    """Indices count from ``axis``: ONNX's (flattened over the whole tensor, row-major) taken
    modulo the size of the dimensions from ``axis`` on."""
    rank = ctx.rank(layer, data)
    spatial = rank - 2
    dilations = layer.attrs["dilations"] or [1] * spatial
    attrs, extra = _pool_attrs(ctx, layer, data, dilations)
    if any(d != 1 for d in dilations):
        attrs["dilations"] = dilations
    if len(layer.outputs) < 2 or not ctx.is_read(layer, 1):
        # No reader of the indices: the plain MaxPool, which later rewrites can match.
        if not _has_extra(extra):
            ctx.one("MaxPool", [data], ctx.out(layer, 0), **attrs)
            return
        values = ctx.one("MaxPool", [data], **attrs)
        ctx.one(
            "Identity", [_append_windows(ctx, values, extra, _lowest(ctx, data))], ctx.out(layer, 0)
        )
        return
    values, indices = ctx.node("MaxPool", [data], [ctx.tmp("values"), ctx.tmp("indices")], **attrs)
    plane = ctx.reduce("ReduceProd", ctx.one("Shape", [data], start=2), [0], True)
    if _has_extra(extra):
        values = _append_windows(ctx, values, extra, _lowest(ctx, data))
        planes = _append_windows_edge(ctx, ctx.one("Div", [indices, plane]), extra)
        padded = _append_windows(ctx, indices, extra, _i64(ctx, "missing", -1))
        missing = ctx.one("Less", [padded, _i64(ctx, "zero", 0)])
        indices = ctx.one("Where", [missing, ctx.one("Mul", [planes, plane]), padded])
    axis = layer.attrs["axis"]
    if not -rank <= axis < rank:
        raise B2SError(f"{layer.where()}: attribute axis={axis} is out of range for rank {rank}")
    axis %= rank
    if axis:
        span = ctx.reduce("ReduceProd", ctx.one("Shape", [data], start=axis), [0], True)
        indices = ctx.one("Mod", [indices, span])
    ctx.one("Identity", [values], ctx.out(layer, 0))
    if len(layer.outputs) > 1:
        target = (
            TensorProto.INT32 if layer.attrs["index_element_type"] == "i32" else TensorProto.INT64
        )
        ctx.one("Cast", [indices], ctx.out(layer, 1), to=target)


def _append_windows_edge(ctx: ConversionContext, tensor: str, extra: Extra) -> str:
    return ctx.one("Pad", [tensor, _end_pads(ctx, 2 + len(extra), extra)], mode="edge")


_AVG_POOL = {**_POOL, "exclude-pad": Bool(required=True)}


@converts("AvgPool", (1,), inputs=(1, 1), attrs={**_AVG_POOL, "rounding_type": _ROUNDING_1})
def avg_pool_1(ctx, layer, inputs):
    _avg_pool(ctx, layer, inputs[0])


@converts("AvgPool", (14,), inputs=(1, 1), attrs={**_AVG_POOL, "rounding_type": _ROUNDING_14})
def avg_pool_14(ctx, layer, inputs):
    _avg_pool(ctx, layer, inputs[0])


@converts(
    "AvgPool",
    (16,),
    inputs=(1, 1),
    attrs={
        **_AVG_POOL,
        "rounding_type": _ROUNDING_14,
        "dilations": Ints(length=SPATIAL, minimum=1),
    },
)
def avg_pool_16(ctx, layer, inputs):
    """OpenVINO's ONNX frontend writes every AveragePool of ONNX opset 19 on as AvgPool-16.
    Its dilations need ONNX AveragePool-19; below target opset 19 a dilated one becomes a
    depthwise Conv (see ``_dilated_avg_pool_as_conv``)."""
    dilations = layer.attrs["dilations"] or [1] * len(layer.attrs["kernel"])
    if len(dilations) != len(layer.attrs["kernel"]):
        raise B2SError(
            f"{layer.where()}: attribute dilations {dilations} needs one value per kernel axis "
            f"({len(layer.attrs['kernel'])})"
        )
    if any(d != 1 for d in dilations) and ctx.opset < 19:
        _dilated_avg_pool_as_conv(ctx, layer, inputs[0], dilations)
        return
    _avg_pool(ctx, layer, inputs[0], dilations)


def _dilated_avg_pool_as_conv(
    ctx: ConversionContext, layer: Layer, data: str, dilations: list[int]
) -> None:
    """A dilated AvgPool for targets without AveragePool-19: a depthwise Conv sums each
    window (weights 1/k when every window divides by the whole kernel, else 1 and a Div by
    the per-position count), with OpenVINO's window rules made explicit:

    - ceil / ceil_torch windows come from stretching the end padding (a Conv has no
      ceil_mode); the extra padding is zeros, as OpenVINO's;
    - counting padding, OpenVINO divides every window by the whole kernel, except that
      with no padding at all a ceil window running past the input is divided by the taps
      inside it (measured), as excluding padding does;
    - excluding padding, a window entirely in the padding is 0 / 0 = NaN, as OpenVINO's.

    Measured in onnxruntime against AveragePool-19 (single thread, f32, 3x3 dilated by 2):
    from 4x faster (5-D) to 3x slower (2-D with stride 2), the same order: worth emitting
    rather than refusing the target opset."""
    values = layer.attrs
    kernel, strides = list(values["kernel"]), list(values["strides"])
    spatial = len(kernel)
    shape = ctx.shape(data)
    if shape is None or len(shape) != spatial + 2:
        raise B2SError(
            f"{layer.where()}: data of rank {'?' if shape is None else len(shape)} does not "
            f"fit a kernel of {spatial} axes"
        )
    channels, dims = shape[1], list(shape[2:])
    if channels is None:
        raise B2SError(
            f"{layer.where()}: a dilated AvgPool below target opset 19 is a depthwise Conv, "
            "which needs a static channel count (input 0 axis 1)"
        )
    auto_pad, rounding, exclude = values["auto_pad"], values["rounding_type"], values["exclude-pad"]
    if auto_pad in _AUTO_PAD:
        pads = _same_pads(ctx, layer, data, dilations, upper=auto_pad == "same_upper")
        rounding = "floor"  # SAME padding fixes the window count: no rounding to apply
    elif auto_pad == "valid":
        pads = [0] * (2 * spatial)
    else:
        pads = list(values["pads_begin"]) + list(values["pads_end"])
    # With no padding at all, OpenVINO's ceil windows past the input count only the taps
    # inside it even when counting padding (they then equal excluding it).
    by_count = exclude or (rounding != "floor" and not any(pads))
    static = all(d is not None for d in dims)
    if (by_count or rounding != "floor") and not static:
        raise B2SError(
            f"{layer.where()}: a dilated AvgPool below target opset 19 needs static spatial "
            f"dims here (exclude-pad or a rounding_type of ceil), got {list(shape)}"
        )
    counts = []  # per spatial axis: how many taps of each output window lie in the input
    for axis in range(spatial if static else 0):
        begin, end = pads[axis], pads[spatial + axis]
        reach = (kernel[axis] - 1) * dilations[axis] + 1
        dim, stride = dims[axis], strides[axis]
        room = dim + begin + end - reach
        if room < 0:
            raise B2SError(
                f"{layer.where()}: the dilated kernel ({reach}) is larger than spatial axis "
                f"{axis} with its padding ({dim + begin + end})"
            )
        windows = room // stride + 1
        if rounding != "floor":
            windows = -(-room // stride) + 1
            if rounding == "ceil_torch" and (windows - 1) * stride >= dim + begin:
                windows -= 1
        # Floor mode over a stretched end padding yields exactly these windows.
        pads[spatial + axis] = max(end, (windows - 1) * stride + reach - dim - begin)
        starts = np.arange(windows) * stride - begin
        taps = starts[:, None] + np.arange(kernel[axis]) * dilations[axis]
        counts.append(((taps >= 0) & (taps < dim)).sum(axis=1))
    elem = ctx.type_of(data)
    source = data if elem == TensorProto.FLOAT else ctx.one("Cast", [data], to=TensorProto.FLOAT)
    weight = 1.0 if by_count else 1.0 / math.prod(kernel)
    weights = ctx.const("weights", np.full([channels, 1, *kernel], weight, np.float32))
    conv_attrs = {
        "group": channels,
        "kernel_shape": kernel,
        "strides": strides,
        "dilations": dilations,
        "pads": pads,
    }
    done = elem == TensorProto.FLOAT and not by_count
    summed = ctx.one("Conv", [source, weights], ctx.out(layer) if done else None, **conv_attrs)
    if done:
        return
    result = summed
    if by_count:
        grid = counts[0].astype(np.float32)
        for column in counts[1:]:
            grid = np.multiply.outer(grid, column.astype(np.float32))
        divisor = ctx.const("counts", grid.reshape(1, 1, *grid.shape))
        last = elem == TensorProto.FLOAT
        result = ctx.one("Div", [summed, divisor], ctx.out(layer) if last else None)
        if last:
            return
    ctx.one("Cast", [result], ctx.out(layer), to=elem)


def _avg_pool(
    ctx: ConversionContext, layer: Layer, data: str, dilations: list[int] | None = None
) -> None:
    spatial = len(layer.attrs["kernel"])
    dilations = dilations or [1] * spatial
    attrs, extra = _pool_attrs(ctx, layer, data, dilations)
    if any(d != 1 for d in dilations):
        attrs["dilations"] = dilations
    exclude = layer.attrs["exclude-pad"] or _unpadded(layer)
    attrs["count_include_pad"] = 0 if exclude else 1
    if not exclude and layer.attrs["rounding_type"] != "floor" and any(attrs.get("pads", [])):
        data = _divide_by_whole_kernel(ctx, layer, data, attrs)
    if not _has_extra(extra):
        ctx.one("AveragePool", [data], ctx.out(layer), **attrs)
        return
    pooled = ctx.one("AveragePool", [data], **attrs)
    dtype = NUMPY_OF_ONNX.get(ctx.type_of(data), np.float32)
    if not exclude or any(d != 1 for d in dilations):
        # Counting padding an empty window is 0; a dilated one excluding it is NaN (no tap
        # inside: 0 / 0, measured).
        fill = ctx.const("fill", np.asarray(np.nan if exclude else 0.0, dtype))
        ctx.one("Identity", [_append_windows(ctx, pooled, extra, fill)], ctx.out(layer))
        return
    # -0 + 0 / divisor: the empty windows' quotients, the others' values unchanged.
    padded = _append_windows(ctx, pooled, extra, ctx.const("fill", np.asarray(-0.0, dtype)))
    divisor = _empty_window_divisors(ctx, data, attrs, dilations, extra, dtype)
    quotients = ctx.one("Div", [ctx.const("zero", np.asarray(0.0, dtype)), divisor])
    ctx.one("Add", [padded, quotients], ctx.out(layer))


def _unpadded(layer: Layer) -> bool:
    """Whether the layer pads nothing (auto_pad valid, or explicit zero pads). Counting
    padding, OpenVINO then divides a ceil window that runs past the data by its part inside
    the data (and an empty one gives 0 / 0 = NaN, or -0 past the end), exactly as when
    excluding padding (measured against its CPU plugin); floor mode keeps the pads that
    ``_pool_attrs`` may stretch for a partial window out of the count."""
    values = layer.attrs
    if values["auto_pad"] == "valid":
        return True
    return values["auto_pad"] in ("explicit", "notset") and not any(
        values["pads_begin"] + values["pads_end"]
    )


def _empty_window_divisors(
    ctx: ConversionContext,
    data: str,
    attrs: dict,
    dilations: list[int],
    extra: Extra,
    dtype: np.dtype,
) -> str:
    """Excluding padding, OpenVINO divides an appended undilated 'ceil' window by the product
    over the axes of ``min(end, size) - max(start, 0)``, the window's end first clipped to the
    end padding: 0 for a window starting where the end padding starts (so 0 / 0 = NaN),
    negative for one starting further on (-0, or +0 where two such axes meet). Measured
    against its CPU plugin; the other windows get divisor 1 here. Per axis a vector over the
    output windows, broadcast into the output's shape."""
    spatial = len(extra)
    factors = []
    for axis, count in enumerate(extra):
        if isinstance(count, int) and not count:
            continue
        begin, stride = attrs["pads"][axis], attrs["strides"][axis]
        if isinstance(count, int):
            dim = ctx.shape(data)[axis + 2]
            windows = math.ceil(
                (dim + begin + attrs["pads"][spatial + axis] - _reach(attrs, dilations, axis))
                / stride
            )
            vector = np.ones(windows + 1, dtype)
            vector[-1] = dim - (windows * stride - begin)
            factor = ctx.const("divisors", vector)
        else:
            total, in_padding = _ceil_count_at_run_time(ctx, data, attrs, dilations, axis)
            windows = ctx.one("Sub", [total, _i64(ctx, "one", [1])])
            start = ctx.one(
                "Sub",
                [ctx.one("Mul", [windows, _i64(ctx, "stride", [stride])]), _i64(ctx, "b", [begin])],
            )
            last = ctx.one(
                "Cast",
                [ctx.one("Sub", [axis_size(ctx, data, axis + 2), start])],
                to=ctx.type_of(data),
            )
            kept = ctx.one("Sub", [total, in_padding])
            ones = ctx.one("Expand", [ctx.const("one", np.ones(1, dtype)), kept])
            appended = ctx.one("Slice", [last, _i64(ctx, "start", [0]), in_padding])
            factor = ctx.one("Concat", [ones, appended], axis=0)
        shape = [1] * (spatial + 2)
        shape[axis + 2] = -1
        factors.append(ctx.one("Reshape", [factor, _i64(ctx, "shape", shape)]))
    product = factors[0]
    for factor in factors[1:]:
        product = ctx.one("Mul", [product, factor])
    return product


def _divide_by_whole_kernel(ctx: ConversionContext, layer: Layer, data: str, attrs: dict) -> str:
    """Counting padding, OpenVINO divides a ceil-mode window that runs past the end padding
    by the whole kernel size; onnxruntime by the part inside the padding. Floor mode with the
    end padding stretched to the last ('ceil_torch') window's end makes both the same. With
    unit strides no window runs past the end padding, so nothing changes."""
    shape = ctx.shape(data)
    spatial = len(attrs["kernel_shape"])
    if all(stride == 1 for stride in attrs["strides"]):
        return data
    if shape is None or any(d is None for d in shape[2:]):
        return _pad_to_whole_windows_at_run_time(ctx, data, attrs)
    pads = list(attrs["pads"])
    dilations = attrs.get("dilations", [1] * spatial)
    for axis in range(spatial):
        stride, begin = attrs["strides"][axis], pads[axis]
        size = (attrs["kernel_shape"][axis] - 1) * dilations[axis] + 1
        count = math.ceil((shape[axis + 2] + begin + pads[spatial + axis] - size) / stride) + 1
        if (count - 1) * stride >= shape[axis + 2] + begin:
            count -= 1
        pads[spatial + axis] = max(0, (count - 1) * stride + size - shape[axis + 2] - begin)
    attrs["pads"] = pads
    attrs.pop("ceil_mode", None)
    if all(max(pads[a], pads[spatial + a]) < attrs["kernel_shape"][a] for a in range(spatial)):
        return data
    # onnxruntime takes no pad as large as the kernel (a dilated window reaches further):
    # zeros joined on explicitly count the same. A Pad would be fused back into the pool by
    # onnxruntime's optimizer, so the zeros are concatenated.
    attrs["pads"] = [0] * (2 * spatial)
    if None in shape:
        raise B2SError(
            f"{layer.where()}: a dilated ceil-mode AvgPool counting padding needs a static "
            f"input shape, got {list(shape)}"
        )
    dims = list(shape)
    dtype = NUMPY_OF_ONNX.get(ctx.type_of(data), np.float32)
    for axis in range(spatial):
        begin, end = pads[axis], pads[spatial + axis]
        parts = []
        for count in (begin, end):
            block = list(dims)
            block[axis + 2] = count
            parts.append(ctx.const("zeros", np.zeros(block, dtype)) if count else None)
        if begin or end:
            data = ctx.one("Concat", [p for p in (parts[0], data, parts[1]) if p], axis=axis + 2)
            dims[axis + 2] += begin + end
    return data


def _slice(ctx: ConversionContext, tensor: str, axis: int, start: int, stop: int) -> str:
    return ctx.one(
        "Slice",
        [tensor, _i64(ctx, "start", [start]), _i64(ctx, "stop", [stop]), _i64(ctx, "axis", [axis])],
    )


def _pad_to_whole_windows_at_run_time(ctx: ConversionContext, data: str, attrs: dict) -> str:
    """``_divide_by_whole_kernel`` on sizes known only at run time: the input padded with
    zeros up to the end of the last 'ceil_torch' window (a Pad whose sizes are computed, which
    onnxruntime cannot fold into the pool), then pooled without padding, so every window
    divides by the whole kernel. 'ceil' windows past it are appended by the caller."""
    spatial = len(attrs["kernel_shape"])
    dilations = attrs.get("dilations", [1] * spatial)
    pads = list(attrs["pads"])
    ends: Extra = []
    for axis in range(spatial):
        stride, begin, end = attrs["strides"][axis], pads[axis], pads[spatial + axis]
        reach = _reach(attrs, dilations, axis)
        count, in_padding = _ceil_count_at_run_time(ctx, data, attrs, dilations, axis)
        windows = ctx.one("Sub", [count, in_padding])
        last_end = ctx.one(
            "Add",
            [
                ctx.one("Mul", [windows, _i64(ctx, "stride", [stride])]),
                _i64(ctx, "reach", [reach - stride - begin]),
            ],
        )
        needed = ctx.one("Sub", [last_end, axis_size(ctx, data, axis + 2)])
        ends.append(ctx.one("Max", [needed, _i64(ctx, "end", [end])]))
    pad_sizes = ctx.one(
        "Concat", [_i64(ctx, "pads", [0, 0, *pads[:spatial], 0, 0]), *ends], axis=0, hint="pads"
    )
    attrs["pads"] = [0] * (2 * spatial)
    attrs.pop("ceil_mode", None)
    return ctx.one("Pad", [data, pad_sizes], mode="constant")
