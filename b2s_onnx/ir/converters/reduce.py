"""Reductions, normalisations, SoftMax and TopK."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Axis, Bool, Choice, ElementType, Float, Ints
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


KEEP_DIMS = {"keep_dims": Bool(default=False)}


def _axes(ctx: ConversionContext, layer: Layer, tensor: str, data: str) -> list[int]:
    rank = ctx.rank(layer, data)
    values = ctx.require_value(layer, tensor, "axes").reshape(-1)
    return _normalized_axes(layer, [int(a) for a in values], rank)


def _normalized_axes(layer: Layer, values: list[int], rank: int) -> list[int]:
    """Axes in [-rank, rank - 1] made non-negative; refused by name when out of range."""
    bad = [a for a in values if not -rank <= a < rank]
    if bad:
        raise B2SError(f"{layer.where()}: axes {values} out of range for rank {rank}")
    return sorted({a + rank if a < 0 else a for a in values})


def _reduced(ctx, layer: Layer, op: str, data: str, axes: str, source: str, output=None) -> str:
    """``op`` of ``data`` (``source``, the layer's input, or a cast of it) over the axes in
    tensor ``axes``. Constant axes are checked here; run-time axes go to the node as an
    input with ``noop_with_empty_axes``, so that an empty list means no reduction, as in
    OpenVINO (onnxruntime refuses out-of-range axes when it runs)."""
    keep = layer.attrs["keep_dims"]
    if ctx.value(axes) is not None:
        listed = _axes(ctx, layer, axes, source)
        if not listed:  # OpenVINO: no axes means no reduction at all
            return ctx.one("Identity", [data], output)
        return ctx.reduce(op, data, listed, keep, output)
    if ctx.opset < 18 and op != "ReduceSum":
        raise B2SError(
            f"{layer.where()}: axes computed at run time need {op} with an axes input "
            f"(ONNX opset 18); the target is {ctx.opset}"
        )
    listed = ctx.one("Reshape", [ctx.int64(axes), ctx.const("flat", np.asarray([-1], np.int64))])
    return ctx.one(op, [data, listed], output, keepdims=int(keep), noop_with_empty_axes=1)


def _reduce(ctx, layer, inputs):
    _reduced(ctx, layer, REDUCE[layer.type], inputs[0], inputs[1], inputs[0], ctx.out(layer))


for _type in REDUCE:
    converts(
        _type,
        (4,) if _type in ("ReduceL1", "ReduceL2") else (1,),
        inputs=(2, 2),
        attrs=KEEP_DIMS,
    )(_reduce)


@converts("ReduceLogicalAnd", (1,), inputs=(2, 2), attrs=KEEP_DIMS)
@converts("ReduceLogicalOr", (1,), inputs=(2, 2), attrs=KEEP_DIMS)
def reduce_logical(ctx, layer, inputs):
    as_int = ctx.one("Cast", inputs[:1], to=TensorProto.INT32)
    op = "ReduceMin" if layer.type == "ReduceLogicalAnd" else "ReduceMax"
    reduced = _reduced(ctx, layer, op, as_int, inputs[1], inputs[0])
    ctx.one("Cast", [reduced], ctx.out(layer), to=TensorProto.BOOL)


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


@converts(
    "MVN",
    (6,),
    inputs=(2, 2),
    attrs={
        "normalize_variance": Bool(required=True),
        "eps": Float(required=True, minimum=0),
        "eps_mode": Choice(required=True, allowed=("inside_sqrt", "outside_sqrt")),
    },
)
def mvn6(ctx, layer, inputs):
    axes = _axes(ctx, layer, inputs[1], inputs[0])
    mode = layer.attrs["eps_mode"]
    _mvn(
        ctx,
        layer,
        inputs[0],
        axes,
        layer.attrs["normalize_variance"],
        layer.attrs["eps"],
        mode == "inside_sqrt",
    )


@converts(
    "MVN",
    (2,),
    inputs=(1, 1),
    attrs={
        "across_channels": Bool(default=False),
        "reduction_axes": Ints(unique=True),
        "normalize_variance": Bool(default=True),
        "eps": Float(required=True, minimum=0),
    },
)
def mvn1(ctx, layer, inputs):
    rank = ctx.rank(layer, inputs[0])
    axes = layer.attrs["reduction_axes"]
    if axes is not None:
        axes = _normalized_axes(layer, axes, rank)
    else:
        axes = list(range(1 if layer.attrs["across_channels"] else 2, rank))
    if not axes:
        raise B2SError(f"{layer.where()}: no axes to normalise over (rank {rank})")
    _mvn(
        ctx,
        layer,
        inputs[0],
        axes,
        layer.attrs["normalize_variance"],
        layer.attrs["eps"],
        False,
    )


@converts(
    "NormalizeL2",
    (1,),
    inputs=(2, 2),
    attrs={
        "eps": Float(required=True, minimum=0),
        "eps_mode": Choice(required=True, allowed=("add", "max")),
    },
)
def normalize_l2(ctx, layer, inputs):
    data = inputs[0]
    axes = _axes(ctx, layer, inputs[1], data)
    mode = layer.attrs["eps_mode"]
    squares = ctx.reduce("ReduceSum", ctx.one("Mul", [data, data]), axes, True)
    epsilon = _const_like(ctx, "eps", layer.attrs["eps"], data)
    combined = ctx.one("Add" if mode == "add" else "Max", [squares, epsilon])
    ctx.one("Div", [data, ctx.one("Sqrt", [combined])], ctx.out(layer))


#: SoftMax-1 without ``axis`` normalises axis 0 in OpenVINO (measured), not the spec's 1.
@converts("SoftMax", (1,), inputs=(1, 1), attrs={"axis": Axis(default=0, negative=False)})
@converts("SoftMax", (8,), inputs=(1, 1), attrs={"axis": Axis(default=1)})
def softmax(ctx, layer, inputs):
    ctx.one("Softmax", inputs, ctx.out(layer), axis=layer.attrs["axis"])


@converts("LogSoftmax", (5,), inputs=(1, 1), attrs={"axis": Axis(default=1)})
def log_softmax(ctx, layer, inputs):
    ctx.one("LogSoftmax", inputs, ctx.out(layer), axis=layer.attrs["axis"])


TOP_K = {
    "axis": Axis(required=True),
    "mode": Choice(required=True, allowed=("max", "min")),
    "sort": Choice(allowed=("value", "index", "none"), default="none"),
    "index_element_type": ElementType(allowed=("i32", "i64"), default="i32"),
}
