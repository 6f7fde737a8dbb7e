"""Element-type conversions and pass-throughs: Identity, Convert, ConvertLike and
ConvertPromoteTypes (FakeConvert's float8 emulation lives in ``fake_convert``).

ONNX's Cast does what OpenVINO's CPU plugin does (floats to integers truncate toward zero,
then wrap) except from float to boolean: NaN converts to false in OpenVINO, to true in
ONNX, so that conversion is |x| > 0.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType
from b2s_onnx.ir.weights import element_type, onnx_type

FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def cast(ctx, tensor: str, target: int, output: str) -> None:
    """``tensor`` converted to ``target`` as OpenVINO converts (see the module doc)."""
    source = ctx.type_of(tensor)
    if source == target:
        ctx.one("Identity", [tensor], output)
    elif target == TensorProto.BOOL and source in FLOATS:
        zero = ctx.const("zero", np.asarray(0, NUMPY_OF_ONNX.get(source, np.float32)))
        ctx.one("Greater", [ctx.one("Abs", [tensor]), zero], output)
    else:
        ctx.one("Cast", [tensor], output, to=target)


@converts("Convert", (1,), inputs=(1, 1), attrs={"destination_type": ElementType(required=True)})
def convert(ctx, layer, inputs):
    """bf16 tensors are computed as f32, but a Convert to bf16 rounds its values to bf16
    (to nearest, ties to even) as the CPU plugin does even under the f32 hint (measured:
    1000.3 -> 1000, 2049 -> 2048; it also flushes bf16 subnormals to zero, which this
    does not). A Convert to f16 keeps f32 values, as the plugin does."""
    target = onnx_type(layer.attrs["destination_type"])
    ctx.types[ctx.out(layer)] = target  # the attribute decides, not the port's precision
    convert_to(ctx, inputs[0], layer.attrs["destination_type"], ctx.out(layer))


def convert_to(ctx, tensor: str, ir_type: str, output: str) -> None:
    """``tensor`` converted to the IR element type ``ir_type``: a bf16 target is computed
    as f32 holding values rounded to bf16 (see :func:`convert`), any other as :func:`cast`.
    Shared by every conversion whose target may be bf16 (Convert, ConvertLike,
    ConvertPromoteTypes), so that all of them round as the plugin does."""
    if ir_type != "bf16":
        cast(ctx, tensor, onnx_type(ir_type), output)
        return
    source = tensor
    if ctx.type_of(source) != TensorProto.FLOAT:
        source = ctx.one("Cast", [source], to=TensorProto.FLOAT)
    narrowed = ctx.one("Cast", [source], to=TensorProto.BFLOAT16)
    ctx.one("Cast", [narrowed], output, to=TensorProto.FLOAT)


def _ir_type(layer, port) -> str | None:
    """The IR element type a port declares (``BF16`` -> ``bf16``), or None if it has none."""
    return None if port.precision is None else element_type(port.precision, layer.where())


@converts("ConvertLike", (1,), inputs=(2, 2), attrs={})
def convert_like(ctx, layer, inputs):
    """The target is the element type of ``like``; a bf16 ``like`` is computed as f32, so
    its type is read from the IR port (the output's, else the ``like`` input's) to round to
    bf16 as Convert does, instead of copying f32 values through unchanged."""
    ports = [port for port in (layer.outputs[:1] + layer.inputs[1:2]) if port.precision]
    if ports and _ir_type(layer, ports[0]) == "bf16":
        convert_to(ctx, inputs[0], "bf16", ctx.out(layer))
        return
    cast(ctx, inputs[0], ctx.type_of(inputs[1]), ctx.out(layer))


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
    """OpenVINO resolves the common type when it builds the model (its promotion table and
    the three attributes) and writes it on both output ports, so the conversion is two Casts
    to the declared types; the attributes are validated, not re-derived."""
    if any(port.precision is None for port in layer.outputs[:2]) or len(layer.outputs) != 2:
        raise B2SError(f"{layer.where()}: both output ports must declare their element type")
    for index, tensor in enumerate(inputs):
        output = ctx.out(layer, index)
        if _ir_type(layer, layer.outputs[index]) == "bf16":
            convert_to(ctx, tensor, "bf16", output)
        else:
            cast(ctx, tensor, ctx.types[output], output)
