"""Layers that select or forward elements without arithmetic: Identity and NonZero.

OpenVINO's ONNX frontend writes ``Identity-16`` for an ONNX Identity that survives its
transformations (a graph whose output is an input, a Clip with no bounds), and ``NonZero-3``
for ONNX NonZero and the Compress/boolean-mask patterns built from it. Both have direct ONNX
counterparts; NonZero's output element type is OpenVINO's ``output_type`` (ONNX's is int64).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import ElementType

#: The input types onnxruntime's NonZero kernel is registered for.
KERNEL_TYPES = frozenset(
    {TensorProto.BOOL, TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8}
)


@converts("Identity", (16,), inputs=(1, 1), attrs={})
def identity(ctx, layer, inputs):
    ctx.one("Identity", [inputs[0]], ctx.out(layer))


@converts(
    "NonZero",
    (3,),
    inputs=(1, 1),
    attrs={"output_type": ElementType(allowed=("i32", "i64"), default="i64")},
)
def non_zero(ctx, layer, inputs):
    """onnxruntime's NonZero kernel takes only bool, float, int32, int64 and uint8, so other
    types are compared with zero first (NaN counts as non-zero, as in OpenVINO); the
    [rank, count] result is cast to i32 when OpenVINO's ``output_type`` asks for it."""
    data = inputs[0]
    if ctx.type_of(data) not in KERNEL_TYPES:
        zero = ctx.const("zero", np.zeros((), NUMPY_OF_ONNX[ctx.type_of(data)]))
        data = ctx.one("Not", [ctx.one("Equal", [data, zero])])
    if layer.attrs["output_type"] == "i32":
        ctx.one("Cast", [ctx.one("NonZero", [data])], ctx.out(layer), to=TensorProto.INT32)
    else:
        ctx.one("NonZero", [data], ctx.out(layer))
