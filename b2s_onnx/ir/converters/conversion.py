"""Element-type conversions: Convert, ConvertLike, ConvertPromoteTypes, and FakeConvert's
float8 emulation.

ONNX's Cast does what OpenVINO's CPU plugin does (floats to integers truncate toward zero,
then wrap) except from float to boolean: NaN converts to false in OpenVINO, to true in
ONNX, so that conversion is |x| > 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, ElementType
from b2s_onnx.ir.weights import onnx_type

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
    cast(ctx, inputs[0], onnx_type(layer.attrs["destination_type"]), ctx.out(layer))


@converts("ConvertLike", (1,), inputs=(2, 2), attrs={})
def convert_like(ctx, layer, inputs):
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
        cast(ctx, tensor, ctx.types[output], output)


@dataclass(frozen=True)
class Float8:
    """A float8 format: mantissa bits, smallest normal exponent, largest exponent and value."""

    mantissa: int
    min_exponent: int
    max_exponent: int
    largest: float


FLOAT8 = {
    "f8e4m3": Float8(mantissa=3, min_exponent=-6, max_exponent=8, largest=448.0),
    "f8e5m2": Float8(mantissa=2, min_exponent=-14, max_exponent=15, largest=57344.0),
}


def _f32(ctx, hint: str, value) -> str:
    return ctx.const(hint, np.asarray(value, np.float32))


def _round_to_float8(ctx, value: str, fmt: Float8) -> str:
    """Rounds f32 ``value`` to the nearest ``fmt`` number (ties to even, saturating at the
    largest finite value), as OpenVINO does: first to f16, then to float8. The step between
    neighbours, 2^(exponent - mantissa), comes from counting the powers of two below |x|
    (exact, unlike a logarithm); dividing by a power of two and rounding is exact too."""
    half = ctx.one("Cast", [ctx.one("Cast", [value], to=TensorProto.FLOAT16)], to=TensorProto.FLOAT)
    magnitude = ctx.one("Abs", [half])
    exponents = np.arange(fmt.min_exponent + 1, fmt.max_exponent + 1)
    above = ctx.one(
        "GreaterOrEqual",
        [
            ctx.one("Unsqueeze", [magnitude, ctx.const("last", np.asarray([-1], np.int64))]),
            _f32(ctx, "powers", np.exp2(exponents.astype(np.float64))),
        ],
    )
    count = ctx.reduce("ReduceSum", ctx.one("Cast", [above], to=TensorProto.INT64), [-1], False)
    steps = np.exp2(np.arange(fmt.min_exponent, fmt.max_exponent + 1) - fmt.mantissa)
    step = ctx.one("Gather", [_f32(ctx, "steps", steps), count])
    rounded = ctx.one("Mul", [ctx.one("Round", [ctx.one("Div", [magnitude, step])]), step])
    saturated = ctx.one("Min", [rounded, _f32(ctx, "largest", fmt.largest)])
    return ctx.one("Mul", [ctx.one("Sign", [half]), saturated])


def _as_f32(ctx, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


@converts(
    "FakeConvert",
    (13,),
    inputs=(2, 3),
    attrs={"destination_type": Choice(allowed=tuple(FLOAT8), default="f8e4m3")},
)
def fake_convert(ctx, layer, inputs):
    """(to_float8(x * scale - shift) + shift) / scale, computed in f32."""
    element = ctx.type_of(inputs[0])
    if element not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16):
        raise B2SError(f"{layer.where()}: input 'data' must be f32, f16 or bf16")
    data, scale = _as_f32(ctx, inputs[0]), _as_f32(ctx, inputs[1])
    shift = _as_f32(ctx, inputs[2]) if len(inputs) > 2 else None
    value = ctx.one("Mul", [data, scale])
    if shift is not None:
        value = ctx.one("Sub", [value, shift])
    value = _round_to_float8(ctx, value, FLOAT8[layer.attrs["destination_type"]])
    if shift is not None:
        value = ctx.one("Add", [value, shift])
    output = ctx.out(layer)
    if element == TensorProto.FLOAT:
        ctx.one("Div", [value, scale], output)
    else:
        ctx.one("Cast", [ctx.one("Div", [value, scale])], output, to=element)
