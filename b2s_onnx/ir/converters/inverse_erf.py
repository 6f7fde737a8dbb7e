"""ErfInv-17: the inverse error function, which ONNX has no op for.

OpenVINO computes it with M. Giles' single-precision approximation ("Approximating the
erfinv function", GPU Computing Gems, 2011): with ``w = -log((1 - x)(1 + x))``, a
degree-8 polynomial in ``w - 2.5`` below ``w = 5`` and one in ``sqrt(w) - 3`` above,
times ``x``. Below ``w = 5`` (``|x| < 0.9966``) it is within 2.2e-7 of the exact inverse;
OpenVINO's tail coefficients are coarser, up to 0.53% (0.019) off beyond it (the CPU plugin
gives 3.8139 for erfinv(0.99999994), exactly 3.8325). So the converter writes the same
polynomials, not a more accurate method, and lands within 1e-4 of the plugin (which
differs from the reference's double evaluation by as much).

The special values follow from the arithmetic except one: ``x = +-1`` gives ``w = inf``,
where the polynomial's alternating terms would give ``-inf`` for both signs, so those two
points are selected as ``x * inf``. ``|x| > 1`` takes the log of a negative number (NaN),
0 and -0 give themselves, and NaN stays NaN, as in OpenVINO.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts

#: Horner coefficients, highest degree first: for w < 5 in (w - 2.5), else in (sqrt(w) - 3).
CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    -0.00943887047,
    1.00167406,
    2.83297682,
)
#: Where the tail polynomial takes over, in w.
SPLIT = 5.0
#: The types the converted graph computes ErfInv in (f16 and bf16 arrive widened to f32).
FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE)


def reference(x: np.ndarray) -> np.ndarray:
    """The approximation in numpy (the tests' second opinion), computed in f32 or f64 as
    the converted graph does and returned in ``x``'s type."""
    given = np.asarray(x)
    kind = np.promote_types(given.dtype, np.float32).type
    x = given.astype(kind)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log((kind(1) - x) * (kind(1) + x))
        central, tail = (_horner(CENTRAL, w - kind(2.5)), _horner(TAIL, np.sqrt(w) - kind(3)))
        result = np.where(w < kind(SPLIT), central, tail) * x
        result = np.where(np.abs(x) == 1, x * kind(np.inf), result)
    return result.astype(given.dtype)


def _horner(coefficients: tuple[float, ...], s: np.ndarray) -> np.ndarray:
    kind = s.dtype.type
    value = np.full_like(s, coefficients[0])
    for c in coefficients[1:]:
        value = kind(c) + value * s
    return value


@converts("ErfInv", (17,), inputs=(1, 1), attrs={})
def erfinv(ctx, layer, inputs):
    (x,) = inputs
    elem = ctx.type_of(x)
    if elem not in FLOATS:
        raise B2SError(f"{layer.where()}: input 'data' must be floating point (ErfInv-17)")
    kind = NUMPY_OF_ONNX[elem]

    def constant(hint: str, value: float) -> str:
        return ctx.const(hint, np.asarray(value, dtype=kind))

    one = constant("one", 1.0)
    product = ctx.one("Mul", [ctx.one("Sub", [one, x]), ctx.one("Add", [one, x])])
    w = ctx.one("Neg", [ctx.one("Log", [product])])

    def polynomial(coefficients: tuple[float, ...], s: str) -> str:
        value = constant("c", coefficients[0])
        for c in coefficients[1:]:
            value = ctx.one("Add", [constant("c", c), ctx.one("Mul", [value, s])])
        return value

    central = polynomial(CENTRAL, ctx.one("Sub", [w, constant("centre", 2.5)]))
    tail = polynomial(TAIL, ctx.one("Sub", [ctx.one("Sqrt", [w]), constant("three", 3.0)]))
    chosen = ctx.one("Where", [ctx.one("Less", [w, constant("split", SPLIT)]), central, tail])
    edge = ctx.one("Equal", [ctx.one("Abs", [x]), one])
    infinite = ctx.one("Mul", [x, constant("inf", np.inf)])
    ctx.one("Where", [edge, infinite, ctx.one("Mul", [chosen, x])], ctx.out(layer))
