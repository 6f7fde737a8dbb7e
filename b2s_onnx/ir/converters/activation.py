"""Activations whose parameters arrive as inputs: HardSigmoid.

OpenVINO passes HardSigmoid's alpha and beta as scalar tensors. When they are constants
(every real model) ONNX's HardSigmoid takes them as attributes; otherwise the same formula,
``clamp(alpha * x + beta, 0, 1)``, is composed so run-time parameters still work.
"""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer


def scalar_value(ctx: ConversionContext, layer: Layer, tensor: str, what: str) -> float | None:
    """The value of a one-element constant input, None when it is computed at run time."""
    value = ctx.value(tensor)
    if value is None:
        return None
    if value.size != 1:
        raise B2SError(f"{layer.where()}: input '{what}' must hold one value, got {value.size}")
    return float(value.reshape(-1)[0])


def typed_scalar(ctx: ConversionContext, hint: str, value: float, like: str) -> str:
    """A scalar constant of ``like``'s element type."""
    return ctx.const(hint, np.asarray(value, dtype=NUMPY_OF_ONNX[ctx.type_of(like)]))


@converts("HardSigmoid", (1,), inputs=(3, 3), attrs={})
def hard_sigmoid(ctx, layer, inputs):
    data, alpha_in, beta_in = inputs
    alpha = scalar_value(ctx, layer, alpha_in, "alpha")
    beta = scalar_value(ctx, layer, beta_in, "beta")
    if alpha is not None and beta is not None:
        ctx.one("HardSigmoid", [data], ctx.out(layer), alpha=alpha, beta=beta)
        return
    dtype = ctx.type_of(data)
    alpha_t = alpha_in if ctx.type_of(alpha_in) == dtype else ctx.one("Cast", [alpha_in], to=dtype)
    beta_t = beta_in if ctx.type_of(beta_in) == dtype else ctx.one("Cast", [beta_in], to=dtype)
    scale = ctx.one("Reshape", [alpha_t, ctx.const("scalar", np.zeros(0, np.int64))])
    shift = ctx.one("Reshape", [beta_t, ctx.const("scalar", np.zeros(0, np.int64))])
    linear = ctx.one("Add", [ctx.one("Mul", [data, scale]), shift])
    ctx.one(
        "Clip",
        [linear, typed_scalar(ctx, "zero", 0.0, data), typed_scalar(ctx, "one", 1.0, data)],
        ctx.out(layer),
    )
