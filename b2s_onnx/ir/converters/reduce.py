"""Reductions, normalisations, SoftMax and TopK."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._attrs import choice, flag, integer, ints, number
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer

REDUCE = {
    "ReduceMax": "ReduceMax",
    "ReduceMin": "ReduceMin",
    "ReduceMean": "ReduceMean",
    "ReduceSum": "ReduceSum",
    "ReduceProd": "ReduceProd",
    "ReduceL1": "ReduceL1",
    "ReduceL2": "ReduceL2",
}


def _axes(ctx: ConversionContext, layer: Layer, tensor: str, data: str) -> list[int]:
    rank = ctx.rank(layer, data)
    values = ctx.require_value(layer, tensor, "axes").reshape(-1)
    return sorted({int(a) + rank if int(a) < 0 else int(a) for a in values})


def _reduce(ctx, layer, inputs):
    axes = _axes(ctx, layer, inputs[1], inputs[0])
    keep = flag(layer, "keep_dims", False)
    if not axes:  # OpenVINO: no axes means no reduction at all
        ctx.one("Identity", inputs[:1], ctx.out(layer))
        return
    ctx.reduce(REDUCE[layer.type], inputs[0], axes, keep, ctx.out(layer))


for _type in REDUCE:
    converts(_type, (4,) if _type in ("ReduceL1", "ReduceL2") else (1,))(_reduce)


@converts("ReduceLogicalAnd", (1,))
@converts("ReduceLogicalOr", (1,))
def reduce_logical(ctx, layer, inputs):
    axes = _axes(ctx, layer, inputs[1], inputs[0])
    keep = flag(layer, "keep_dims", False)
    if not axes:
        ctx.one("Identity", inputs[:1], ctx.out(layer))
        return
    as_int = ctx.one("Cast", inputs[:1], to=TensorProto.INT32)
    op = "ReduceMin" if layer.type == "ReduceLogicalAnd" else "ReduceMax"
    ctx.one("Cast", [ctx.reduce(op, as_int, axes, keep)], ctx.out(layer), to=TensorProto.BOOL)


def _const_like(ctx: ConversionContext, hint: str, value: float, like: str) -> str:
    return ctx.const(hint, np.asarray(value, NUMPY_OF_ONNX[ctx.type_of(like)]))


def _mvn(ctx, layer, data, axes, normalize_variance, eps, inside_sqrt):
    mean = ctx.reduce("ReduceMean", data, axes, True)
    centered = ctx.one("Sub", [data, mean])
    if not normalize_variance:
        ctx.one("Identity", [centered], ctx.out(layer))
        return
    variance = ctx.reduce("ReduceMean", ctx.one("Mul", [centered, centered]), axes, True)
    epsilon = _const_like(ctx, "eps", eps, data)
    if inside_sqrt:
        denominator = ctx.one("Sqrt", [ctx.one("Add", [variance, epsilon])])
    else:
        denominator = ctx.one("Add", [ctx.one("Sqrt", [variance]), epsilon])
    ctx.one("Div", [centered, denominator], ctx.out(layer))


@converts("MVN", (6,))
def mvn6(ctx, layer, inputs):
    axes = _axes(ctx, layer, inputs[1], inputs[0])
    mode = choice(layer, "eps_mode", ("inside_sqrt", "outside_sqrt"))
    _mvn(
        ctx,
        layer,
        inputs[0],
        axes,
        flag(layer, "normalize_variance"),
        number(layer, "eps"),
        mode == "inside_sqrt",
    )


@converts("MVN", (2,))
def mvn1(ctx, layer, inputs):
    rank = ctx.rank(layer, inputs[0])
    if "reduction_axes" in layer.data:
        axes = ints(layer, "reduction_axes")
    else:
        axes = list(range(1 if flag(layer, "across_channels", False) else 2, rank))
    _mvn(
        ctx,
        layer,
        inputs[0],
        axes,
        flag(layer, "normalize_variance", True),
        number(layer, "eps"),
        False,
    )


@converts("NormalizeL2", (1,))
def normalize_l2(ctx, layer, inputs):
    data = inputs[0]
    axes = _axes(ctx, layer, inputs[1], data)
    mode = choice(layer, "eps_mode", ("add", "max"))
    squares = ctx.reduce("ReduceSum", ctx.one("Mul", [data, data]), axes, True)
    epsilon = _const_like(ctx, "eps", number(layer, "eps"), data)
    combined = ctx.one("Add" if mode == "add" else "Max", [squares, epsilon])
    ctx.one("Div", [data, ctx.one("Sqrt", [combined])], ctx.out(layer))


@converts("SoftMax", (1, 8))
def softmax(ctx, layer, inputs):
    ctx.one("Softmax", inputs, ctx.out(layer), axis=integer(layer, "axis", 1))


@converts("LogSoftmax", (5,))
def log_softmax(ctx, layer, inputs):
    ctx.one("LogSoftmax", inputs, ctx.out(layer), axis=integer(layer, "axis", 1))
