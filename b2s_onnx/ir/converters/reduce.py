"""Reductions, normalisations, SoftMax and TopK."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.kernel_types import INTEGERS, UNSIGNED, has_kernel
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
            # ... of the sum, but still of the norm's element-wise part: ReduceL1 and
            # ReduceL2 over no axes give |x| (sqrt(x*x)), not x.
            if op in ("ReduceL1", "ReduceL2"):
                return ctx.one("Abs", [data], output)
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
    """Integer reductions onnxruntime has no kernel for (``kernel_types.KERNELS``: int32 and
    int64 everywhere, int8/uint8 in ReduceMax/ReduceMin only) are computed in int64 and cast
    back: exact for Max/Min, and for Sum/Prod/L1 modulo 2**bits, which is the wrap-around
    of OpenVINO's reference (its CPU plugin saturates i8/u8 instead)."""
    op = REDUCE[layer.type]
    kind = ctx.type_of(inputs[0])
    if kind not in INTEGERS or has_kernel(op, kind, ctx.opset) or op == "ReduceL2":
        _reduced(ctx, layer, op, inputs[0], inputs[1], inputs[0], ctx.out(layer))
        return
    if kind == TensorProto.UINT64 and op in ("ReduceMax", "ReduceMin", "ReduceMean"):
        raise B2SError(
            f"{layer.where()}: {layer.type} of u64 has no onnxruntime kernel, and int64 "
            "cannot order or divide values of 2**63 and above"
        )
    if op == "ReduceL1" and kind in UNSIGNED:
        op = "ReduceSum"  # |x| is x; int64's Abs would flip u64 values of 2**63 and above
    wide = ctx.one("Cast", inputs[:1], to=TensorProto.INT64)
    if op != "ReduceMean":
        reduced = _reduced(ctx, layer, op, wide, inputs[1], inputs[0])
        ctx.one("Cast", [reduced], ctx.out(layer), to=kind)
        return
    # OpenVINO's reference: the sum wrapped to the element type, divided by the count in
    # integers (truncated toward zero, as onnxruntime's int64 Div). It casts the count to
    # the element type too, which only matters past 127/255 elements per output in i8/u8.
    total = _reduced(ctx, layer, "ReduceSum", wide, inputs[1], inputs[0])
    wrapped = ctx.one("Cast", [ctx.one("Cast", [total], to=kind)], to=TensorProto.INT64)
    count = ctx.one("Div", [ctx.one("Size", [wide]), ctx.one("Size", [total])])
    # An empty input reduces to zeros of some size: count 0, and OpenVINO leaves the sums.
    count = ctx.one("Max", [count, ctx.const("one", np.asarray(1, np.int64))])
    ctx.one("Cast", [ctx.one("Div", [wrapped, count])], ctx.out(layer), to=kind)


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
    # OpenVINO serialises reduction_axes="" and, reading it back, derives the axes from
    # across_channels exactly as when the attribute is absent (v0::MVN keeps an empty set
    # as "not given").
    if axes:
        axes = _normalized_axes(layer, axes, rank)
    else:
        axes = list(range(1 if layer.attrs["across_channels"] else 2, rank))
    if not axes:
        # Rank 1, or rank 2 without across_channels: every element is its own group, so
        # the mean is the element itself and the result is x - x (zero, NaN for inf/NaN),
        # which OpenVINO computes too.
        ctx.one("Sub", [inputs[0], inputs[0]], ctx.out(layer))
        return
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
    if not axes:
        # The spec's corner case: "axes is an empty list, then we divide each input element
        # by itself resulting value 1 for all non-zero elements" (OpenVINO's reference and
        # CPU plugin give 1 for negative elements too, 0 for zeros, 1 for NaN). ONNX
        # ReduceSum over no axes would instead reduce over all of them.
        zero = _const_like(ctx, "zero", 0.0, data)
        one = _const_like(ctx, "one", 1.0, data)
        is_zero = ctx.one("Equal", [data, zero])
        ctx.one("Where", [is_zero, zero, one], ctx.out(layer))
        return
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
