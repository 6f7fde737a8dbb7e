"""Layers that search sorted values or collect distinct ones: Bucketize, SearchSorted,
Unique."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.kernel_types import cast, kernel_type
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType
from b2s_onnx.ir.weights import onnx_type

INDEX_TYPES = ("i32", "i64")


def _count_below(
    ctx: ConversionContext,
    values: str,
    boundaries: str,
    inclusive: bool,
    output: str,
    to: int,
    empty: bool = False,
    upper_bound: bool = False,
) -> str:
    """For each value, how many boundaries lie below it (or at it, when ``inclusive``):
    the boundaries are compared along a new last axis and the hits summed.

    With ``upper_bound`` the inclusive count is the number of boundaries the value is not
    below, as Bucketize's ``std::upper_bound`` computes it, so that a NaN value counts every
    boundary (SearchSorted's CPU kernel counts none; the exclusive count is 0 for NaN in
    both). ``empty`` (no boundaries) gives zeros without reducing: onnxruntime's ReduceSum
    over a zero-length axis returns its input unchanged instead of dropping the axis."""
    if empty:
        zeros = ctx.one(
            "ConstantOfShape",
            [ctx.one("Shape", [values])],
            value=helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        )
        return ctx.one("Cast", [zeros], output, to=to)
    wide = ctx.one("Unsqueeze", [values, ctx.const("last", np.asarray([-1]))])
    if inclusive and upper_bound:
        hits = ctx.one("Not", [ctx.one("Less", [wide, boundaries])])
    else:
        hits = ctx.one("LessOrEqual" if inclusive else "Less", [boundaries, wide])
    hits = ctx.one("Cast", [hits], to=TensorProto.INT64)
    total = ctx.reduce("ReduceSum", hits, [-1], keepdims=False)
    return ctx.one("Cast", [total], output, to=to)


def _no_boundaries(layer, index: int) -> bool:
    """Whether input ``index`` statically has a zero-length last axis (no boundaries)."""
    dims = layer.inputs[index].dims if len(layer.inputs) > index else None
    return bool(dims) and dims[-1] == 0


def _common_type(ctx: ConversionContext, first: str, second: str) -> tuple[str, str]:
    """Compares need one element type; mixed inputs are compared as f64 (exact for every
    integer and float type the IR has, but i64 beyond 2**53)."""
    if ctx.type_of(first) == ctx.type_of(second):
        return first, second
    return (
        ctx.one("Cast", [first], to=TensorProto.DOUBLE),
        ctx.one("Cast", [second], to=TensorProto.DOUBLE),
    )


@converts(
    "Bucketize",
    (3,),
    inputs=(2, 2),
    attrs={
        "output_type": ElementType(allowed=INDEX_TYPES, default="i64"),
        "with_right_bound": Bool(default=True),
    },
)
def bucketize(ctx, layer, inputs):
    """Bucket i holds (b[i-1], b[i]] with right bounds, [b[i-1], b[i]) without: the index
    is the number of boundaries below the value (or at it, without right bounds)."""
    data, buckets = _common_type(ctx, *inputs)
    _count_below(
        ctx,
        data,
        buckets,
        not layer.attrs["with_right_bound"],
        ctx.out(layer),
        onnx_type(layer.attrs["output_type"]),
        empty=_no_boundaries(layer, 1),
        upper_bound=True,
    )


@converts("SearchSorted", (15,), inputs=(2, 2), attrs={"right_mode": Bool(default=False)})
def search_sorted(ctx, layer, inputs):
    """The insertion index of each value in the innermost sorted sequence: the number of
    sequence elements below it (at or below it in right mode)."""
    sequence, values = _common_type(ctx, *inputs)
    rank = ctx.rank(layer, inputs[0])
    if rank > 1:
        sequence = ctx.one("Unsqueeze", [sequence, ctx.const("rows", np.asarray([-2]))])
    _count_below(
        ctx,
        values,
        sequence,
        layer.attrs["right_mode"],
        ctx.out(layer),
        TensorProto.INT64,
        empty=_no_boundaries(layer, 0),
    )


@converts(
    "Unique",
    (10,),
    inputs=(1, 2),
    attrs={
        "sorted": Bool(default=True),
        "index_element_type": ElementType(allowed=INDEX_TYPES, default="i64"),
        "count_element_type": ElementType(allowed=INDEX_TYPES, default="i64"),
    },
)
def unique(ctx, layer, inputs):
    """ONNX Unique has the same four outputs (values, first indices, reverse indices,
    counts), in sorted or first-seen order. onnxruntime's kernel takes f32/f64/i8/i64
    only: other integer types run widened to one that holds all their values."""
    attrs = {"sorted": int(layer.attrs["sorted"])}
    if len(inputs) > 1:
        axis = ctx.require_value(layer, inputs[1], "the axis input").reshape(-1)
        if axis.size != 1:
            raise B2SError(f"{layer.where()}: input 'axis' must hold one value, got {axis.size}")
        attrs["axis"] = int(axis[0])
    outputs = [ctx.tmp(f"unique{i}") for i in range(4)]
    data, elem = inputs[0], ctx.type_of(inputs[0])
    # A type that holds every value: the same order, the same equalities.
    wide = kernel_type(ctx, layer, "Unique", elem)
    if wide is not None:
        data = cast(ctx, data, wide)
    ctx.node("Unique", [data], outputs, **attrs)
    if wide is None:
        ctx.one("Identity", [outputs[0]], ctx.out(layer, 0))
    else:
        ctx.one("Cast", [outputs[0]], ctx.out(layer, 0), to=elem)
    kinds = ["index_element_type", "index_element_type", "count_element_type"]
    for port, kind in enumerate(kinds, start=1):
        ctx.one("Cast", [outputs[port]], ctx.out(layer, port), to=onnx_type(layer.attrs[kind]))
