"""ScaledDotProductAttention: softmax(Q K^T * scale + mask) V."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import INT64_MAX, int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool


def _dim(ctx: ConversionContext, tensor: str, axis: int) -> str:
    return ctx.one(
        "Slice",
        [
            ctx.one("Shape", [tensor]),
            int64s(ctx, "s", [axis]),
            int64s(ctx, "e", [axis + 1 if axis != -1 else INT64_MAX]),
        ],
    )


@converts("ScaledDotProductAttention", (13,), inputs=(3, 5), attrs={"causal": Bool(default=False)})
def scaled_dot_product_attention(ctx, layer, inputs):
    """The scale defaults to 1/sqrt(head size). A boolean mask keeps True positions (the
    others get -inf), a float mask is added; 'causal' replaces the mask by one keeping
    key positions at or before each query position."""
    query, key, value = inputs[:3]
    rank = ctx.rank(layer, query)
    if rank < 2:
        raise B2SError(f"{layer.where()}: input 'query' needs rank >= 2, got {rank}")
    kind = ctx.type_of(query)
    dtype = NUMPY_OF_ONNX.get(kind)
    if dtype is None or not np.issubdtype(dtype, np.floating):
        raise B2SError(f"{layer.where()}: input 'query' must be floating-point")
    key_rank = ctx.rank(layer, key)
    perm = [*range(key_rank - 2), key_rank - 1, key_rank - 2]
    scores = ctx.one("MatMul", [query, ctx.one("Transpose", [key], perm=perm)])
    if len(inputs) > 4:
        scale = inputs[4]
    else:
        head = ctx.one("Cast", [_dim(ctx, query, -1)], to=kind)
        scale = ctx.one("Reciprocal", [ctx.one("Sqrt", [head])])
    scores = ctx.one("Mul", [scores, scale])
    minus_inf = ctx.const("minus_inf", np.asarray(-np.inf, dtype))
    zero = ctx.const("zero", np.asarray(0.0, dtype))
    if layer.attrs["causal"]:
        queries = ctx.one("Squeeze", [_dim(ctx, query, rank - 2)])
        keys = ctx.one("Squeeze", [_dim(ctx, key, key_rank - 2)])
        rows = ctx.one("Range", [int64s(ctx, "zero", 0), queries, int64s(ctx, "one", 1)])
        columns = ctx.one("Range", [int64s(ctx, "zero", 0), keys, int64s(ctx, "one", 1)])
        keep = ctx.one(
            "LessOrEqual", [columns, ctx.one("Unsqueeze", [rows, int64s(ctx, "col", [1])])]
        )
        scores = ctx.one("Add", [scores, ctx.one("Where", [keep, zero, minus_inf])])
    elif len(inputs) > 3 and inputs[3]:
        mask = inputs[3]
        if ctx.type_of(mask) == TensorProto.BOOL:
            mask = ctx.one("Where", [mask, zero, minus_inf])
        scores = ctx.one("Add", [scores, mask])
    weights = ctx.one("Softmax", [scores], axis=-1)
    ctx.one("MatMul", [weights, value], ctx.out(layer))
