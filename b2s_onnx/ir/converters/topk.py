"""TopK-1/3/11: every mode, sort type, ``stable`` and index element type.

ONNX's TopK (sorted by value) puts equal values in index order, which is what OpenVINO's
``stable`` promises, so stable and unstable TopK are the same here. ``sort='index'``
re-orders the selected entries by index with a second TopK over the negated indices. A
constant ``k`` larger than a static axis is refused, as OpenVINO's CPU plugin refuses it
(its shape rules would give k entries); a run-time ``k`` is clamped to the axis, since
onnxruntime would fail mid-run instead. Element types ONNX's
TopK lacks (8/16-bit integers, f16) are widened exactly and narrowed back; u64 is shifted
into int64's range.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Axis, Bool, Choice, ElementType
from b2s_onnx.ir.reader import Layer

_TOPK = {
    "axis": Axis(required=True),
    "mode": Choice(allowed=("max", "min"), required=True),
    "sort": Choice(allowed=("value", "index", "none"), required=True),
}
_TOPK_3 = {**_TOPK, "index_element_type": ElementType(allowed=("i32", "i64"), default="i32")}
#: The widened type onnxruntime's TopK accepts, for each element type it does not.
_WIDER = {
    TensorProto.INT8: TensorProto.INT32,
    TensorProto.INT16: TensorProto.INT32,
    TensorProto.UINT8: TensorProto.INT32,
    TensorProto.UINT16: TensorProto.INT32,
    TensorProto.UINT32: TensorProto.INT64,
    TensorProto.FLOAT16: TensorProto.FLOAT,
    TensorProto.BFLOAT16: TensorProto.FLOAT,
}


def _k_vector(ctx: ConversionContext, layer: Layer, data: str, k: str, axis: int) -> str:
    """``k`` as the [1] int64 tensor ONNX wants, at most the axis length."""
    value = ctx.value(k)
    shape = ctx.shape(data)
    dim = None if shape is None else shape[axis]
    if value is not None:
        if value.size != 1 or int(value.reshape(-1)[0]) < 0:
            raise B2SError(f"{layer.where()}: input 'k' must be one non-negative value")
        count = int(value.reshape(-1)[0])
        if dim is not None:
            if count > dim:
                raise B2SError(
                    f"{layer.where()}: input 'k': k={count} exceeds the {dim} elements of "
                    f"axis {axis} (OpenVINO refuses this too)"
                )
            return _i64(ctx, "k", [count])
    k_vector = ctx.one("Reshape", [ctx.int64(k), _i64(ctx, "one", [1])])
    length = ctx.one("Shape", [data], start=axis, end=axis + 1)
    return ctx.one("Min", [k_vector, length])


def _top_k(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data, k = inputs
    rank = ctx.rank(layer, data)
    axis = layer.attrs["axis"]
    if not -rank <= axis < rank:
        raise B2SError(f"{layer.where()}: attribute axis={axis} is out of range for rank {rank}")
    axis %= rank
    element = ctx.type_of(data)
    wider = _WIDER.get(element)
    operand = ctx.one("Cast", [data], to=wider) if wider is not None else data
    if element == TensorProto.UINT64:
        # No exact wider type: moving the range down by 2**63 (wrapping) keeps the order
        # in int64; the values are then gathered from the data itself.
        half = ctx.const("half", np.asarray(2**63, np.uint64))
        operand = ctx.one("Cast", [ctx.one("Sub", [data, half])], to=TensorProto.INT64)
    k_vector = _k_vector(ctx, layer, operand, k, axis)
    largest = int(layer.attrs["mode"] == "max")
    values, indices = ctx.node(
        "TopK",
        [operand, k_vector],
        [ctx.tmp("values"), ctx.tmp("indices")],
        axis=axis,
        largest=largest,
        sorted=1,
    )
    if layer.attrs["sort"] == "index":
        order = ctx.node(
            "TopK",
            [ctx.one("Neg", [indices]), k_vector],
            [ctx.tmp("negated"), ctx.tmp("order")],
            axis=axis,
            largest=1,
            sorted=1,
        )[1]
        values = ctx.one("GatherElements", [values, order], axis=axis)
        indices = ctx.one("GatherElements", [indices, order], axis=axis)
    if wider is not None:
        values = ctx.one("Cast", [values], to=element)
    elif element == TensorProto.UINT64:
        values = ctx.one("GatherElements", [data, indices], axis=axis)
    ctx.one("Identity", [values], ctx.out(layer, 0))
    if len(layer.outputs) > 1:
        index_output = ctx.out(layer, 1)
        index_type = ctx.types.get(index_output, TensorProto.INT32)
        if index_type == TensorProto.INT64:
            ctx.one("Identity", [indices], index_output)
        else:
            ctx.one("Cast", [indices], index_output, to=index_type)


@converts("TopK", (1,), inputs=(2, 2), attrs=_TOPK)
def top_k_1(ctx, layer, inputs):
    _top_k(ctx, layer, inputs)


@converts("TopK", (3,), inputs=(2, 2), attrs=_TOPK_3)
def top_k_3(ctx, layer, inputs):
    _top_k(ctx, layer, inputs)


@converts("TopK", (11,), inputs=(2, 2), attrs={**_TOPK_3, "stable": Bool(default=False)})
def top_k_11(ctx, layer, inputs):
    _top_k(ctx, layer, inputs)
