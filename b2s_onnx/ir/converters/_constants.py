"""Small constant tensors the tensor-layer converters emit (indices, axes, scalars), and a
tensor's size along one axis (a constant whenever the size is known)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext

INT64_MAX = int(np.iinfo(np.int64).max)


def int64s(ctx: ConversionContext, hint: str, values) -> str:
    """An int64 constant (a scalar, or a list of axes, starts, shapes...)."""
    return ctx.const(hint, np.asarray(values, dtype=np.int64))


def axis_size(ctx: ConversionContext, tensor: str, axis: int) -> str:
    """Size of ``tensor`` along ``axis`` (negative counts from the end) as an int64 [1]
    tensor: a constant when the size is known, else read from its shape at run time."""
    shape = ctx.shape(tensor)
    if shape is not None and -len(shape) <= axis < len(shape) and shape[axis] is not None:
        return int64s(ctx, "dim", [shape[axis]])
    return ctx.one(
        "Gather", [ctx.one("Shape", [tensor]), int64s(ctx, "axis", [axis])], axis=0, hint="dim"
    )


def float32s(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, dtype=np.float32))


def as_float32(ctx: ConversionContext, tensor: str) -> str:
    """``tensor`` itself when it is float32, else a Cast of it to float32."""
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)
