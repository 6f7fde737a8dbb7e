"""Inverse-14: the inverse of each square matrix in the last two axes.

ONNX has no inverse, so Gauss-Jordan elimination with partial pivoting is unrolled over the
(static) matrix size: the matrix augmented with the identity, and for each column k the row
with the largest magnitude swapped into place, scaled to a unit pivot and subtracted from
every other row. ``adjoint`` inverts the transpose instead (real matrices).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool

#: Matrices up to this size are unrolled (about 20 nodes per column).
MAX_SIZE = 64


def _i64(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, np.int64))


def _column(ctx: ConversionContext, tensor: str, index: int) -> str:
    """Column ``index`` of the last axis, kept as [..., rows, 1]."""
    return ctx.one(
        "Slice",
        [tensor, _i64(ctx, "s", [index]), _i64(ctx, "e", [index + 1]), _i64(ctx, "a", [-1])],
    )


def _row(ctx: ConversionContext, tensor: str, index: int) -> str:
    """Row ``index`` of the second-to-last axis, kept as [..., 1, columns]."""
    return ctx.one(
        "Slice",
        [tensor, _i64(ctx, "s", [index]), _i64(ctx, "e", [index + 1]), _i64(ctx, "a", [-2])],
    )


@converts("Inverse", (14,), inputs=(1, 1), attrs={"adjoint": Bool(default=False)})
def inverse(ctx, layer, inputs):
    data = inputs[0]
    shape = ctx.shape(data)
    if shape is None or len(shape) < 2 or shape[-1] is None or shape[-1] != shape[-2]:
        raise B2SError(
            f"{layer.where()}: input 'data' needs square matrices of a static size in its "
            f"last two axes, got {shape}"
        )
    size = shape[-1]
    if size > MAX_SIZE:
        raise B2SError(f"{layer.where()}: matrices of size {size} exceed {MAX_SIZE}")
    element = ctx.type_of(data)
    if element not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        raise B2SError(f"{layer.where()}: input 'data' must be a float tensor")
    dtype = NUMPY_OF_ONNX.get(element, np.float32)
    rank = len(shape)
    matrix = data
    if layer.attrs["adjoint"]:
        matrix = ctx.one("Transpose", [data], perm=[*range(rank - 2), rank - 1, rank - 2])
    identity = ctx.one(
        "Expand", [ctx.const("identity", np.eye(size, dtype=dtype)), ctx.one("Shape", [matrix])]
    )
    augmented = ctx.one("Concat", [matrix, identity], axis=-1)
    rows = _i64(ctx, "rows", np.arange(size).reshape(size, 1))
    for k in range(size):
        below = ctx.one(
            "Slice",
            [
                _column(ctx, augmented, k),
                _i64(ctx, "s", [k]),
                _i64(ctx, "e", [size]),
                _i64(ctx, "a", [-2]),
            ],
        )
        pivot = ctx.one(
            "Add",
            [ctx.one("ArgMax", [ctx.one("Abs", [below])], axis=-2, keepdims=1), _i64(ctx, "k", k)],
        )
        at_k = ctx.one("Equal", [rows, _i64(ctx, "k", k)])
        at_pivot = ctx.one("Equal", [rows, pivot])
        order = ctx.one(
            "Where", [at_k, pivot, ctx.one("Where", [at_pivot, _i64(ctx, "k", k), rows])]
        )
        order = ctx.one("Expand", [order, ctx.one("Shape", [augmented])])
        augmented = ctx.one("GatherElements", [augmented, order], axis=-2)
        pivot_row = _row(ctx, augmented, k)
        unit_row = ctx.one("Div", [pivot_row, _column(ctx, pivot_row, k)])
        factors = ctx.one(
            "Sub",
            [_column(ctx, augmented, k), ctx.const("e_k", np.eye(size, dtype=dtype)[:, k : k + 1])],
        )
        augmented = ctx.one("Sub", [augmented, ctx.one("Mul", [factors, unit_row])])
    ctx.one(
        "Slice",
        [augmented, _i64(ctx, "s", [size]), _i64(ctx, "e", [2 * size]), _i64(ctx, "a", [-1])],
        ctx.out(layer),
    )
