"""Layers that reshape, reorder, slice, join or describe tensors."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import axis_size
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.kernel_types import emit
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Axis, Bool, Choice, ElementType, Int, Ints
from b2s_onnx.ir.converters.structural import STRUCTURAL
from b2s_onnx.ir.reader import Layer
from b2s_onnx.ir.weights import onnx_type

INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)


@converts("Parameter", (1,), inputs=(0, 0), attrs=STRUCTURAL["Parameter"][0])
def parameter(ctx, layer, inputs):
    """Graph inputs are declared by the converter driver; nothing to emit."""


@converts("Reshape", (1,), inputs=(2, 2), attrs={"special_zero": Bool(required=True)})
def reshape(ctx, layer, inputs):
    special_zero = layer.attrs["special_zero"]
    data, shape = inputs
    value = ctx.value(shape)
    attrs = {}
    if not special_zero and (value is None or (value == 0).any()):
        attrs["allowzero"] = 1  # a 0 means a zero-sized dim, not "copy"
    if value is not None:
        _check_reshape(layer, ctx.shape(data), [int(v) for v in value.reshape(-1)], special_zero)
    ctx.one("Reshape", [data, ctx.int64(shape)], ctx.out(layer), **attrs)


def _check_reshape(layer: Layer, source, target: list[int], special_zero: bool) -> None:
    """A constant target shape must hold the data's elements (OpenVINO's rule)."""
    if target.count(-1) > 1 or any(v < -1 for v in target):
        raise B2SError(f"{layer.where()}: target shape {target} is not a shape")
    if source is None or any(d is None for d in source):
        return
    sizes = [
        source[i] if special_zero and v == 0 and i < len(source) else v
        for i, v in enumerate(target)
    ]
    known = int(np.prod([v for v in sizes if v != -1], dtype=object))
    total = int(np.prod(source, dtype=object))
    fits = total % known == 0 if -1 in sizes and known else known == total
    if not fits:
        raise B2SError(
            f"{layer.where()}: target shape {target} cannot hold the {total} elements of "
            f"input shape {list(source)}"
        )


@converts("Transpose", (1,), inputs=(2, 2), attrs={})
def transpose(ctx, layer, inputs):
    order = ctx.require_value(layer, inputs[1], "the order input")
    rank = ctx.rank(layer, inputs[0])
    perm = [int(v) for v in order.reshape(-1)] or list(reversed(range(rank)))
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise B2SError(
            f"{layer.where()}: the order input {perm} is not a permutation of {rank} axes"
        )
    ctx.one("Transpose", inputs[:1], ctx.out(layer), perm=perm)


def _axes_vector(ctx: ConversionContext, axes: str) -> str:
    """OpenVINO accepts a scalar axes input; ONNX Squeeze/Unsqueeze want a 1-D int64 one."""
    value = ctx.value(axes)
    if value is not None:
        return _i64(ctx, "axes", value.reshape(-1))
    shape = ctx.shape(axes)
    if shape is not None and len(shape) == 1:
        return ctx.int64(axes)
    return ctx.one("Reshape", [ctx.int64(axes), _i64(ctx, "vector", [-1])])


@converts("Squeeze", (1,), inputs=(1, 2), attrs={})
@converts("Squeeze", (15,), inputs=(1, 2), attrs={"allow_axis_skip": Bool(default=False)})
def squeeze(ctx, layer, inputs):
    """OpenVINO skips a named axis whose static size is not 1 (measured); ONNX refuses it."""
    axes, shape = (ctx.value(inputs[1]), ctx.shape(inputs[0])) if len(inputs) > 1 else (None, None)
    if axes is not None and shape is not None:
        rank = len(shape)
        named = [int(a) for a in axes.reshape(-1)]
        if any(not -rank <= a < rank for a in named):
            raise B2SError(f"{layer.where()}: axes {named} out of range for rank {rank}")
        kept = sorted({a % rank for a in named if shape[a % rank] in (1, None)})
        if not kept and named:
            ctx.one("Identity", inputs[:1], ctx.out(layer))
            return
        ctx.one("Squeeze", [inputs[0], _i64(ctx, "axes", kept)], ctx.out(layer))
    elif len(inputs) > 1:
        ctx.one("Squeeze", [inputs[0], _axes_vector(ctx, inputs[1])], ctx.out(layer))
    else:
        ctx.one("Squeeze", inputs, ctx.out(layer))


@converts("Unsqueeze", (1,), inputs=(2, 2), attrs={})
def unsqueeze(ctx, layer, inputs):
    ctx.one("Unsqueeze", [inputs[0], _axes_vector(ctx, inputs[1])], ctx.out(layer))


@converts("Concat", (1,), inputs=(1, 1 << 16), attrs={"axis": Axis(required=True)})
def concat(ctx, layer, inputs):
    ctx.one("Concat", inputs, ctx.out(layer), axis=layer.attrs["axis"])


@converts("ShapeOf", (1,), inputs=(1, 1), attrs={})
@converts(
    "ShapeOf",
    (3,),
    inputs=(1, 1),
    attrs={"output_type": ElementType(allowed=("i32", "i64"), default="i64")},
)
def shape_of(ctx, layer, inputs):
    out_type = onnx_type(layer.attrs["output_type"] if layer.version == "opset3" else "i64")
    shape = ctx.shape(inputs[0])
    if shape is not None and all(d is not None for d in shape):
        # The IR declares the shape: a constant, which lets shape arithmetic fold away.
        ctx.add_constant(ctx.out(layer), np.asarray(shape, NUMPY_OF_ONNX[out_type]))
        return
    ctx.types[ctx.out(layer)] = out_type
    if out_type == TensorProto.INT64:
        ctx.one("Shape", inputs, ctx.out(layer))
    else:
        ctx.one("Cast", [ctx.one("Shape", inputs)], ctx.out(layer), to=out_type)


def _mask(layer: Layer, key: str, length: int) -> list[int]:
    values = layer.attrs[key] or []
    return values[:length] + [0] * (length - len(values))


_MASK = Ints(minimum=0, maximum=1)


@converts(
    "StridedSlice",
    (1,),
    inputs=(3, 4),
    attrs={
        "begin_mask": Ints(required=True, minimum=0, maximum=1),
        "end_mask": Ints(required=True, minimum=0, maximum=1),
        "new_axis_mask": _MASK,
        "shrink_axis_mask": _MASK,
        "ellipsis_mask": _MASK,
    },
)
def strided_slice(ctx, layer, inputs):
    """Masks as in OpenVINO: begin_mask/end_mask 1 = ignore that bound; new_axis inserts a
    dimension, shrink_axis removes one, ellipsis stands for all dims not named."""
    data = inputs[0]
    rank = ctx.rank(layer, data)
    begin = _bounds(ctx, layer, inputs[1], "begin")
    end = _bounds(ctx, layer, inputs[2], "end")
    if len(inputs) > 3:
        stride = [int(v) for v in ctx.require_value(layer, inputs[3], "stride").reshape(-1)]
    else:
        stride = [1] * len(begin)
    count = len(begin)
    begin_mask, end_mask = _mask(layer, "begin_mask", count), _mask(layer, "end_mask", count)
    new_axis, shrink = _mask(layer, "new_axis_mask", count), _mask(layer, "shrink_axis_mask", count)
    ellipsis = _mask(layer, "ellipsis_mask", count)
    if sum(ellipsis) > 1:
        raise B2SError(f"{layer.where()}: more than one ellipsis")
    named = sum(1 for i in range(count) if not new_axis[i] and not ellipsis[i])
    starts, stops, axes, steps, squeeze_axes, new_positions = [], [], [], [], [], []
    axis = 0  # input axis
    out_position = 0
    for i in range(count):
        if ellipsis[i]:
            covered = rank - named
            axis += covered
            out_position += covered
            continue
        if new_axis[i]:
            new_positions.append(out_position)
            out_position += 1
            continue
        step = stride[i] if i < len(stride) else 1
        if step == 0:
            raise B2SError(f"{layer.where()}: stride[{i}] is 0")
        if shrink[i]:
            b = begin[i]
            dim = None if ctx.shape(data) is None else ctx.shape(data)[axis]
            if isinstance(b, int) and dim is None:  # in range only once the size is known
                b = _i64(ctx, "begin", [b])
            if isinstance(b, str):
                b = _shrunk_index(ctx, data, axis, b)
                starts.append(b)
                stops.append(ctx.one("Add", [b, _i64(ctx, "one", [1])]))
            else:
                if not -dim <= b < dim:
                    raise B2SError(
                        f"{layer.where()}: shrink_axis_mask takes begin[{i}] = {b}, outside "
                        f"[{-dim}, {dim}) of axis {axis} (OpenVINO refuses it too)"
                    )
                starts.append(b)
                stops.append(b + 1 if b != -1 else INT64_MAX)
            axes.append(axis)
            steps.append(1)
            squeeze_axes.append(axis)
        else:
            start = (0 if step > 0 else INT64_MAX) if begin_mask[i] else begin[i]
            stop = (INT64_MAX if step > 0 else INT64_MIN) if end_mask[i] else end[i]
            if not (start == 0 and stop == INT64_MAX and step == 1):
                starts.append(start)
                stops.append(stop)
                axes.append(axis)
                steps.append(step)
            out_position += 1
        axis += 1
    current = data
    if axes:
        current = ctx.one(
            "Slice",
            [
                current,
                _vector(ctx, "starts", starts),
                _vector(ctx, "ends", stops),
                _i64(ctx, "axes", axes),
                _i64(ctx, "steps", steps),
            ],
        )
    if squeeze_axes:
        current = ctx.one("Squeeze", [current, _i64(ctx, "squeeze", squeeze_axes)])
    if new_positions:
        current = ctx.one("Unsqueeze", [current, _i64(ctx, "new_axes", new_positions)])
    ctx.one("Identity", [current], ctx.out(layer))


def _bounds(ctx, layer, tensor: str, what: str) -> list[int | str]:
    """StridedSlice's begin or end: the values of a constant, or, computed at run time,
    one 1-element int64 tensor per position (its length must be static)."""
    value = ctx.value(tensor)
    if value is not None:
        return [int(v) for v in value.reshape(-1)]
    shape = ctx.shape(tensor)
    if shape is None or len(shape) != 1 or shape[0] is None:
        raise B2SError(
            f"{layer.where()}: input '{what}' computed at run time needs a static length"
        )
    wide = ctx.int64(tensor)
    return [
        ctx.one("Slice", [wide, _i64(ctx, "at", [i]), _i64(ctx, "next", [i + 1])])
        for i in range(shape[0])
    ]


def _shrunk_index(ctx, data: str, axis: int, index: str) -> str:
    """A shrunk axis's run-time index as the CPU plugin reads it: negative ones count from
    the end, and the result is clamped into the axis (measured: 7 of 5 is the last, -9 the
    first), so an index out of range still selects one element."""
    size = axis_size(ctx, data, axis)
    zero = _i64(ctx, "zero", [0])
    counted = ctx.one(
        "Where", [ctx.one("Less", [index, zero]), ctx.one("Add", [index, size]), index]
    )
    last = ctx.one("Sub", [size, _i64(ctx, "one", [1])])
    counted = ctx.one("Where", [ctx.one("Less", [counted, zero]), zero, counted])
    return ctx.one("Where", [ctx.one("Greater", [counted, last]), last, counted])


def _vector(ctx, hint: str, values: list[int | str]) -> str:
    """An int64 vector of constants and 1-element run-time tensors, as one tensor."""
    if all(isinstance(v, int) for v in values):
        return _i64(ctx, hint, values)
    parts = [v if isinstance(v, str) else _i64(ctx, hint, [v]) for v in values]
    return ctx.one("Concat", parts, axis=0)


@converts("Gather", (1,), inputs=(3, 3), attrs={})
@converts("Gather", (7, 8), inputs=(3, 3), attrs={"batch_dims": Int(default=0)})
def gather(ctx, layer, inputs):
    """OpenVINO gives zeros for an index out of range (Gather-1/7: outside [0, d); Gather-8:
    outside [-d, d)) where ONNX's Gather fails at run time: those indices are masked.
    ``batch_dims`` b (Gather-7/8) pairs the first b axes of data and indices: the gathered
    axis moves next to them and GatherND (batch_dims b) takes one index per position."""
    axis = int(ctx.require_value(layer, inputs[2], "axis").reshape(-1)[0])
    rank = ctx.rank(layer, inputs[0])
    if not -rank <= axis < rank:
        raise B2SError(f"{layer.where()}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    batch = 0 if layer.version == "opset1" else layer.attrs["batch_dims"]
    index_rank = 0
    if batch:
        index_rank = ctx.rank(layer, inputs[1])
        batch = batch + index_rank if batch < 0 else batch
        if not 0 <= batch <= min(index_rank, axis):
            raise B2SError(
                f"{layer.where()}: batch_dims {layer.attrs['batch_dims']} must be within "
                f"[-{index_rank}, {index_rank}] and resolve to at most axis {axis}"
            )
        _check_batch_dims(ctx, layer, inputs, batch)
    size = ctx.shape(inputs[0])[axis]
    if size == 0:
        _gather_from_nothing(ctx, layer, inputs, axis, batch)
        return
    low = -size if size is not None and layer.version == "opset8" else 0
    indices, index_shape = ctx.value(inputs[1]), ctx.shape(inputs[1])
    in_range = indices is not None and bool(((indices >= low) & (indices < (size or 0))).all())
    if index_shape is None or in_range:
        indices = inputs[1]
        # Gather takes int32/int64 indices, GatherND (batch_dims) int64 only.
        if batch or ctx.type_of(indices) != TensorProto.INT32:
            indices = ctx.int64(indices)
        target = ctx.out(layer)
        if batch:
            _batched_gather(ctx, inputs[0], indices, axis, batch, rank, index_rank, target)
        else:
            ctx.one("Gather", [inputs[0], indices], target, axis=axis)
        return
    index = ctx.int64(inputs[1])
    if size is None:  # an axis known only at run time: its size, and -size for Gather-8
        bound = ctx.one("Gather", [ctx.one("Shape", [inputs[0]]), _i64(ctx, "axis", axis)])
        floor = ctx.one("Neg", [bound]) if layer.version == "opset8" else _i64(ctx, "low", 0)
    else:
        bound, floor = _i64(ctx, "size", size), _i64(ctx, "low", low)
    valid = ctx.one(
        "And",
        [
            ctx.one("GreaterOrEqual", [index, floor]),
            ctx.one("Less", [index, bound]),
        ],
    )
    safe = ctx.one("Where", [valid, index, _i64(ctx, "zero", 0)])
    if batch:
        gathered = _batched_gather(ctx, inputs[0], safe, axis, batch, rank, index_rank)
    else:
        gathered = ctx.one("Gather", [inputs[0], safe], axis=axis)
    # valid covers the batch axes and the index axes; the data's other axes broadcast.
    between = range(batch, axis)
    after = range(axis + len(index_shape) - batch, rank - 1 + len(index_shape) - batch)
    outer = [*between, *after]
    if outer:
        valid = ctx.one("Unsqueeze", [valid, _i64(ctx, "mask_axes", outer)])
    elem = ctx.type_of(inputs[0])
    zero = ctx.const("zero", np.zeros((), NUMPY_OF_ONNX[elem]))
    emit(ctx, layer, "Where", [valid, gathered, zero], ctx.out(layer), elem=elem)


def _gather_from_nothing(ctx, layer, inputs, axis: int, batch: int) -> None:
    """Every index is out of range of an empty axis: OpenVINO's output is zeros, and
    onnxruntime's Gather would fail on any index (even a masked one), so the zeros are made
    directly in the output's shape ``data[:axis] + indices[batch:] + data[axis + 1:]``."""
    parts = [
        ctx.one("Shape", [inputs[0]], end=axis) if axis else None,
        ctx.one("Shape", [inputs[1]], start=batch),
        ctx.one("Shape", [inputs[0]], start=axis + 1),
    ]
    shape = ctx.one("Concat", [part for part in parts if part], axis=0)
    elem = ctx.type_of(inputs[0])
    ctx.one(
        "ConstantOfShape",
        [shape],
        ctx.out(layer),
        value=numpy_helper.from_array(np.zeros([1], NUMPY_OF_ONNX[elem])),
    )


def _check_batch_dims(ctx, layer, inputs, batch: int) -> None:
    """The first ``batch`` axes of data and indices must agree (OpenVINO does not
    broadcast them)."""
    data_shape, index_shape = ctx.shape(inputs[0]), ctx.shape(inputs[1])
    if data_shape is None or index_shape is None:
        return
    for position in range(batch):
        a, b = data_shape[position], index_shape[position]
        if a is not None and b is not None and a != b:
            raise B2SError(
                f"{layer.where()}: batch axis {position} is {a} in the data but {b} in the "
                f"indices; the first batch_dims={batch} axes must be equal"
            )


def _batched_gather(ctx, data, indices, axis, batch, rank, index_rank, target=None):
    """Gather with ``batch_dims``: data ``[B.., P.., D, S..]`` (the gathered axis D after
    the batch axes B and the axes P between) is transposed to ``[B.., D, P.., S..]``, GatherND
    with batch_dims ``batch`` picks D for each index (``[B.., I.., P.., S..]``), and a
    Transpose puts P before the index axes I, where OpenVINO's output has them."""
    between = list(range(batch, axis))
    if between:
        perm = [*range(batch), axis, *between, *range(axis + 1, rank)]
        data = ctx.one("Transpose", [data], perm=perm)
    index = ctx.one("Unsqueeze", [indices, _i64(ctx, "last", [-1])])
    index_axes = index_rank - batch
    if not between or not index_axes:
        return ctx.one("GatherND", [data, index], target, batch_dims=batch)
    gathered = ctx.one("GatherND", [data, index], batch_dims=batch)
    first_p = batch + index_axes
    perm = [
        *range(batch),
        *range(first_p, first_p + len(between)),
        *range(batch, first_p),
        *range(first_p + len(between), rank - 1 + index_axes),
    ]
    return ctx.one("Transpose", [gathered], target, perm=perm)


def _split(ctx, layer, data, axis, lengths):
    outputs = [ctx.out(layer, i) for i in range(len(layer.outputs))]
    ctx.node("Split", [data, _i64(ctx, "split", lengths)], outputs, axis=axis)


@converts("VariadicSplit", (1,), inputs=(3, 3), attrs={})
def variadic_split(ctx, layer, inputs):
    axis = int(ctx.require_value(layer, inputs[1], "axis").reshape(-1)[0])
    if ctx.value(inputs[2]) is None:
        _runtime_split(ctx, layer, inputs[0], axis, inputs[2])
        return
    lengths = [int(v) for v in ctx.require_value(layer, inputs[2], "split_lengths").reshape(-1)]
    if -1 in lengths:
        shape = ctx.shape(inputs[0])
        dim = None if shape is None else shape[axis]
        if dim is None:  # the rest of an axis known only at run time
            _runtime_split(ctx, layer, inputs[0], axis, inputs[2])
            return
        lengths[lengths.index(-1)] = dim - (sum(lengths) + 1)
    _split(ctx, layer, inputs[0], axis, lengths)


def _runtime_split(ctx, layer, data: str, axis: int, lengths: str) -> None:
    """split_lengths known only at run time (ONNX Split-13+ takes them as an input): the
    number of outputs is the layer's, and a -1 (the rest of the axis) is resolved at run
    time as ``dim - (sum(lengths) + 1)``. With more than one -1, or lengths that do not fit
    the axis, that leaves a negative or mismatched length which onnxruntime's Split rejects
    at run time, as OpenVINO rejects the same lengths."""
    count = len(layer.outputs)
    shape, length_shape = ctx.shape(data), ctx.shape(lengths)
    if length_shape is not None and (
        len(length_shape) != 1 or length_shape[0] not in (count, None)
    ):
        raise B2SError(
            f"{layer.where()}: split_lengths of shape {list(length_shape)} must be a vector of "
            f"{count} lengths, one per output"
        )
    if shape is not None and not -len(shape) <= axis < len(shape):
        raise B2SError(f"{layer.where()}: axis {axis} is out of range for rank {len(shape)}")
    dim = None if shape is None else shape[axis]
    if dim is not None:
        size = _i64(ctx, "dim", [dim])
    else:
        size = ctx.one("Gather", [ctx.one("Shape", [data]), _i64(ctx, "axis", [axis])])
    values = ctx.one("Reshape", [ctx.int64(lengths), _i64(ctx, "vector", [-1])])
    known = ctx.one("Add", [ctx.reduce("ReduceSum", values, [0], True), _i64(ctx, "one", [1])])
    rest = ctx.one("Sub", [size, known])
    resolved = ctx.one(
        "Where", [ctx.one("Equal", [values, _i64(ctx, "minus_one", [-1])]), rest, values]
    )
    outputs = [ctx.out(layer, i) for i in range(count)]
    ctx.node("Split", [data, resolved], outputs, axis=axis)


@converts("Split", (1,), inputs=(2, 2), attrs={"num_splits": Int(required=True, minimum=1)})
def split(ctx, layer, inputs):
    axis = int(ctx.require_value(layer, inputs[1], "axis").reshape(-1)[0])
    parts = layer.attrs["num_splits"]
    shape = ctx.shape(inputs[0])
    if shape is None:
        raise B2SError(f"{layer.where()}: the rank of the split input is unknown")
    if not -len(shape) <= axis < len(shape):
        raise B2SError(f"{layer.where()}: axis {axis} is out of range for rank {len(shape)}")
    dim = shape[axis]
    if dim is None:
        # Equal parts of a dynamic axis: dim / parts each, computed at run time. A dim that
        # does not divide leaves lengths that do not sum to it, which onnxruntime's Split
        # rejects at run time, as OpenVINO rejects that input.
        size = ctx.one("Gather", [ctx.one("Shape", [inputs[0]]), _i64(ctx, "axis", [axis])])
        part = ctx.one("Div", [size, _i64(ctx, "parts", [parts])])
        lengths = ctx.one("Expand", [part, _i64(ctx, "count", [parts])])
        outputs = [ctx.out(layer, i) for i in range(parts)]
        ctx.node("Split", [inputs[0], lengths], outputs, axis=axis)
        return
    if dim % parts:
        raise B2SError(f"{layer.where()}: axis {axis} of size {dim} is not divisible by {parts}")
    _split(ctx, layer, inputs[0], axis, [dim // parts] * parts)


@converts("Tile", (1,), inputs=(2, 2), attrs={})
def tile(ctx, layer, inputs):
    repeats = ctx.value(inputs[1])
    rank = ctx.rank(layer, inputs[0])
    data = inputs[0]
    if repeats is None:
        ctx.one("Tile", [data, ctx.int64(inputs[1])], ctx.out(layer))
        return
    counts = [int(v) for v in repeats.reshape(-1)]
    if len(counts) < rank:
        counts = [1] * (rank - len(counts)) + counts
    elif len(counts) > rank:
        data = ctx.one("Unsqueeze", [data, _i64(ctx, "lead", list(range(len(counts) - rank)))])
    ctx.one("Tile", [data, _i64(ctx, "repeats", counts)], ctx.out(layer))


def _check_axes_mapping(layer, mapping: list[int], data: list[int], target: list[int]) -> None:
    """OpenVINO's rules for explicit Broadcast (its shape inference rejects the rest): one
    target axis per data axis, in order, within the target's rank, each data dim equal to
    its target dim or 1."""
    where = f"{layer.where()}: input 2 (axes_mapping) {mapping}"
    if len(mapping) != len(data):
        raise B2SError(f"{where} must name one target axis per data axis ({len(data)})")
    if any(not 0 <= axis < len(target) for axis in mapping):
        raise B2SError(f"{where} must lie within the target's rank {len(target)}")
    if mapping != sorted(mapping):
        raise B2SError(f"{where} must be in increasing order")
    for source, axis in enumerate(mapping):
        if data[source] not in (1, target[axis]):
            raise B2SError(
                f"{where}: data dim {source} ({data[source]}) must be 1 or target dim "
                f"{axis} ({target[axis]})"
            )


@converts(
    "Broadcast",
    (1,),
    inputs=(2, 3),
    attrs={"mode": Choice(allowed=("numpy", "explicit", "none"), default="numpy")},
)
@converts(
    "Broadcast",
    (3,),
    inputs=(2, 3),
    attrs={"mode": Choice(allowed=("numpy", "explicit", "bidirectional"), default="numpy")},
)
def broadcast(ctx, layer, inputs):
    mode = layer.attrs["mode"]
    if mode == "none":  # Broadcast-1's name for explicit axes mapping
        mode = "explicit"
    data, target = inputs[0], ctx.int64(inputs[1])
    if mode == "explicit":
        if len(inputs) < 3:
            raise B2SError(
                f"{layer.where()}: explicit Broadcast needs input 2 (axes_mapping); it has "
                f"{len(inputs)} inputs"
            )
        mapping = [int(v) for v in ctx.require_value(layer, inputs[2], "axes_mapping").reshape(-1)]
        data = _mapped_for_expand(ctx, layer, data, inputs[1], mapping)
    ctx.one("Expand", [data, target], ctx.out(layer))


def _mapped_for_expand(ctx, layer, data: str, target: str, mapping: list[int]) -> str:
    """``data`` with its axes placed at ``mapping``'s positions of the target's rank and 1s
    elsewhere, so that Expand broadcasts it as explicit mode does. With a static data shape
    and a constant target the mapping is validated here; otherwise (a target computed from
    ShapeOf, PyTorch's index_copy) the other axes are inserted by an Unsqueeze and
    onnxruntime's Expand refuses sizes that do not broadcast."""
    target_value = ctx.value(target)
    data_shape = ctx.shape(data)
    if target_value is not None and data_shape is not None and None not in data_shape:
        target_value = [int(v) for v in target_value.reshape(-1)]
        _check_axes_mapping(layer, mapping, list(data_shape), target_value)
        shape = [1] * len(target_value)
        for source_axis, target_axis in enumerate(mapping):
            shape[target_axis] = data_shape[source_axis]
        return ctx.one("Reshape", [data, _i64(ctx, "mapped", shape)])
    target_shape = ctx.shape(target)
    rank = None if target_shape is None or len(target_shape) != 1 else target_shape[0]
    if rank is None:
        raise B2SError(f"{layer.where()}: explicit Broadcast needs a target_shape of static length")
    if sorted(set(mapping)) != mapping or not all(0 <= a < rank for a in mapping):
        raise B2SError(
            f"{layer.where()}: axes_mapping {mapping} must increase within the target's rank {rank}"
        )
    if data_shape is not None and len(data_shape) != len(mapping):
        raise B2SError(
            f"{layer.where()}: axes_mapping has {len(mapping)} axes for data of rank "
            f"{len(data_shape)}"
        )
    missing = [axis for axis in range(rank) if axis not in mapping]
    return ctx.one("Unsqueeze", [data, _i64(ctx, "new_axes", missing)]) if missing else data


@converts("Range", (1,), inputs=(3, 3), attrs={})
@converts("Range", (4,), inputs=(3, 3), attrs={"output_type": ElementType(required=True)})
def range_(ctx, layer, inputs):
    if layer.version == "opset4":
        out_type = onnx_type(layer.attrs["output_type"])
    else:
        out_type = ctx.type_of(inputs[0])
    ctx.types[ctx.out(layer)] = out_type
    cast = [
        ctx.one(
            "Cast", [ctx.one("Squeeze", [t]) if ctx.shape(t) not in ((), None) else t], to=out_type
        )
        for t in inputs
    ]
    ctx.one("Range", cast, ctx.out(layer))
