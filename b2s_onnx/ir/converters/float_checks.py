"""Layers that classify floating-point values: IsFinite, IsInf, IsNaN."""

from __future__ import annotations

from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool

#: onnxruntime's IsInf and IsNaN kernels take these; other floats are widened to f32.
_NATIVE = {TensorProto.FLOAT, TensorProto.DOUBLE}


def _float(ctx: ConversionContext, data: str) -> str:
    if ctx.type_of(data) in _NATIVE:
        return data
    return ctx.one("Cast", [data], to=TensorProto.FLOAT)


@converts("IsNaN", (10,), inputs=(1, 1), attrs={})
def is_nan(ctx, layer, inputs):
    ctx.one("IsNaN", [_float(ctx, inputs[0])], ctx.out(layer))


@converts(
    "IsInf",
    (10,),
    inputs=(1, 1),
    attrs={"detect_negative": Bool(default=True), "detect_positive": Bool(default=True)},
)
def is_inf(ctx, layer, inputs):
    ctx.one(
        "IsInf",
        [_float(ctx, inputs[0])],
        ctx.out(layer),
        detect_negative=int(layer.attrs["detect_negative"]),
        detect_positive=int(layer.attrs["detect_positive"]),
    )


@converts("IsFinite", (10,), inputs=(1, 1), attrs={})
def is_finite(ctx, layer, inputs):
    """Neither infinite nor NaN."""
    data = _float(ctx, inputs[0])
    special = ctx.one("Or", [ctx.one("IsInf", [data]), ctx.one("IsNaN", [data])])
    ctx.one("Not", [special], ctx.out(layer))
