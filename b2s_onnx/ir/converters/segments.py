"""Layers that reduce or complete rows by an id: SegmentMax, SparseFillEmptyRows."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice
from b2s_onnx.ir.reader import Layer


def _lowest(dtype: np.dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return np.asarray(np.finfo(dtype).min, dtype)
    return np.asarray(np.iinfo(dtype).min, dtype)


def _need_opset(ctx: ConversionContext, layer: Layer, first: int) -> None:
    if ctx.opset < first:
        raise B2SError(
            f"{layer.where()}: needs ONNX opset {first} or later (converting to opset {ctx.opset})"
        )


@converts(
    "SegmentMax",
    (16,),
    inputs=(2, 3),
    attrs={"fill_mode": Choice(allowed=("zero", "lowest"), required=True)},
)
def segment_max(ctx, layer, inputs):
    """Rows scattered with ScatterElements' 'max' onto the type's lowest value; segments no
    row reaches then take the fill value. Without num_segments there are max(id) + 1."""
    _need_opset(ctx, layer, 18)
    data, segment_ids = inputs[:2]
    ids = ctx.int64(segment_ids)
    if len(inputs) > 2:
        count = ctx.one("Reshape", [ctx.int64(inputs[2]), int64s(ctx, "one", [1])])
    else:
        top = ctx.reduce("ReduceMax", ids, [0], keepdims=True)
        count = ctx.one("Add", [top, int64s(ctx, "one", [1])])
    dtype = np.dtype(NUMPY_OF_ONNX[ctx.type_of(data)])
    rank = ctx.rank(layer, data)
    data_shape = ctx.one("Shape", [data])
    row_shape = ctx.one("Slice", [data_shape, int64s(ctx, "one", [1]), int64s(ctx, "end", [rank])])
    out_shape = ctx.one("Concat", [count, row_shape], axis=0)
    lowest = ctx.const("lowest", _lowest(dtype))
    start = ctx.one("Expand", [lowest, out_shape])
    spread = (
        ctx.one("Unsqueeze", [ids, int64s(ctx, "rows", list(range(1, rank)))]) if rank > 1 else ids
    )
    targets = ctx.one("Expand", [spread, data_shape])
    reduced = ctx.one("ScatterElements", [start, targets, data], axis=0, reduction="max")
    if layer.attrs["fill_mode"] == "lowest":
        ctx.one("Identity", [reduced], ctx.out(layer))
        return
    positions = ctx.one(
        "Range", [int64s(ctx, "zero", 0), ctx.one("Squeeze", [count]), int64s(ctx, "step", 1)]
    )
    reached = ctx.one("Equal", [ctx.one("Unsqueeze", [positions, int64s(ctx, "col", [1])]), ids])
    used = ctx.reduce(
        "ReduceMax", ctx.one("Cast", [reached], to=TensorProto.INT32), [1], keepdims=False
    )
    used = ctx.one("Cast", [used], to=TensorProto.BOOL)
    if rank > 1:
        used = ctx.one("Unsqueeze", [used, int64s(ctx, "rows", list(range(1, rank)))])
    zero = ctx.const("zero", np.zeros((), dtype))
    ctx.one("Where", [used, reduced, zero], ctx.out(layer))


@converts("SparseFillEmptyRows", (16,), inputs=(4, 4), attrs={})
def sparse_fill_empty_rows(ctx, layer, inputs):
    """Each empty row gets an entry (row, 0) with the default value; all entries are then
    sorted by (row, column), as OpenVINO outputs them."""
    values, dense_shape, indices, default = inputs
    index_type = ctx.type_of(indices)
    entries = ctx.int64(indices)
    shape = ctx.int64(dense_shape)
    rows = ctx.one("Gather", [shape, int64s(ctx, "rows", 0)], axis=0)
    columns = ctx.one("Gather", [shape, int64s(ctx, "columns", 1)], axis=0)
    entry_rows = ctx.one("Gather", [entries, int64s(ctx, "row", 0)], axis=1)
    positions = ctx.one("Range", [int64s(ctx, "zero", 0), rows, int64s(ctx, "step", 1)])
    hits = ctx.one(
        "Equal", [ctx.one("Unsqueeze", [positions, int64s(ctx, "col", [1])]), entry_rows]
    )
    filled = ctx.reduce(
        "ReduceMax", ctx.one("Cast", [hits], to=TensorProto.INT32), [1], keepdims=False
    )
    empty = ctx.one("Not", [ctx.one("Cast", [filled], to=TensorProto.BOOL)])
    ctx.one("Identity", [empty], ctx.out(layer, 2))
    empty_rows = ctx.one("Transpose", [ctx.one("NonZero", [empty])], perm=[1, 0])
    added = ctx.one(
        "Concat", [empty_rows, ctx.one("Mul", [empty_rows, int64s(ctx, "zero", 0)])], axis=1
    )
    all_entries = ctx.one("Concat", [entries, added], axis=0)
    fill = ctx.one(
        "Expand",
        [
            ctx.one("Reshape", [default, int64s(ctx, "scalar", [])]),
            ctx.one("Shape", [ctx.one("Squeeze", [empty_rows, int64s(ctx, "col", [1])])]),
        ],
    )
    all_values = ctx.one("Concat", [values, fill], axis=0)
    keys = ctx.one(
        "Add",
        [
            ctx.one(
                "Mul", [ctx.one("Gather", [all_entries, int64s(ctx, "row", 0)], axis=1), columns]
            ),
            ctx.one("Gather", [all_entries, int64s(ctx, "column", 1)], axis=1),
        ],
    )
    total = ctx.one("Shape", [keys])
    _, order = ctx.node(
        "TopK", [keys, total], [ctx.tmp("keys"), ctx.tmp("order")], largest=0, sorted=1
    )
    sorted_entries = ctx.one("Gather", [all_entries, order], axis=0)
    ctx.one("Cast", [sorted_entries], ctx.out(layer, 0), to=index_type)
    ctx.one("Gather", [all_values, order], ctx.out(layer, 1), axis=0)
