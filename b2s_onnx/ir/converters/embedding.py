"""Embedding bags: rows of a table gathered by index, optionally weighted, and summed (or
averaged) per bag. EmbeddingBagOffsets(Sum), EmbeddingBagPacked(Sum), EmbeddingSegmentsSum.

Bags of offsets and segments are summed with ScatterElements' 'add' reduction, which adds
rows in index order as OpenVINO's loop does; an empty bag takes the row at
``default_index`` when one is given, zeros otherwise.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import INT64_MAX, int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice
from b2s_onnx.ir.reader import Layer

REDUCTION = {"reduction": Choice(allowed=("sum", "mean"), default="sum")}


def _reduction(layer: Layer) -> str:
    return layer.attrs["reduction"] if layer.version == "opset15" else "sum"


def _weighted_rows(
    ctx: ConversionContext, layer: Layer, table: str, indices: str, weights: str | None
) -> str:
    """table[indices] flattened to [len(indices), row size], times the per-sample weights."""
    rows = ctx.one("Flatten", [ctx.one("Gather", [table, ctx.int64(indices)], axis=0)], axis=1)
    if weights is None:
        return rows
    if _reduction(layer) != "sum":
        raise B2SError(f"{layer.where()}: per_sample_weights are allowed only with reduction='sum'")
    return ctx.one("Mul", [rows, ctx.one("Unsqueeze", [weights, int64s(ctx, "col", [1])])])


def _bags(
    ctx: ConversionContext,
    layer: Layer,
    table: str,
    rows: str,
    bag_of_row: str,
    bags: str,
    default_index: str | None,
) -> None:
    """Sums (or averages) ``rows`` [n, size] into ``bags`` (a 1-element int64 tensor) bags
    by ``bag_of_row`` [n], and shapes the result [bags, *row shape]."""
    dtype = NUMPY_OF_ONNX[ctx.type_of(table)]
    row_shape = ctx.one(
        "Slice",
        [
            ctx.one("Shape", [table]),
            int64s(ctx, "one", [1]),
            int64s(ctx, "end", [INT64_MAX]),
        ],
    )
    size = ctx.one(
        "Slice", [ctx.one("Shape", [rows]), int64s(ctx, "one", [1]), int64s(ctx, "two", [2])]
    )
    zero = ctx.const("zero", np.zeros((), dtype))
    totals = ctx.one("Expand", [zero, ctx.one("Concat", [bags, size], axis=0)])
    targets = ctx.one(
        "Expand",
        [ctx.one("Unsqueeze", [bag_of_row, int64s(ctx, "col", [1])]), ctx.one("Shape", [rows])],
    )
    totals = ctx.one("ScatterElements", [totals, targets, rows], axis=0, reduction="add")
    ones = ctx.one("Expand", [ctx.const("one", np.ones((), dtype)), ctx.one("Shape", [bag_of_row])])
    counts = ctx.one(
        "ScatterElements",
        [ctx.one("Expand", [zero, bags]), bag_of_row, ones],
        axis=0,
        reduction="add",
    )
    counts = ctx.one("Unsqueeze", [counts, int64s(ctx, "col", [1])])
    empty = ctx.one("Equal", [counts, zero])
    if _reduction(layer) == "mean":
        totals = ctx.one(
            "Div", [totals, ctx.one("Max", [counts, ctx.const("one", np.ones((), dtype))])]
        )
    if default_index is not None:
        fallback = ctx.one(
            "Flatten",
            [
                ctx.one(
                    "Gather",
                    [
                        table,
                        ctx.one("Reshape", [ctx.int64(default_index), int64s(ctx, "one_row", [1])]),
                    ],
                    axis=0,
                )
            ],
            axis=1,
        )
        totals = ctx.one("Where", [empty, fallback, totals])
    shape = ctx.one("Concat", [bags, row_shape], axis=0)
    ctx.one("Reshape", [totals, shape], ctx.out(layer))


def _optional(inputs: list[str], index: int) -> str | None:
    return inputs[index] if len(inputs) > index and inputs[index] else None


def _require_opset(ctx: ConversionContext, layer: Layer) -> None:
    if ctx.opset < 16:
        raise B2SError(
            f"{layer.where()}: needs ONNX opset 16 or later for ScatterElements' 'add' "
            f"(converting to opset {ctx.opset})"
        )


@converts("EmbeddingBagOffsetsSum", (3,), inputs=(3, 5), attrs={})
@converts("EmbeddingBagOffsets", (15,), inputs=(3, 5), attrs=REDUCTION)
def embedding_bag_offsets(ctx, layer, inputs):
    """Bag b holds indices[offsets[b]:offsets[b + 1]]: row i belongs to the bag of the
    last offset at or before i."""
    _require_opset(ctx, layer)
    table, indices, offsets = inputs[:3]
    rows = _weighted_rows(ctx, layer, table, indices, _optional(inputs, 4))
    positions = ctx.one(
        "Range",
        [
            int64s(ctx, "zero", 0),
            ctx.one("Squeeze", [ctx.one("Shape", [indices])]),
            int64s(ctx, "step", 1),
        ],
    )
    started = ctx.one(
        "LessOrEqual",
        [ctx.int64(offsets), ctx.one("Unsqueeze", [positions, int64s(ctx, "col", [1])])],
    )
    bag_of_row = ctx.one(
        "Sub",
        [
            ctx.reduce(
                "ReduceSum", ctx.one("Cast", [started], to=TensorProto.INT64), [1], keepdims=False
            ),
            int64s(ctx, "one", 1),
        ],
    )
    bags = ctx.one("Shape", [offsets])
    _bags(ctx, layer, table, rows, bag_of_row, bags, _optional(inputs, 3))


@converts("EmbeddingSegmentsSum", (3,), inputs=(4, 6), attrs={})
def embedding_segments_sum(ctx, layer, inputs):
    _require_opset(ctx, layer)
    table, indices, segment_ids, num_segments = inputs[:4]
    rows = _weighted_rows(ctx, layer, table, indices, _optional(inputs, 5))
    bags = ctx.one("Reshape", [ctx.int64(num_segments), int64s(ctx, "one_value", [1])])
    _bags(ctx, layer, table, rows, ctx.int64(segment_ids), bags, _optional(inputs, 4))


@converts("EmbeddingBagPackedSum", (3,), inputs=(2, 3), attrs={})
@converts("EmbeddingBagPacked", (15,), inputs=(2, 3), attrs=REDUCTION)
def embedding_bag_packed(ctx, layer, inputs):
    """Every bag has the same number of indices: a reduction over the bag axis."""
    table, indices = inputs[:2]
    gathered = ctx.one("Gather", [table, ctx.int64(indices)], axis=0)
    weights = _optional(inputs, 2)
    if weights is not None:
        if _reduction(layer) != "sum":
            raise B2SError(
                f"{layer.where()}: per_sample_weights are allowed only with reduction='sum'"
            )
        rank = ctx.rank(layer, table) + 1
        shaped = ctx.one("Unsqueeze", [weights, int64s(ctx, "rows", list(range(2, rank)))])
        gathered = ctx.one("Mul", [gathered, shaped])
    op = "ReduceMean" if _reduction(layer) == "mean" else "ReduceSum"
    ctx.reduce(op, gathered, [1], keepdims=False, output=ctx.out(layer))
