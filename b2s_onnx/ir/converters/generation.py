"""Layers that generate a tensor from sizes: Eye."""

from __future__ import annotations

import numpy as np

from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import ElementType
from b2s_onnx.ir.weights import onnx_type


@converts("Eye", (9,), inputs=(3, 4), attrs={"output_type": ElementType(required=True)})
def eye(ctx, layer, inputs):
    """Ones where column - row equals the diagonal index; sizes and index may be run-time
    values, and a batch shape repeats the matrix."""

    def scalar(tensor: str) -> str:
        return ctx.one("Reshape", [ctx.int64(tensor), ctx.const("scalar", np.zeros(0, np.int64))])

    rows, columns, diagonal = (scalar(t) for t in inputs[:3])
    zero, one = ctx.const("zero", np.asarray(0)), ctx.const("one", np.asarray(1))
    row = ctx.one(
        "Unsqueeze", [ctx.one("Range", [zero, rows, one]), ctx.const("col", np.asarray([1]))]
    )
    column = ctx.one("Range", [zero, columns, one])
    hit = ctx.one("Equal", [ctx.one("Sub", [column, row]), diagonal])
    matrix = ctx.one("Cast", [hit], to=onnx_type(layer.attrs["output_type"]))
    if len(inputs) < 4:
        ctx.one("Identity", [matrix], ctx.out(layer))
        return
    size = ctx.one("Shape", [matrix])
    shape = ctx.one("Concat", [ctx.int64(inputs[3]), size], axis=0)
    ctx.one("Expand", [matrix, shape], ctx.out(layer))
