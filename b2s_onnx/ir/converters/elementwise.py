"""Element-wise layers: arithmetic, comparisons, logic, and activations."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import BROADCAST, Bool, Choice, Float
from b2s_onnx.ir.reader import Layer

FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)

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


def _binary(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    ctx.one(BINARY[layer.type], inputs, ctx.out(layer))


def _unary(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    ctx.one(UNARY[layer.type], inputs[:1], ctx.out(layer))


#: The opset each binary op's IR ``version`` names (measured: LogicalXor is opset2).
_BINARY_VERSION = {"LogicalXor": 2}
for _type in BINARY:
    converts(_type, (_BINARY_VERSION.get(_type, 1),), inputs=(2, 2), attrs=BROADCAST)(_binary)
#: The opset that introduced each unary op (what the IR's ``version`` attribute names).
_UNARY_VERSION = {"Asinh": 4, "Acosh": 4, "Atanh": 4, "SoftPlus": 4, "SoftSign": 9}
for _type in UNARY:
    converts(_type, (_UNARY_VERSION.get(_type, 1),), inputs=(1, 1), attrs={})(_unary)


def scalar(ctx: ConversionContext, hint: str, value: float, like: str) -> str:
    """A scalar constant of ``like``'s element type."""
    return ctx.const(hint, np.asarray(value, dtype=NUMPY_OF_ONNX[ctx.type_of(like)]))


@converts("NotEqual", (1,), inputs=(2, 2), attrs=BROADCAST)
def not_equal(ctx, layer, inputs):
    ctx.one("Not", [ctx.one("Equal", inputs)], ctx.out(layer))


@converts("SquaredDifference", (1,), inputs=(2, 2), attrs=BROADCAST)
def squared_difference(ctx, layer, inputs):
    difference = ctx.one("Sub", inputs)
    ctx.one("Mul", [difference, difference], ctx.out(layer))


@converts("Divide", (1,), inputs=(2, 2), attrs={**BROADCAST, "m_pythondiv": Bool(default=True)})
def divide(ctx, layer, inputs):
    """Integer division floors when ``m_pythondiv`` (the default), ONNX's Div truncates."""
    python_div = layer.attrs["m_pythondiv"]
    if ctx.type_of(inputs[0]) in FLOATS or not python_div:
        ctx.one("Div", inputs, ctx.out(layer))
        return
    remainder = ctx.one("Mod", inputs, fmod=0)  # takes the divisor's sign: Python's %
    ctx.one("Div", [ctx.one("Sub", [inputs[0], remainder]), inputs[1]], ctx.out(layer))


@converts("Mod", (1,), inputs=(2, 2), attrs=BROADCAST)
def mod(ctx, layer, inputs):
    """Truncated remainder (the dividend's sign): ONNX Mod with fmod=1."""
    ctx.one("Mod", inputs, ctx.out(layer), fmod=1)


@converts("FloorMod", (1,), inputs=(2, 2), attrs=BROADCAST)
def floor_mod(ctx, layer, inputs):
    """Remainder with the divisor's sign; ONNX Mod(fmod=0) does that for integers only."""
    if ctx.type_of(inputs[0]) not in FLOATS:
        ctx.one("Mod", inputs, ctx.out(layer), fmod=0)
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
        low, high = math.ceil(low), math.floor(high)
    ctx.one(
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
        cube = ctx.one("Mul", [ctx.one("Mul", [x, x]), x])
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
    ctx.one("PRelu", [data, slope], ctx.out(layer))


@converts("Select", (1,), inputs=(3, 3), attrs=BROADCAST)
def select(ctx, layer, inputs):
    ctx.one("Where", inputs, ctx.out(layer))
