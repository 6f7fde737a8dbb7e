"""Element-wise layers: arithmetic, comparisons, logic, and activations.

Every op goes through ``kernel_types.emit``, which computes it in a wider type where
onnxruntime has no kernel for the layer's element type (see that module). Integer division
and remainder never reach onnxruntime's Div/Mod with a divisor it traps on (0, and -1 under
the lowest int32/int64): those divisors are replaced by 1 and the results fixed up.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.kernel_types import INTEGERS, SIGNED, emit
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import BROADCAST, Bool, Choice, Float, Int
from b2s_onnx.ir.reader import Layer

BINARY = {
    "Add": "Add",
    "Subtract": "Sub",
    "Multiply": "Mul",
    "Maximum": "Max",
    "Minimum": "Min",
    "Power": "Pow",
    "Equal": "Equal",
    "Less": "Less",
    "Greater": "Greater",
    "LessEqual": "LessOrEqual",
    "GreaterEqual": "GreaterOrEqual",
    "LogicalAnd": "And",
    "LogicalOr": "Or",
    "LogicalXor": "Xor",
}
UNARY = {
    "ReLU": "Relu",
    "Sigmoid": "Sigmoid",
    "Tanh": "Tanh",
    "Exp": "Exp",
    "Log": "Log",
    "Sqrt": "Sqrt",
    "Abs": "Abs",
    "Negative": "Neg",
    "Floor": "Floor",
    "Ceiling": "Ceil",
    "Sin": "Sin",
    "Cos": "Cos",
    "Tan": "Tan",
    "Asin": "Asin",
    "Acos": "Acos",
    "Atan": "Atan",
    "Sinh": "Sinh",
    "Cosh": "Cosh",
    "Asinh": "Asinh",
    "Acosh": "Acosh",
    "Atanh": "Atanh",
    "Erf": "Erf",
    "Sign": "Sign",
    "SoftPlus": "Softplus",
    "LogicalNot": "Not",
    "SoftSign": "Softsign",
}


#: The broadcasting attributes of the binary arithmetic, comparison and logical layers,
#: which also take PaddlePaddle's 'pdpd' mode (see :func:`_pdpd_aligned`). The axis is
#: serialized next to the mode; OpenVINO reads an absent one as 0.
ARITHMETIC_BROADCAST = {
    "auto_broadcast": Choice(allowed=("numpy", "none", "pdpd"), default="numpy"),
    "auto_broadcast.auto_broadcast_axis": Int(default=0),
}


def _pdpd_aligned(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> list[str]:
    """``inputs`` with the second reshaped so that numpy broadcasting gives 'pdpd'.

    Under 'pdpd' the second input is broadcast into the first from ``axis`` (-1: right
    aligned, ``rank(a) - rank(b)``): OpenVINO's reference drops the second shape's trailing
    1s, then pads it with 1s before ``axis`` and after its last dimension up to the first
    input's rank ([3, 4, 1] at axis 1 of a 4-D input is [1, 3, 4, 1]). The second input's
    dimensions must be static to compute that shape."""
    if layer.attrs["auto_broadcast"] != "pdpd":
        return inputs
    rank = ctx.rank(layer, inputs[0])
    dims = layer.inputs[1].dims
    if dims is None or any(d is None for d in dims):
        raise B2SError(
            f"{layer.where()}: auto_broadcast='pdpd' needs the second input's static shape"
        )
    axis = layer.attrs["auto_broadcast.auto_broadcast_axis"]
    if axis == -1:
        axis = rank - len(dims)
    kept = list(dims)
    while kept and kept[-1] == 1:
        kept.pop()
    if axis < 0 or axis + len(kept) > rank:
        raise B2SError(
            f"{layer.where()}: auto_broadcast='pdpd' cannot place shape {list(dims)} at axis "
            f"{layer.attrs['auto_broadcast.auto_broadcast_axis']} of a rank-{rank} input"
        )
    shape = [1] * axis + kept + [1] * (rank - axis - len(kept))
    aligned = ctx.one("Reshape", [inputs[1], ctx.const("pdpd_shape", np.asarray(shape))])
    ctx.types[aligned] = ctx.type_of(inputs[1])
    return [inputs[0], aligned]


def _binary(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    emit(ctx, layer, BINARY[layer.type], _pdpd_aligned(ctx, layer, inputs), ctx.out(layer))


#: Unary layers OpenVINO computes on integer tensors in floating point and rounds to the
#: nearest integer (its reference ``std::round``s the double result, the CPU plugin
#: computes in f32 and converts to nearest; both agree, and its own integer activation
#: tests list these). onnxruntime has no integer kernel for them. Exp, Log, Sin, Asin and
#: Atanh stay refused on integers: there the reference truncates (exp(1) is 2) while the
#: plugin rounds (3); Sigmoid, Acos and Erf, outside OpenVINO's integer tests, do too.
ROUNDED_ON_INTEGERS = frozenset(
    {"Sqrt", "Tan", "Tanh", "Atan", "Cos", "Cosh", "Sinh", "Asinh", "Acosh"}
)


def _unary(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    elem = ctx.type_of(inputs[0])
    if layer.type in ROUNDED_ON_INTEGERS and elem in INTEGERS:
        # Results beyond the type saturate, as the plugin's f32-to-integer store does
        # (sinh(30) in i32 is 2147483520, the largest f32 below 2**31).
        info = np.iinfo(NUMPY_OF_ONNX[elem])
        high = np.float32(info.max)
        if float(high) > info.max:  # 2**31 - 1 rounds up to 2**31 in f32
            high = np.nextafter(high, np.float32(0))
        low = ctx.const("low", np.asarray(np.float32(info.min)))
        wide = ctx.one("Cast", [inputs[0]], to=TensorProto.FLOAT)
        rounded = ctx.one("Round", [ctx.one(UNARY[layer.type], [wide])])
        bounded = ctx.one("Clip", [rounded, low, ctx.const("high", np.asarray(high))])
        ctx.one("Cast", [bounded], ctx.out(layer), to=elem)
        return
    emit(ctx, layer, UNARY[layer.type], inputs[:1], ctx.out(layer))


#: The opset each binary op's IR ``version`` names (measured: LogicalXor is opset2).
_BINARY_VERSION = {"LogicalXor": 2}
for _type in BINARY:
    converts(_type, (_BINARY_VERSION.get(_type, 1),), inputs=(2, 2), attrs=ARITHMETIC_BROADCAST)(
        _binary
    )
#: The opset that introduced each unary op (what the IR's ``version`` attribute names).
_UNARY_VERSION = {"Asinh": 4, "Acosh": 4, "Atanh": 4, "SoftPlus": 4, "SoftSign": 9}
for _type in UNARY:
    converts(_type, (_UNARY_VERSION.get(_type, 1),), inputs=(1, 1), attrs={})(_unary)


def scalar(ctx: ConversionContext, hint: str, value: float, like: str) -> str:
    """A scalar constant of ``like``'s element type."""
    return ctx.const(hint, np.asarray(value, dtype=NUMPY_OF_ONNX[ctx.type_of(like)]))


@converts("NotEqual", (1,), inputs=(2, 2), attrs=ARITHMETIC_BROADCAST)
def not_equal(ctx, layer, inputs):
    inputs = _pdpd_aligned(ctx, layer, inputs)
    ctx.one("Not", [emit(ctx, layer, "Equal", inputs)], ctx.out(layer))


@converts("SquaredDifference", (1,), inputs=(2, 2), attrs=ARITHMETIC_BROADCAST)
def squared_difference(ctx, layer, inputs):
    inputs = _pdpd_aligned(ctx, layer, inputs)
    elem = ctx.type_of(inputs[0])
    difference = emit(ctx, layer, "Sub", inputs, elem=elem)
    emit(ctx, layer, "Mul", [difference, difference], ctx.out(layer), elem=elem)


#: What OpenVINO's CPU plugin outputs for an integer Divide, Mod or FloorMod by zero, where
#: its reference throws (measured on x86-64): it divides in f32, and the infinity or NaN
#: becomes INT32_MIN, which i8/u8 saturate and the other types take bit for bit (i64/u64
#: are computed in i32, so they sign-extend it).
ZERO_DIVISOR = {
    TensorProto.INT8: -(2**7),
    TensorProto.INT16: 0,
    TensorProto.INT32: -(2**31),
    TensorProto.INT64: -(2**31),
    TensorProto.UINT8: 0,
    TensorProto.UINT16: 0,
    TensorProto.UINT32: 2**31,
    TensorProto.UINT64: 2**64 - 2**31,
}
#: onnxruntime computes int32/int64 Div and Mod without widening: the lowest value divided
#: by -1 traps there (the narrower types wrap, as OpenVINO's reference does).
_TRAPS_ON_MINUS_ONE = (TensorProto.INT32, TensorProto.INT64)


def _typed(ctx: ConversionContext, hint: str, value: int, elem: int) -> str:
    return ctx.const(hint, np.asarray(value, dtype=NUMPY_OF_ONNX[elem]))


def _safe_divisor(ctx, layer, divisor: str, elem: int) -> tuple[str, str | None, str | None]:
    """The divisor with 0 (and -1 where onnxruntime traps on it) replaced by 1, and the
    boolean masks of the zeros and minus ones (None when a constant divisor has none)."""
    value = ctx.value(divisor)
    traps = elem in _TRAPS_ON_MINUS_ONE
    if value is not None and not (value == 0).any() and not (traps and (value == -1).any()):
        return divisor, None, None
    is_zero = ctx.one("Equal", [divisor, _typed(ctx, "zero", 0, elem)])
    replaced, is_minus_one = is_zero, None
    if traps:
        is_minus_one = ctx.one("Equal", [divisor, _typed(ctx, "minus_one", -1, elem)])
        replaced = ctx.one("Or", [is_zero, is_minus_one])
    one = _typed(ctx, "one", 1, elem)
    return emit(ctx, layer, "Where", [replaced, one, divisor], elem=elem), is_zero, is_minus_one


def _by_zero(ctx, layer, is_zero: str, result: str, elem: int, output: str) -> None:
    """``result``, with OpenVINO's value wherever the divisor was zero."""
    fill = _typed(ctx, "by_zero", ZERO_DIVISOR[elem], elem)
    emit(ctx, layer, "Where", [is_zero, fill, result], output, elem=elem)


def _truncated_remainder(ctx, layer, x, divisor, quotient, elem: int, output=None) -> str:
    """``x - (x / y) * y``, exact in the ring (onnxruntime's Mod with fmod=1 goes through
    double, inexact for 64-bit integers beyond 2**53)."""
    product = emit(ctx, layer, "Mul", [quotient, divisor], elem=elem)
    return emit(ctx, layer, "Sub", [x, product], output, elem=elem)


def _truncation_rounded_up(ctx, remainder: str, divisor: str, elem: int) -> str:
    """Where truncation rounded a quotient up: a non-zero remainder whose sign (the
    dividend's) differs from the divisor's; for a constant divisor of one sign, simply a
    remainder of the other sign."""
    zero = _typed(ctx, "zero", 0, elem)
    value = ctx.value(divisor)
    if value is not None and (value > 0).all():
        return ctx.one("Less", [remainder, zero])
    if value is not None and (value < 0).all():
        return ctx.one("Greater", [remainder, zero])
    signs_differ = ctx.one(
        "Xor", [ctx.one("Less", [remainder, zero]), ctx.one("Less", [divisor, zero])]
    )
    inexact = ctx.one("Not", [ctx.one("Equal", [remainder, zero])])
    return ctx.one("And", [inexact, signs_differ])


def _integer_divide(ctx, layer, inputs: list[str], floor: bool) -> None:
    """Truncating division, or floor division as OpenVINO's reference computes it: the
    truncated quotient, less one where the remainder is non-zero and the operands' signs
    differ (no intermediate overflows, unlike ``(x - x mod y) / y`` at the extremes)."""
    x, y = inputs
    elem = ctx.type_of(x)
    out = ctx.out(layer)
    safe, is_zero, is_minus_one = _safe_divisor(ctx, layer, y, elem)
    floor = floor and elem in SIGNED
    last = not floor and is_minus_one is None and is_zero is None
    quotient = emit(ctx, layer, "Div", [x, safe], out if last else None, elem=elem)
    if floor:
        remainder = _truncated_remainder(ctx, layer, x, safe, quotient, elem)
        fix = ctx.one("Cast", [_truncation_rounded_up(ctx, remainder, safe, elem)], to=elem)
        last = is_minus_one is None and is_zero is None
        quotient = emit(ctx, layer, "Sub", [quotient, fix], out if last else None, elem=elem)
    if is_minus_one is not None:  # x / -1 is -x (wrapping at the lowest value)
        negated = ctx.one("Neg", [x])
        where = [is_minus_one, negated, quotient]
        quotient = emit(ctx, layer, "Where", where, None if is_zero else out, elem=elem)
    if is_zero is not None:
        _by_zero(ctx, layer, is_zero, quotient, elem, out)


def _integer_remainder(ctx, layer, inputs: list[str], floor: bool) -> None:
    """FloorMod (the divisor's sign: ONNX Mod with fmod=0) or Mod (the dividend's sign;
    the same for unsigned types, ``x - (x / y) * y`` for signed ones); a divisor of -1
    replaced by 1 leaves the right remainder, 0."""
    x, y = inputs
    elem = ctx.type_of(x)
    out = ctx.out(layer)
    safe, is_zero, _ = _safe_divisor(ctx, layer, y, elem)
    result = None if is_zero else out
    if floor or elem not in SIGNED:
        remainder = emit(ctx, layer, "Mod", [x, safe], result, elem=elem, fmod=0)
    else:
        quotient = emit(ctx, layer, "Div", [x, safe], elem=elem)
        remainder = _truncated_remainder(ctx, layer, x, safe, quotient, elem, result)
    if is_zero is not None:
        _by_zero(ctx, layer, is_zero, remainder, elem, out)


@converts(
    "Divide",
    (1,),
    inputs=(2, 2),
    attrs={**ARITHMETIC_BROADCAST, "m_pythondiv": Bool(default=True)},
)
def divide(ctx, layer, inputs):
    """Integer division floors when ``m_pythondiv`` (the default), ONNX's Div truncates.
    OpenVINO's CPU plugin truncates either way (a plugin deviation, see docs/openvino.md)."""
    inputs = _pdpd_aligned(ctx, layer, inputs)
    if ctx.type_of(inputs[0]) not in INTEGERS:
        emit(ctx, layer, "Div", inputs, ctx.out(layer))
        return
    _integer_divide(ctx, layer, inputs, floor=layer.attrs["m_pythondiv"])


@converts("Mod", (1,), inputs=(2, 2), attrs=ARITHMETIC_BROADCAST)
def mod(ctx, layer, inputs):
    """Truncated remainder (the dividend's sign): ONNX Mod with fmod=1 for floats."""
    inputs = _pdpd_aligned(ctx, layer, inputs)
    if ctx.type_of(inputs[0]) in INTEGERS:
        _integer_remainder(ctx, layer, inputs, floor=False)
        return
    ctx.one("Mod", inputs, ctx.out(layer), fmod=1)


@converts("FloorMod", (1,), inputs=(2, 2), attrs=ARITHMETIC_BROADCAST)
def floor_mod(ctx, layer, inputs):
    """Remainder with the divisor's sign; ONNX Mod(fmod=0) does that for integers only."""
    inputs = _pdpd_aligned(ctx, layer, inputs)
    if ctx.type_of(inputs[0]) in INTEGERS:
        _integer_remainder(ctx, layer, inputs, floor=True)
        return
    remainder = ctx.one("Mod", inputs, fmod=1)
    zero = scalar(ctx, "zero", 0.0, inputs[0])
    differs = ctx.one(
        "Xor", [ctx.one("Less", [remainder, zero]), ctx.one("Less", [inputs[1], zero])]
    )
    fix = ctx.one("And", [differs, ctx.one("Not", [ctx.one("Equal", [remainder, zero])])])
    shifted = ctx.one("Add", [remainder, inputs[1]])
    ctx.one("Where", [fix, shifted, remainder], ctx.out(layer))


@converts(
    "Clamp", (1,), inputs=(1, 1), attrs={"min": Float(required=True), "max": Float(required=True)}
)
def clamp(ctx, layer, inputs):
    low, high = layer.attrs["min"], layer.attrs["max"]
    if low > high:
        raise B2SError(f"{layer.where()}: attribute min={low:g} is greater than max={high:g}")
    dtype = NUMPY_OF_ONNX[ctx.type_of(inputs[0])]
    if not np.issubdtype(dtype, np.floating):
        # Bounds beyond the type's range clamp nothing on that side.
        info = np.iinfo(dtype)
        low = min(max(math.ceil(low), int(info.min)), int(info.max))
        high = max(min(math.floor(high), int(info.max)), int(info.min))
    emit(
        ctx,
        layer,
        "Clip",
        [
            inputs[0],
            ctx.const("min", np.asarray(low, dtype)),
            ctx.const("max", np.asarray(high, dtype)),
        ],
        ctx.out(layer),
    )


@converts("Elu", (1,), inputs=(1, 1), attrs={"alpha": Float(required=True)})
def elu(ctx, layer, inputs):
    ctx.one("Elu", inputs[:1], ctx.out(layer), alpha=layer.attrs["alpha"])


@converts("Selu", (1,), inputs=(3, 3), attrs={})
def selu(ctx, layer, inputs):
    alpha = ctx.require_value(layer, inputs[1], "alpha")
    lam = ctx.require_value(layer, inputs[2], "lambda")
    if alpha.size != 1 or lam.size != 1:
        raise B2SError(f"{layer.where()}: alpha and lambda must hold one value each")
    ctx.one(
        "Selu",
        inputs[:1],
        ctx.out(layer),
        alpha=float(alpha.reshape(-1)[0]),
        gamma=float(lam.reshape(-1)[0]),
    )


@converts("HSigmoid", (5,), inputs=(1, 1), attrs={})
def hsigmoid(ctx, layer, inputs):
    ctx.one("HardSigmoid", inputs, ctx.out(layer), alpha=1.0 / 6.0, beta=0.5)


@converts("HSwish", (4,), inputs=(1, 1), attrs={})
def hswish(ctx, layer, inputs):
    gate = ctx.one("HardSigmoid", inputs, alpha=1.0 / 6.0, beta=0.5)
    ctx.one("Mul", [inputs[0], gate], ctx.out(layer))


@converts("Mish", (4,), inputs=(1, 1), attrs={})
def mish(ctx, layer, inputs):
    gate = ctx.one("Tanh", [ctx.one("Softplus", inputs)])
    ctx.one("Mul", [inputs[0], gate], ctx.out(layer))


@converts("Swish", (4,), inputs=(1, 2), attrs={})
def swish(ctx, layer, inputs):
    scaled = ctx.one("Mul", [inputs[0], inputs[1]]) if len(inputs) > 1 else inputs[0]
    ctx.one("Mul", [inputs[0], ctx.one("Sigmoid", [scaled])], ctx.out(layer))


@converts("Gelu", (2,), inputs=(1, 1), attrs={})
@converts(
    "Gelu",
    (7,),
    inputs=(1, 1),
    attrs={"approximation_mode": Choice(allowed=("erf", "tanh"), default="erf")},
)
def gelu(ctx, layer, inputs):
    mode = layer.attrs["approximation_mode"] if layer.version == "opset7" else "erf"
    x = inputs[0]
    half = scalar(ctx, "half", 0.5, x)
    one = scalar(ctx, "one", 1.0, x)
    if mode == "erf":
        inner = ctx.one("Erf", [ctx.one("Mul", [x, scalar(ctx, "rsqrt2", 1 / math.sqrt(2), x)])])
    else:
        # x ** 3 as Pow: the spelling onnxruntime's FastGelu fusion recognises.
        cube = ctx.one("Pow", [x, scalar(ctx, "three", 3.0, x)])
        poly = ctx.one("Add", [x, ctx.one("Mul", [cube, scalar(ctx, "c", 0.044715, x)])])
        inner = ctx.one(
            "Tanh", [ctx.one("Mul", [poly, scalar(ctx, "k", math.sqrt(2 / math.pi), x)])]
        )
    ctx.one("Mul", [ctx.one("Mul", [x, half]), ctx.one("Add", [one, inner])], ctx.out(layer))


@converts("PReLU", (1,), inputs=(2, 2), attrs={})
def prelu(ctx, layer, inputs):
    """A 1-D slope of length C applies along the channel axis (1), not the last one."""
    data, slope = inputs
    data_shape = ctx.shape(data)
    slope_shape = ctx.shape(slope)
    if (
        data_shape is not None
        and slope_shape is not None
        and len(slope_shape) == 1
        and len(data_shape) > 2
        and slope_shape[0] not in (1, None)
        and slope_shape[0] == data_shape[1]
    ):
        target = [slope_shape[0]] + [1] * (len(data_shape) - 2)
        slope = ctx.one("Reshape", [slope, ctx.const("slope_shape", np.asarray(target, np.int64))])
    elem = ctx.type_of(data)
    if elem not in INTEGERS:
        ctx.one("PRelu", [data, slope], ctx.out(layer))
        return
    # onnxruntime has integer PRelu kernels at a few opsets only: x < 0 ? x * slope : x.
    negative = emit(ctx, layer, "Less", [data, _typed(ctx, "zero", 0, elem)], elem=elem)
    scaled = emit(ctx, layer, "Mul", [data, slope], elem=elem)
    emit(ctx, layer, "Where", [negative, scaled, data], ctx.out(layer), elem=elem)


@converts("Select", (1,), inputs=(3, 3), attrs=BROADCAST)
def select(ctx, layer, inputs):
    emit(ctx, layer, "Where", inputs, ctx.out(layer))
