"""FakeConvert: values rounded as if stored in an 8-bit float and read back."""

from __future__ import annotations

import math

from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice

#: destination type -> (mantissa bits, smallest normal exponent, largest finite value)
FORMATS = {"f8e4m3": (3, -6, 448.0), "f8e5m2": (2, -14, 57344.0)}


def _round_to_format(ctx: ConversionContext, value: str, destination: str) -> str:
    """Round half to even onto the format's grid, saturating at its largest value. The grid
    step is 2**(e - mantissa bits) for the value's binary exponent e (at least the smallest
    normal one, which gives the subnormals); e comes from a logarithm corrected by one
    comparison each way, so it is exact."""
    mantissa, lowest_exponent, largest = FORMATS[destination]
    two = float32s(ctx, "two", 2.0)
    magnitude = ctx.one("Min", [ctx.one("Abs", [value]), float32s(ctx, "largest", largest)])
    guess = ctx.one(
        "Floor",
        [ctx.one("Mul", [ctx.one("Log", [magnitude]), float32s(ctx, "inv_ln2", 1 / math.log(2))])],
    )
    one = float32s(ctx, "one", 1.0)
    too_small = ctx.one(
        "GreaterOrEqual", [magnitude, ctx.one("Pow", [two, ctx.one("Add", [guess, one])])]
    )
    too_large = ctx.one("Less", [magnitude, ctx.one("Pow", [two, guess])])
    exponent = ctx.one(
        "Sub",
        [
            ctx.one("Add", [guess, ctx.one("Cast", [too_small], to=TensorProto.FLOAT)]),
            ctx.one("Cast", [too_large], to=TensorProto.FLOAT),
        ],
    )
    exponent = ctx.one("Max", [exponent, float32s(ctx, "lowest_exponent", float(lowest_exponent))])
    step = ctx.one(
        "Pow", [two, ctx.one("Sub", [exponent, float32s(ctx, "mantissa", float(mantissa))])]
    )
    rounded = ctx.one("Mul", [ctx.one("Round", [ctx.one("Div", [magnitude, step])]), step])
    rounded = ctx.one("Min", [rounded, float32s(ctx, "largest", largest)])
    negative = ctx.one("Less", [value, float32s(ctx, "zero", 0.0)])
    return ctx.one("Where", [negative, ctx.one("Neg", [rounded]), rounded])


#: f8e5m2's subnormal powers of two whose f16 neighbourhood OpenVINO rounds one binade up.
CARRIED_POWERS = (2.0**-17, 2.0**-16, 2.0**-15)
#: How far below such a power of two (relative) a float32 value is carried: the bits an f16
#: mantissa drops below a normal float32's, as if the f16 value were normal.
CARRY_WINDOW = 2.0**-12


def _carried_subnormals(ctx: ConversionContext, wide: str, narrow: str, rounded: str) -> str:
    """OpenVINO 2026.4's FakeConvert (its reference and CPU plugin alike) returns twice the
    f16 value for a float32 input just below 2**-17, 2**-16 or 2**-15 (within 2**-12 of it,
    relative) that f16 rounds up onto that power of two: 2**-16 where the tie gives 0,
    2**-15 where 2**-16 is exact, and so on. Measured over every such window; f16 inputs and
    the normal range are unaffected, and so is f8e4m3, whose subnormals it flushes.
    ``wide`` is the value before the f16 rounding, ``narrow`` after it."""
    wide_magnitude = ctx.one("Abs", [wide])
    narrow_magnitude = ctx.one("Abs", [narrow])
    on_power = None
    for power in CARRIED_POWERS:
        equal = ctx.one("Equal", [narrow_magnitude, float32s(ctx, "carried_power", power)])
        on_power = equal if on_power is None else ctx.one("Or", [on_power, equal])
    below = ctx.one("Less", [wide_magnitude, narrow_magnitude])
    near = ctx.one(
        "GreaterOrEqual",
        [
            wide_magnitude,
            ctx.one("Mul", [narrow_magnitude, float32s(ctx, "carry_floor", 1 - CARRY_WINDOW)]),
        ],
    )
    carried = ctx.one("And", [on_power, ctx.one("And", [below, near])])
    doubled = ctx.one("Add", [narrow, narrow])
    return ctx.one("Where", [carried, doubled, rounded])


@converts(
    "FakeConvert",
    (13,),
    inputs=(2, 3),
    attrs={"destination_type": Choice(allowed=tuple(FORMATS), required=True)},
)
def fake_convert(ctx, layer, inputs):
    """(round(x * scale - shift) + shift) * (1 / scale), where round passes through f16
    first, as OpenVINO does (a value just above an 8-bit tie that f16 rounds onto the tie
    then rounds to even), and the division is a product with the reciprocal, as in
    OpenVINO, for the same last bit."""
    data, scale = inputs[:2]
    shift = inputs[2] if len(inputs) > 2 else None
    value = ctx.one("Mul", [data, scale])
    if shift is not None:
        value = ctx.one("Sub", [value, shift])
    wide = value
    value = ctx.one(
        "Cast", [ctx.one("Cast", [value], to=TensorProto.FLOAT16)], to=TensorProto.FLOAT
    )
    destination = layer.attrs["destination_type"]
    rounded = _round_to_format(ctx, value, destination)
    if destination == "f8e5m2" and ctx.type_of(wide) == TensorProto.FLOAT:
        rounded = _carried_subnormals(ctx, wide, value, rounded)
    value = rounded
    if shift is not None:
        value = ctx.one("Add", [value, shift])
    ctx.one("Mul", [value, ctx.one("Reciprocal", [scale])], ctx.out(layer))
