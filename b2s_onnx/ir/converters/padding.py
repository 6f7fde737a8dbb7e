"""Pad-1/12 in every mode, with negative pads (Pad-12).

OpenVINO pads the original tensor first and then removes what negative pads remove (a
reflection is taken from the uncropped data). ONNX Pad has no 'symmetric' mode (a reflection
that repeats the edge), and onnxruntime refuses negative pads when reflecting, so with
constant pads the positive part is padded first (symmetric as reversed slices concatenated
on each side), then the negative part is sliced off. Run-time pads of Pad-12 do the same
with the split computed at run time (onnxruntime crops before it reflects or repeats the
edge, and refuses an edge pad of an axis cropped to nothing); 'symmetric' needs constants.

onnxruntime's Pad has no int16/uint16 kernel: those run widened to int32/uint32 (Pad only
moves values, so any wider type gives the same bits) and are cast back.
"""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.kernel_types import cast, kernel_type
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice
from b2s_onnx.ir.reader import Layer

_MODES = ("constant", "edge", "reflect", "symmetric")
#: ONNX Slice's stand-ins for "past the end" in either direction.
_END = np.iinfo(np.int64).max
_BEFORE_START = np.iinfo(np.int64).min


def _onnx_pad(
    ctx: ConversionContext,
    layer: Layer,
    data: str,
    operands: list[str],
    output: str | None,
    mode: str,
) -> str:
    """ONNX Pad of ``data`` (``operands``: pads, then the optional pad value), widened
    where onnxruntime has no Pad kernel for the element type."""
    elem = ctx.type_of(data)
    wide = kernel_type(ctx, layer, "Pad", elem)
    if wide is None:
        return ctx.one("Pad", [data, *operands], output, mode=mode)
    widened = [cast(ctx, data, wide), operands[0], *(cast(ctx, v, wide) for v in operands[1:])]
    return ctx.one("Cast", [ctx.one("Pad", widened, mode=mode)], output, to=elem)


def _run_time_pad(ctx: ConversionContext, layer: Layer, inputs: list[str], mode: str) -> None:
    """Pad-12 with pads known only at run time, as OpenVINO computes it: pad by the
    positive parts, then slice off the negative ones (a reflection or an edge is taken
    from the uncropped data)."""
    begins, ends = ctx.int64(inputs[1]), ctx.int64(inputs[2])
    zero = _i64(ctx, "zero", 0)
    pads = ctx.one("Concat", [begins, ends], axis=0)
    if layer.version == "opset1":
        # Pad-1 pads are non-negative: nothing to crop.
        _onnx_pad(ctx, layer, inputs[0], [pads, *inputs[3:4]], ctx.out(layer), mode)
        return
    grow = ctx.one("Where", [ctx.one("Less", [pads, zero]), zero, pads])
    operands = [grow, *inputs[3:4]] if mode == "constant" else [grow]
    padded = _onnx_pad(ctx, layer, inputs[0], operands, None, mode)
    zeros = ctx.one("Mul", [begins, zero])
    starts = ctx.one("Where", [ctx.one("Less", [begins, zero]), ctx.one("Neg", [begins]), zeros])
    stops = ctx.one(
        "Where",
        [ctx.one("Less", [ends, zero]), ends, ctx.one("Add", [zeros, _i64(ctx, "end", _END)])],
    )
    ctx.one("Slice", [padded, starts, stops], ctx.out(layer))


def _slice(ctx: ConversionContext, data: str, axis: int, start: int, end: int, step: int = 1):
    return ctx.one(
        "Slice",
        [
            data,
            _i64(ctx, "starts", [start]),
            _i64(ctx, "ends", [end]),
            _i64(ctx, "axes", [axis]),
            _i64(ctx, "steps", [step]),
        ],
    )


def _symmetric(ctx: ConversionContext, data: str, begins: list[int], ends: list[int]) -> str:
    """Mirror images of the first ``begin`` and last ``end`` entries on each axis."""
    for axis, (begin, end) in enumerate(zip(begins, ends, strict=True)):
        if not begin and not end:
            continue
        pieces = [data]
        if begin:
            pieces.insert(0, _slice(ctx, data, axis, begin - 1, _BEFORE_START, -1))
        if end:
            pieces.append(_slice(ctx, data, axis, -1, -1 - end, -1))
        data = ctx.one("Concat", pieces, axis=axis)
    return data


def _check_reach(
    ctx: ConversionContext, layer: Layer, data: str, mode: str, begins: list[int], ends: list[int]
) -> None:
    """Reflections can reach at most dim - 1 (reflect) or dim (symmetric) entries."""
    shape = ctx.shape(data)
    if shape is None or mode not in ("reflect", "symmetric"):
        return
    spare = 1 if mode == "reflect" else 0
    for axis, dim in enumerate(shape):
        if dim is not None and max(begins[axis], ends[axis]) > dim - spare:
            raise B2SError(
                f"{layer.where()}: pad_mode='{mode}' pads axis {axis} (size {dim}) by "
                f"{max(begins[axis], ends[axis])}; at most {dim - spare} allowed"
            )


@converts("Pad", (1, 12), inputs=(3, 4), attrs={"pad_mode": Choice(allowed=_MODES, required=True)})
def pad(ctx, layer, inputs):
    data = inputs[0]
    mode = layer.attrs["pad_mode"]
    begins_value, ends_value = ctx.value(inputs[1]), ctx.value(inputs[2])
    if begins_value is None or ends_value is None:
        if mode == "symmetric":
            raise B2SError(f"{layer.where()}: pad_mode='symmetric' needs constant pads")
        _run_time_pad(ctx, layer, inputs, mode)
        return
    begins = [int(v) for v in begins_value.reshape(-1)]
    ends = [int(v) for v in ends_value.reshape(-1)]
    rank = ctx.rank(layer, data)
    if len(begins) != rank or len(ends) != rank:
        raise B2SError(
            f"{layer.where()}: pads_begin and pads_end need {rank} values each (the data "
            f"rank), got {len(begins)} and {len(ends)}"
        )
    shape = ctx.shape(data) or (None,) * rank
    for axis, (dim, begin, end) in enumerate(zip(shape, begins, ends, strict=True)):
        if dim is not None and dim + begin + end < 0:
            raise B2SError(
                f"{layer.where()}: pads_begin[{axis}]={begin} and pads_end[{axis}]={end} crop "
                f"axis {axis} (size {dim}) below zero"
            )
    grow_begin, grow_end = [max(v, 0) for v in begins], [max(v, 0) for v in ends]
    _check_reach(ctx, layer, data, mode, grow_begin, grow_end)
    crops = [
        # min(): -INT64_MIN (a corrupt pad) does not fit in int64; Slice clamps anyway.
        (axis, min(max(-begin, 0), _END), end if end < 0 else _END)
        for axis, (begin, end) in enumerate(zip(begins, ends, strict=True))
        if begin < 0 or end < 0
    ]
    output = ctx.out(layer)
    padded_name = output if not crops else None
    if not any(grow_begin) and not any(grow_end):
        padded = data
    elif mode == "symmetric":
        padded = _symmetric(ctx, data, grow_begin, grow_end)
    else:
        operands = [_i64(ctx, "pads", grow_begin + grow_end)]
        if mode == "constant" and len(inputs) > 3:
            operands.append(inputs[3])
        padded = _onnx_pad(ctx, layer, data, operands, padded_name, mode)
    if not crops:
        if padded != output:
            ctx.one("Identity", [padded], output)
        return
    axes, starts, stops = (list(column) for column in zip(*crops, strict=True))
    ctx.one(
        "Slice",
        [padded, _i64(ctx, "starts", starts), _i64(ctx, "ends", stops), _i64(ctx, "axes", axes)],
        output,
    )
