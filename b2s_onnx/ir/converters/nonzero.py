"""NonZero-3: the coordinates of non-zero elements, a [rank, count] tensor whose second
dimension depends on the data.

The IR may declare that dimension static (old converters wrote the input size); the
declared size is dropped here so that no later layer folds a shape that is only known at
run time.
"""

from __future__ import annotations

from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import ElementType
from b2s_onnx.ir.reader import Layer

#: Element types onnxruntime's NonZero takes as they are; others are compared with 0 first.
_NATIVE = {
    TensorProto.BOOL,
    TensorProto.FLOAT,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
}


@converts(
    "NonZero",
    (3,),
    inputs=(1, 1),
    attrs={"output_type": ElementType(allowed=("i32", "i64"), default="i64")},
)
def non_zero(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data = inputs[0]
    if ctx.type_of(data) not in _NATIVE:
        data = ctx.one("Cast", [data], to=TensorProto.BOOL)
    out = ctx.out(layer)
    if layer.attrs["output_type"] == "i64":
        ctx.one("NonZero", [data], out)
    else:
        ctx.one("Cast", [ctx.one("NonZero", [data])], out, to=TensorProto.INT32)
    shape = ctx.shape(inputs[0])
    ctx.shapes[out] = None if shape is None else (max(len(shape), 1), None)
