"""Layers that pass a tensor through or change only its element type: Identity,
ConvertPromoteTypes."""

from __future__ import annotations

from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType


@converts("Identity", (16,), inputs=(1, 1), attrs={})
def identity(ctx, layer, inputs):
    ctx.one("Identity", inputs, ctx.out(layer))


@converts(
    "ConvertPromoteTypes",
    (14,),
    inputs=(2, 2),
    attrs={
        "promote_unsafe": Bool(default=False),
        "pytorch_scalar_promotion": Bool(default=False),
        "u64_integer_promotion_target": ElementType(default="f32"),
    },
)
def convert_promote_types(ctx, layer, inputs):
    """The promoted type is what the IR declares on both outputs (OpenVINO resolved the
    promotion rules when it wrote the IR): each input is cast to it."""
    for index, tensor in enumerate(inputs):
        ctx.one("Cast", [tensor], ctx.out(layer, index), to=ctx.type_of(ctx.out(layer, index)))
