"""Linear-algebra layers: Einsum, Inverse."""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Text


@converts("Einsum", (7,), inputs=(1, 16), attrs={"equation": Text(required=True)})
def einsum(ctx, layer, inputs):
    equation = "".join(layer.attrs["equation"].split())
    operands = equation.split("->")[0].split(",")
    if len(operands) != len(inputs):
        raise B2SError(
            f"{layer.where()}: attribute equation='{equation}' names {len(operands)} "
            f"operand(s) for {len(inputs)} input(s)"
        )
    widened = _same_ellipsis_rank(ctx, layer, inputs, operands)
    ctx.one("Einsum", widened, ctx.out(layer), equation=equation)


def _same_ellipsis_rank(ctx, layer, inputs: list[str], operands: list[str]) -> list[str]:
    """The inputs with each ellipsis widened by leading 1-dims to the widest one's rank.
    OpenVINO broadcasts ellipses of different ranks numpy-style ('...abc,...cd' on
    [2,3,4,5] and [5,6]); ONNX's Einsum wants every ellipsis to stand for the same number
    of dims (onnx.checker refuses the model), and broadcasts 1-dims."""
    spans = {}
    for position, (operand, name) in enumerate(zip(operands, inputs, strict=True)):
        if "..." in operand:
            letters = len(operand.replace("...", ""))
            spans[position] = ctx.rank(layer, name) - letters
    if not spans or len(set(spans.values())) == 1:
        return inputs
    widest = max(spans.values())
    widened = list(inputs)
    for position, span in spans.items():
        if span < widest:
            start = operands[position].index("...")
            axes = np.arange(start, start + widest - span, dtype=np.int64)
            widened[position] = ctx.one("Unsqueeze", [inputs[position], ctx.const("axes", axes)])
    return widened


def _outer(ctx, column: str, row: str) -> str:
    """[..., n] x [..., m] -> [..., n, m]."""
    return ctx.one(
        "MatMul",
        [
            ctx.one("Unsqueeze", [column, ctx.const("last", np.asarray([-1]))]),
            ctx.one("Unsqueeze", [row, ctx.const("before_last", np.asarray([-2]))]),
        ],
    )


def _take(ctx, tensor: str, index: int, axis: int) -> str:
    return ctx.one("Gather", [tensor, ctx.const("index", np.asarray(index))], axis=axis)


@converts("Inverse", (14,), inputs=(1, 1), attrs={"adjoint": Bool(default=False)})
def inverse(ctx, layer, inputs):
    """ONNX has no matrix inverse: Gauss-Jordan elimination with partial pivoting, unrolled
    over the (static) matrix size; row swaps are products with per-matrix permutation
    matrices, so batches pivot independently. ``adjoint`` transposes the result."""
    data = inputs[0]
    shape = ctx.shape(data)
    if shape is None or len(shape) < 2 or shape[-1] is None or shape[-1] != shape[-2]:
        raise B2SError(
            f"{layer.where()}: input 'data' must be square matrices of static size, got "
            f"{None if shape is None else list(shape)}"
        )
    size = shape[-1]
    dtype = NUMPY_OF_ONNX[ctx.type_of(data)]
    eye = np.eye(size, dtype=dtype)
    matrix = data
    result = ctx.one("Expand", [ctx.const("eye", eye), ctx.one("Shape", [data])])
    positions = ctx.const("positions", np.arange(size, dtype=np.int64))
    for k in range(size):
        column = _take(ctx, matrix, k, -1)  # [..., n]
        below = ctx.one("Abs", [column])
        if k:
            mask = ctx.const("above", np.where(np.arange(size) < k, -1, 0).astype(dtype))
            below = ctx.one(
                "Add",
                [
                    below,
                    ctx.one(
                        "Mul", [mask, ctx.const("big", np.asarray(np.finfo(dtype).max / 4, dtype))]
                    ),
                ],
            )
        pivot_row = ctx.one("ArgMax", [below], axis=-1, keepdims=1)  # [..., 1]
        chosen = ctx.one("Cast", [ctx.one("Equal", [positions, pivot_row])], to=ctx.type_of(data))
        unit = ctx.const("unit", eye[k])
        swap = ctx.one(
            "Add",
            [
                ctx.one("Sub", [ctx.const("eye", eye), _outer(ctx, chosen, chosen)]),
                ctx.one(
                    "Sub",
                    [
                        ctx.one("Add", [_outer(ctx, unit, chosen), _outer(ctx, chosen, unit)]),
                        _outer(ctx, unit, unit),
                    ],
                ),
            ],
        )
        matrix = ctx.one("MatMul", [swap, matrix])
        result = ctx.one("MatMul", [swap, result])
        pivot = ctx.one(
            "Unsqueeze",
            [_take(ctx, _take(ctx, matrix, k, -1), k, -1), ctx.const("last", np.asarray([-1]))],
        )
        row = ctx.one("Div", [_take(ctx, matrix, k, -2), pivot])
        result_row = ctx.one("Div", [_take(ctx, result, k, -2), pivot])
        factors = ctx.one("Sub", [_take(ctx, matrix, k, -1), unit])
        matrix = ctx.one("Sub", [matrix, _outer(ctx, factors, row)])
        result = ctx.one("Sub", [result, _outer(ctx, factors, result_row)])
    if layer.attrs["adjoint"]:
        rank = len(shape)
        perm = [*range(rank - 2), rank - 1, rank - 2]
        ctx.one("Transpose", [result], ctx.out(layer), perm=perm)
    else:
        ctx.one("Identity", [result], ctx.out(layer))
