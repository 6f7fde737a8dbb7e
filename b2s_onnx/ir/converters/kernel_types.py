"""Which element types onnxruntime's CPU provider computes each element-wise ONNX op in, and
how an op is computed exactly in a wider type where it has no kernel for the given one.

ONNX's schemas allow more types than onnxruntime implements (Max has no int16 kernel, Pow
takes int32/int64/float/double bases only, Where no uint16, Add no int8 before opset 14), and
a converted node without a kernel is refused when the model is proven. ``KERNELS`` is the
measured table (onnxruntime 1.31, CPU provider, target opsets 13 to 21); a test builds one
node for every entry and type and creates a session, so the table cannot go stale.

:func:`emit` writes one op, widening its typed inputs to the narrowest type that has a
kernel and computes the same result, then narrows the result back with a modular ``Cast``
(onnxruntime's integer Cast keeps the low bits). Which wider types compute the same result
depends on the op (``WIDENING``):

- ``RING``: +, -, * and negation are exact modulo 2**bits, so any type at least as wide
  works, signed or not, and the low bits are the wrapped result OpenVINO's reference gives.
- ``VALUE``: comparisons, Max/Min, Div/Mod, Abs, Sign, Clip, ReLU need every value of the
  type to be represented: a type whose range contains it.
- ``SELECT``: Where and Pad only move values: any type at least as wide.
- ``POWER``: OpenVINO's reference computes ``static_cast<T>(std::pow(double, double))``,
  onnxruntime's int32/int64 Pow the same for int32/int64. A C++ conversion from double to
  an 8- or 16-bit integer goes through int32 on x86-64 (an out-of-range value becomes
  INT32_MIN, then keeps its low bits), to uint32 through int64, to uint64 directly: so
  8/16-bit types compute in int32, uint32 in int64 and uint64 in double.

Where no wider type has a kernel, ``emit`` spells the op out with ones that exist (Max as
``Where(Less)``...). ``IDENTITY_ON`` lists ops that leave some types unchanged (Floor and
Ceiling on integers, ReLU on unsigned ones): they become ``Identity``.

A float64 op onnxruntime has no double kernel for (the trigonometric and hyperbolic
functions, Erf) runs in float32 and is cast back, as OpenVINO's CPU plugin runs every f64
layer: within f32 rounding of OpenVINO's f64 reference, matching the plugin.

Some kernels exist but compute wrongly (``WRONG``, pinned by a test too): onnxruntime's
int64 Max, Min, Clip, Sign and Relu compare the values cut to 32 bits (Max(2**31, 0) is 0),
and its Mod with fmod=1 computes integers through double (inexact beyond 2**53), so
integer remainders are taken with fmod=0 or as ``x - (x / y) * y``.

OpenVINO's CPU plugin departs from these results where it computes integers in f32 or
narrower types (it saturates i8/u8 arithmetic, computes i64/u64 and u32 comparisons in
i32, and divides i32 in f32); the converter follows OpenVINO's reference, as it does for
integer Divide (see docs/openvino.md).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.reader import Layer

#: Short names of the element types a converted graph computes in (f16/bf16 become f32).
TYPE_NAMES = {
    "f32": TensorProto.FLOAT,
    "f64": TensorProto.DOUBLE,
    "i8": TensorProto.INT8,
    "i16": TensorProto.INT16,
    "i32": TensorProto.INT32,
    "i64": TensorProto.INT64,
    "u8": TensorProto.UINT8,
    "u16": TensorProto.UINT16,
    "u32": TensorProto.UINT32,
    "u64": TensorProto.UINT64,
    "bool": TensorProto.BOOL,
}
NAME_OF_TYPE = {value: key for key, value in TYPE_NAMES.items()}
SIGNED = frozenset({TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64})
UNSIGNED = frozenset(
    {TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
)
INTEGERS = SIGNED | UNSIGNED

_F = "f32 f64"
_INTS = "i8 i16 i32 i64 u8 u16 u32 u64"
_WIDE_INTS = "i32 i64 u32 u64"
_SMALL_MAX = "i8 i32 i64 u8 u32 u64"

#: op -> {first target opset: types with a CPU kernel from that opset on}; measured on
#: onnxruntime 1.31 for target opsets 13..21 (a row holds until the next key).
KERNELS: dict[str, dict[int, str]] = {
    "Add": {13: f"{_F} {_WIDE_INTS}", 14: f"{_F} {_INTS}"},
    "Sub": {13: f"{_F} {_WIDE_INTS}", 14: f"{_F} {_INTS}"},
    "Mul": {13: f"{_F} {_WIDE_INTS}", 14: f"{_F} {_INTS}"},
    "Div": {13: f"{_F} {_WIDE_INTS}", 14: f"{_F} {_INTS}"},
    "Pow": {13: f"{_F} i32 i64"},
    "Max": {13: f"{_F} {_SMALL_MAX}"},
    "Min": {13: f"{_F} {_SMALL_MAX}"},
    "Mod": {13: f"{_F} {_INTS}"},
    "Abs": {13: f"{_F} {_INTS}"},
    "Neg": {13: f"{_F} i8 i16 i32 i64"},
    "Sign": {13: f"{_F} {_INTS}"},
    "Equal": {13: f"{_F} {_INTS} bool"},
    "Less": {13: f"{_F} {_INTS}"},
    "Greater": {13: f"{_F} {_INTS}"},
    "LessOrEqual": {13: f"{_F} {_INTS}"},
    "GreaterOrEqual": {13: f"{_F} {_INTS}"},
    "And": {13: "bool"},
    "Or": {13: "bool"},
    "Xor": {13: "bool"},
    "Not": {13: "bool"},
    "Clip": {13: f"{_F} {_SMALL_MAX}"},
    "Relu": {13: _F, 14: f"{_F} i8 i32", 18: f"{_F} i8 i32 i64", 19: f"{_F} i8 i32"},
    "PRelu": {13: "f32", 16: "f32 f64 i32 i64 u32", 19: "f32"},
    "Where": {13: f"{_F} i8 i32 i64 u8 u32"},
    "Unique": {13: f"{_F} i8 i64"},
    "Floor": {13: _F},
    "Ceil": {13: _F},
    "MatMul": {13: f"{_F} {_WIDE_INTS}"},
    "Conv": {13: "f32"},
    "Sigmoid": {13: _F},
    "Tanh": {13: _F},
    "Exp": {13: _F},
    "Log": {13: _F},
    "Sqrt": {13: _F},
    "Sin": {13: _F},
    "Cos": {13: _F},
    "Tan": {13: "f32"},
    "Asin": {13: "f32"},
    "Acos": {13: "f32"},
    "Atan": {13: "f32"},
    "Sinh": {13: "f32"},
    "Cosh": {13: "f32"},
    "Asinh": {13: "f32"},
    "Acosh": {13: "f32"},
    "Atanh": {13: "f32"},
    "Erf": {13: "f32"},
    "Softplus": {13: "f32", 18: _F, 19: "f32"},
    "Softsign": {13: "f32", 18: _F, 19: "f32"},
    "Pad": {13: f"{_F} i8 i32 i64 u8 u32 u64 bool"},
    **{
        key: {13: f"{_F} i32 i64"}
        for key in ("ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2")
    },
    **{
        key: {13: f"{_F} i8 i32 i64 u8", 20: f"{_F} i8 i32 i64 u8 bool"}
        for key in ("ReduceMax", "ReduceMin")
    },
}


class Widening(enum.Enum):
    RING = "ring"
    VALUE = "value"
    SELECT = "select"
    POWER = "power"


WIDENING = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Neg", "MatMul"), Widening.RING),
    **dict.fromkeys(
        (
            "Div",
            "Mod",
            "Max",
            "Min",
            "Abs",
            "Sign",
            "Clip",
            "Relu",
            "Equal",
            "Less",
            "Greater",
            "LessOrEqual",
            "GreaterOrEqual",
            "Unique",
        ),
        Widening.VALUE,
    ),
    "Where": Widening.SELECT,
    "Pad": Widening.SELECT,
    "Pow": Widening.POWER,
}
#: Ops that leave values of these types unchanged: emitted as Identity.
IDENTITY_ON = {"Floor": INTEGERS, "Ceil": INTEGERS, "Relu": UNSIGNED}
#: Kernels onnxruntime has but computes wrongly on this type (measured, pinned by a test):
#: int64 Max/Min/Clip/Sign/Relu compare the values cut to 32 bits (Max(2**31, 0) is 0).
WRONG = frozenset((op, TensorProto.INT64) for op in ("Max", "Min", "Clip", "Sign", "Relu"))
#: Ops whose result is boolean whatever their inputs (nothing to narrow back).
BOOLEAN_RESULT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
#: The inputs that carry the op's element type, where not all of them do.
TYPED_INPUTS = {"Where": (1, 2)}
#: Where ``POWER`` computes each integer type (see the module docstring).
_POWER_TYPE = {
    TensorProto.INT8: TensorProto.INT32,
    TensorProto.INT16: TensorProto.INT32,
    TensorProto.UINT8: TensorProto.INT32,
    TensorProto.UINT16: TensorProto.INT32,
    TensorProto.UINT32: TensorProto.INT64,
    TensorProto.UINT64: TensorProto.DOUBLE,
}
#: The integer types (``wider_type`` tries them narrowest first, the same signedness first).
_LADDER = (
    TensorProto.INT8,
    TensorProto.UINT8,
    TensorProto.INT16,
    TensorProto.UINT16,
    TensorProto.INT32,
    TensorProto.UINT32,
    TensorProto.INT64,
    TensorProto.UINT64,
)


def _parse(row: str) -> frozenset[int]:
    return frozenset(TYPE_NAMES[name] for name in row.split())


_PARSED = {op: {first: _parse(row) for first, row in rows.items()} for op, rows in KERNELS.items()}


def kernel_types(op: str, opset: int) -> frozenset[int]:
    """The element types onnxruntime's CPU provider runs ``op`` in at target ``opset``."""
    rows = _PARSED[op]
    first = max((k for k in rows if k <= opset), default=min(rows))
    return rows[first]


def has_kernel(op: str, elem: int, opset: int) -> bool:
    """Whether onnxruntime computes ``op`` on ``elem`` correctly (ops outside the table are
    not element-wise and are assumed to)."""
    if op not in _PARSED:
        return True
    return elem in kernel_types(op, opset) and (op, elem) not in WRONG


def _range(elem: int) -> tuple[int, int]:
    if elem == TensorProto.BOOL:
        return 0, 1
    info = np.iinfo(NUMPY_OF_ONNX[elem])
    return int(info.min), int(info.max)


def _bits(elem: int) -> int:
    return 1 if elem == TensorProto.BOOL else np.iinfo(NUMPY_OF_ONNX[elem]).bits


def wider_type(op: str, elem: int, opset: int) -> int | None:
    """The narrowest type with a kernel for ``op`` that computes ``op`` on ``elem`` values
    exactly (see ``WIDENING``), or None."""
    kind = WIDENING.get(op)
    if kind is None or elem not in INTEGERS | {TensorProto.BOOL}:
        return None
    if kind is Widening.POWER:
        target = _POWER_TYPE.get(elem)
        return target if target is not None and has_kernel(op, target, opset) else None
    if kind is Widening.RING and elem == TensorProto.BOOL:
        return None
    low, high = _range(elem)
    for candidate in sorted(_LADDER, key=lambda t: (_bits(t), (t in SIGNED) != (elem in SIGNED))):
        if kind is Widening.VALUE:
            fits = _range(candidate)[0] <= low and high <= _range(candidate)[1]
        else:
            fits = _bits(candidate) >= _bits(elem)
        if fits and has_kernel(op, candidate, opset):
            return candidate
    return None


def kernel_type(ctx: ConversionContext, layer: Layer, op: str, elem: int) -> int | None:
    """None where onnxruntime has an ``op`` kernel for ``elem``; else the type to compute
    it in (``wider_type``). A layer whose type no kernel holds is refused by name."""
    if has_kernel(op, elem, ctx.opset):
        return None
    wide = wider_type(op, elem, ctx.opset)
    if wide is None:
        raise B2SError(
            f"{layer.where()}: element type {NAME_OF_TYPE.get(elem, elem)} is not supported "
            f"for {layer.type} (onnxruntime has no {op} kernel for it, and no wider type "
            "holds its values)"
        )
    return wide


def cast(ctx: ConversionContext, tensor: str, elem: int) -> str:
    """``tensor`` as ``elem``: a converted constant when it is one, else a Cast node."""
    value = ctx.value(tensor)
    if value is not None:
        return ctx.const("widened", np.asarray(value).astype(NUMPY_OF_ONNX[elem]))
    return ctx.one("Cast", [tensor], to=elem)


def emit(
    ctx: ConversionContext,
    layer: Layer,
    op: str,
    inputs: Sequence[str],
    output: str | None = None,
    *,
    elem: int | None = None,
    **attrs,
) -> str:
    """``ctx.one(op, inputs, output, **attrs)`` computed in a type onnxruntime has a
    correct kernel for, or spelled out with ops that have one. ``elem`` is the op's element
    type (default: the recorded type of its first typed input; pass it for intermediate
    tensors, whose types are not recorded)."""
    typed = TYPED_INPUTS.get(op, tuple(range(len(inputs))))
    if elem is None:
        elem = ctx.type_of(inputs[typed[0]])
    if elem in IDENTITY_ON.get(op, ()):
        return ctx.one("Identity", inputs[:1], output)
    if has_kernel(op, elem, ctx.opset):
        return ctx.one(op, inputs, output, **attrs)
    wide = wider_type(op, elem, ctx.opset)
    if wide is not None:
        args = [cast(ctx, t, wide) if i in typed else t for i, t in enumerate(inputs)]
        if op in BOOLEAN_RESULT:
            return ctx.one(op, args, output, **attrs)
        return ctx.one("Cast", [ctx.one(op, args, **attrs)], output, to=elem)
    if op in _SPELLED_OUT and elem in INTEGERS:
        return _SPELLED_OUT[op](ctx, layer, list(inputs), output, elem)
    if elem == TensorProto.DOUBLE and has_kernel(op, TensorProto.FLOAT, ctx.opset):
        # No f64 kernel (Tan, Asin, Erf...): computed in f32, as OpenVINO's CPU plugin
        # computes every f64 layer; OpenVINO's reference would keep f64 precision.
        args = [cast(ctx, t, TensorProto.FLOAT) if i in typed else t for i, t in enumerate(inputs)]
        if op in BOOLEAN_RESULT:
            return ctx.one(op, args, output, **attrs)
        return ctx.one("Cast", [ctx.one(op, args, **attrs)], output, to=elem)
    raise B2SError(
        f"{layer.where()}: element type {NAME_OF_TYPE.get(elem, elem)} is not supported for "
        f"this layer (onnxruntime has no {op} kernel for it, and no wider type computes the "
        "same result)"
    )


def _zero(ctx: ConversionContext, elem: int) -> str:
    return ctx.const("zero", np.zeros((), NUMPY_OF_ONNX[elem]))


def _max(ctx, layer, inputs, output, elem) -> str:
    a, b = inputs
    less = emit(ctx, layer, "Less", [a, b], elem=elem)
    return emit(ctx, layer, "Where", [less, b, a], output, elem=elem)


def _min(ctx, layer, inputs, output, elem) -> str:
    a, b = inputs
    less = emit(ctx, layer, "Less", [b, a], elem=elem)
    return emit(ctx, layer, "Where", [less, b, a], output, elem=elem)


def _clip(ctx, layer, inputs, output, elem) -> str:
    """ONNX's Clip: min(max(x, low), high); an absent bound (missing or "") clips nothing."""
    data, low, high = [*inputs, "", ""][:3]
    if high:
        data = _max(ctx, layer, [data, low], None, elem) if low else data
        return _min(ctx, layer, [data, high], output, elem)
    if low:
        return _max(ctx, layer, [data, low], output, elem)
    return ctx.one("Identity", [data], output)


def _sign(ctx, layer, inputs, output, elem) -> str:
    zero = _zero(ctx, elem)
    positive = ctx.one("Cast", [emit(ctx, layer, "Greater", [inputs[0], zero], elem=elem)], to=elem)
    negative = ctx.one("Cast", [emit(ctx, layer, "Less", [inputs[0], zero], elem=elem)], to=elem)
    return emit(ctx, layer, "Sub", [positive, negative], output, elem=elem)


def _relu(ctx, layer, inputs, output, elem) -> str:
    zero = _zero(ctx, elem)
    negative = emit(ctx, layer, "Less", [inputs[0], zero], elem=elem)
    return emit(ctx, layer, "Where", [negative, zero, inputs[0]], output, elem=elem)


#: Ops spelled out with others where no type has a correct kernel (int64, mostly).
_SPELLED_OUT = {"Max": _max, "Min": _min, "Clip": _clip, "Sign": _sign, "Relu": _relu}
