"""Type conversions between operands: ConvertPromoteTypes.

OpenVINO resolves the common element type when it builds the model (by its promotion table
and the three attributes) and writes it on both output ports of the IR, so the conversion
is two Casts to the declared types; the attributes are validated, not re-derived.
"""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType


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
    if any(port.precision is None for port in layer.outputs[:2]) or len(layer.outputs) != 2:
        raise B2SError(f"{layer.where()}: both output ports must declare their element type")
    for index, tensor in enumerate(inputs):
        output = ctx.out(layer, index)
        target = ctx.types[output]
        if ctx.type_of(tensor) == target:
            ctx.one("Identity", [tensor], output)
        else:
            ctx.one("Cast", [tensor], output, to=target)
