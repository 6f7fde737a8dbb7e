"""Bitwise layers: And/Or/Xor/Not (logical on booleans), and the shifts."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import BROADCAST
from b2s_onnx.ir.reader import Layer

_LOGICAL = {"BitwiseAnd": "And", "BitwiseOr": "Or", "BitwiseXor": "Xor", "BitwiseNot": "Not"}
_SIGNED = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64}


def _check_broadcast(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """auto_broadcast='none' requires equal shapes, which the IR's shapes show."""
    if layer.attrs["auto_broadcast"] != "none":
        return
    shapes = [ctx.shape(name) for name in inputs]
    if all(s is not None for s in shapes) and shapes[0] != shapes[1]:
        raise B2SError(
            f"{layer.where()}: auto_broadcast='none' needs equal input shapes, got "
            f"{list(shapes[0])} and {list(shapes[1])}"
        )


def _bitwise(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    if ctx.type_of(inputs[0]) == TensorProto.BOOL:
        ctx.one(_LOGICAL[layer.type], inputs, ctx.out(layer))
        return
    if ctx.opset < 18:
        raise B2SError(
            f"{layer.where()}: {layer.type} on integers needs ONNX opset 18 or later "
            f"(converting to opset {ctx.opset})"
        )
    ctx.one(layer.type, inputs, ctx.out(layer))


@converts("BitwiseAnd", (13,), inputs=(2, 2), attrs=BROADCAST)
@converts("BitwiseOr", (13,), inputs=(2, 2), attrs=BROADCAST)
@converts("BitwiseXor", (13,), inputs=(2, 2), attrs=BROADCAST)
def bitwise_binary(ctx, layer, inputs):
    _check_broadcast(ctx, layer, inputs)
    _bitwise(ctx, layer, inputs)


@converts("BitwiseNot", (13,), inputs=(1, 1), attrs={})
def bitwise_not(ctx, layer, inputs):
    _bitwise(ctx, layer, inputs)


@converts("Xor", (1,), inputs=(2, 2), attrs=BROADCAST)
def xor(ctx, layer, inputs):
    """Opset1's name for LogicalXor."""
    _check_broadcast(ctx, layer, inputs)
    ctx.one("Xor", inputs, ctx.out(layer))


@converts("BitwiseLeftShift", (15,), inputs=(2, 2), attrs=BROADCAST)
@converts("BitwiseRightShift", (15,), inputs=(2, 2), attrs=BROADCAST)
def bitwise_shift(ctx, layer, inputs):
    """ONNX BitShift shifts unsigned integers only: the value is widened to 64 bits (signed
    ones sign-extended, so a logical right shift of the wide value is the arithmetic shift
    of the narrow one), shifted, and narrowed back, which keeps the low bits."""
    _check_broadcast(ctx, layer, inputs)
    data, amount = inputs
    kind = ctx.type_of(data)
    if kind == TensorProto.INT64 and layer.type == "BitwiseRightShift":
        _arithmetic_shift_right_i64(ctx, layer, data, amount)
        return
    wide = data
    if kind in _SIGNED and kind != TensorProto.INT64:
        wide = ctx.one("Cast", [wide], to=TensorProto.INT64)
    if kind != TensorProto.UINT64:
        wide = ctx.one("Cast", [wide], to=TensorProto.UINT64)
    shift = ctx.one("Cast", [amount], to=TensorProto.UINT64)
    direction = "LEFT" if layer.type == "BitwiseLeftShift" else "RIGHT"
    if kind == TensorProto.UINT64:
        ctx.one("BitShift", [wide, shift], ctx.out(layer), direction=direction)
        return
    shifted = ctx.one("BitShift", [wide, shift], direction=direction)
    ctx.one("Cast", [shifted], ctx.out(layer), to=kind)


def _arithmetic_shift_right_i64(
    ctx: ConversionContext, layer: Layer, data: str, amount: str
) -> None:
    """i64 has no wider type to sign-extend into: a negative x shifts as ~((~x) >> n), with
    ~x = -x - 1 (never overflows) and the logical shift of that non-negative value."""
    negative = ctx.one("Less", [data, ctx.const("zero", np.zeros((), np.int64))])
    minus_one = ctx.const("minus_one", np.full((), -1, np.int64))
    inverted = ctx.one("Sub", [ctx.one("Neg", [data]), ctx.const("one", np.ones((), np.int64))])
    magnitude = ctx.one("Where", [negative, inverted, data])
    shift = ctx.one("Cast", [amount], to=TensorProto.UINT64)
    shifted = ctx.one(
        "BitShift",
        [ctx.one("Cast", [magnitude], to=TensorProto.UINT64), shift],
        direction="RIGHT",
    )
    shifted = ctx.one("Cast", [shifted], to=TensorProto.INT64)
    restored = ctx.one("Add", [ctx.one("Neg", [shifted]), minus_one])
    ctx.one("Where", [negative, restored, shifted], ctx.out(layer))
