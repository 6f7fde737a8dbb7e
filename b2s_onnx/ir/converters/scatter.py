"""Layers that write updates into a copy of a tensor: ScatterUpdate, ScatterNDUpdate,
ScatterElementsUpdate (with every reduction OpenVINO defines)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.kernel_types import UNSIGNED, cast, emit
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice
from b2s_onnx.ir.reader import Layer

#: OpenVINO reduction -> (ONNX reduction, first ONNX opset that has it)
_ONNX_REDUCTION = {
    "none": ("none", 13),
    "sum": ("add", 16),
    "sub": ("add", 16),
    "prod": ("mul", 16),
    "mean": ("add", 16),
    "min": ("min", 18),
    "max": ("max", 18),
}


def _reduction(ctx: ConversionContext, layer: Layer, reduction: str) -> str:
    onnx_name, first = _ONNX_REDUCTION[reduction]
    if ctx.opset < first:
        raise B2SError(
            f"{layer.where()}: attribute reduction='{reduction}' needs ONNX opset {first} or "
            f"later (converting to opset {ctx.opset})"
        )
    return onnx_name


def _axis(ctx: ConversionContext, layer: Layer, tensor: str, rank: int) -> int:
    axis = int(ctx.require_value(layer, tensor, "the axis input").reshape(-1)[0])
    if not -rank <= axis < rank:
        raise B2SError(f"{layer.where()}: input 'axis' = {axis} is outside rank {rank}")
    return axis + rank if axis < 0 else axis


@converts("ScatterUpdate", (3,), inputs=(4, 4), attrs={})
def scatter_update(ctx, layer, inputs):
    """Whole slices along ``axis``: the axis is moved to the front, where ONNX ScatterND
    writes slices indexed by the leading dimension, and moved back."""
    data, indices, updates, axis_input = inputs
    rank = ctx.rank(layer, data)
    index_rank = ctx.rank(layer, indices)
    axis = _axis(ctx, layer, axis_input, rank)
    to_front = [axis, *range(axis), *range(axis + 1, rank)]
    updates_to_front = [
        *range(axis, axis + index_rank),
        *range(axis),
        *range(axis + index_rank, rank - 1 + index_rank),
    ]
    moved = ctx.one("Transpose", [data], perm=to_front)
    moved_updates = ctx.one("Transpose", [updates], perm=updates_to_front)
    rows = ctx.one("Unsqueeze", [ctx.int64(indices), ctx.const("last", np.asarray([-1]))])
    written = ctx.one("ScatterND", [moved, rows, moved_updates])
    ctx.one("Transpose", [written], ctx.out(layer), perm=list(np.argsort(to_front)))


@converts(
    "ScatterNDUpdate",
    (4, 15),
    inputs=(3, 3),
    attrs={
        "reduction": Choice(allowed=("none", "sum", "sub", "prod", "min", "max"), default="none"),
    },
)
def scatter_nd_update(ctx, layer, inputs):
    """ScatterNDUpdate-4 (OpenVINO's v3) overwrites; v15 reduces, 'sub' as a sum of
    negated updates (unsigned ones as 0 - u, which wraps like OpenVINO's subtraction; ONNX
    Neg has no unsigned types). onnxruntime's ScatterND refuses min/max on bool at run
    time: those run in uint8 (min is logical and, max logical or) and are cast back."""
    data, indices, updates = inputs
    reduction = layer.attrs["reduction"] if layer.version == "opset15" else "none"
    elem = ctx.type_of(data)
    if reduction == "sub":
        if elem in UNSIGNED:
            zero = ctx.const("zero", np.zeros((), NUMPY_OF_ONNX[elem]))
            updates = emit(ctx, layer, "Sub", [zero, updates], elem=elem)
        else:
            updates = ctx.one("Neg", [updates])
    attrs = {}
    if reduction != "none":
        attrs["reduction"] = _reduction(ctx, layer, reduction)
    if elem == TensorProto.BOOL and reduction in ("min", "max"):
        wide = TensorProto.UINT8
        written = ctx.one(
            "ScatterND",
            [cast(ctx, data, wide), ctx.int64(indices), cast(ctx, updates, wide)],
            **attrs,
        )
        ctx.one("Cast", [written], ctx.out(layer), to=elem)
        return
    ctx.one("ScatterND", [data, ctx.int64(indices), updates], ctx.out(layer), **attrs)


def _neutral(dtype: np.dtype, reduction: str) -> np.ndarray:
    """The value a position starts from when its initial value is not used."""
    if dtype == np.bool_:
        # sum is logical or, prod logical and; min is and, max or.
        return np.asarray(reduction in ("prod", "min"), dtype)
    if reduction in ("sum", "mean"):
        return np.zeros((), dtype)
    if reduction == "prod":
        return np.ones((), dtype)
    if np.issubdtype(dtype, np.floating):
        return np.asarray(np.inf if reduction == "min" else -np.inf, dtype)
    info = np.iinfo(dtype)
    return np.asarray(info.max if reduction == "min" else info.min, dtype)


@converts(
    "ScatterElementsUpdate",
    (3, 12),
    inputs=(4, 4),
    attrs={
        "reduction": Choice(allowed=("none", "sum", "prod", "min", "max", "mean"), default="none"),
        "use_init_val": Bool(default=True),
    },
)
def scatter_elements_update(ctx, layer, inputs):
    """ONNX ScatterElements; without ``use_init_val`` the written positions first take the
    reduction's neutral value; 'mean' divides a sum by a count scattered the same way.
    onnxruntime's ScatterElements refuses min/max on bool at run time: those run in uint8
    and are cast back."""
    data, indices, updates, axis_input = inputs
    axis = _axis(ctx, layer, axis_input, ctx.rank(layer, data))
    index = ctx.int64(indices)
    twelve = layer.version == "opset12"
    reduction = layer.attrs["reduction"] if twelve else "none"
    use_init = layer.attrs["use_init_val"] if twelve else True
    if reduction == "none":
        ctx.one("ScatterElements", [data, index, updates], ctx.out(layer), axis=axis)
        return
    onnx_reduction = _reduction(ctx, layer, reduction)
    elem = ctx.type_of(data)
    output = ctx.out(layer)
    if elem == TensorProto.BOOL and reduction in ("min", "max"):
        data, updates = cast(ctx, data, TensorProto.UINT8), cast(ctx, updates, TensorProto.UINT8)
        output = ctx.tmp("widened")
        elem = TensorProto.UINT8
    dtype = np.dtype(NUMPY_OF_ONNX[elem])
    shape = ctx.one("Shape", [updates])

    def fill(value: np.ndarray) -> str:
        return ctx.one("Expand", [ctx.const("fill", value), shape])

    start = data
    if not use_init:
        start = ctx.one(
            "ScatterElements", [data, index, fill(_neutral(dtype, reduction))], axis=axis
        )
    if reduction != "mean":
        ctx.one(
            "ScatterElements",
            [start, index, updates],
            output,
            axis=axis,
            reduction=onnx_reduction,
        )
        if output != ctx.out(layer):
            ctx.one("Cast", [output], ctx.out(layer), to=TensorProto.BOOL)
        return
    total = ctx.one("ScatterElements", [start, index, updates], axis=axis, reduction="add")
    ones = ctx.one("Expand", [ctx.const("one", np.ones((), dtype)), ctx.one("Shape", [data])])
    if not use_init:
        ones = ctx.one("ScatterElements", [ones, index, fill(np.zeros((), dtype))], axis=axis)
    count = ctx.one(
        "ScatterElements", [ones, index, fill(np.ones((), dtype))], axis=axis, reduction="add"
    )
    ctx.one("Div", [total, count], ctx.out(layer))


@converts("SliceScatter", (15,), inputs=(5, 6), attrs={})
def slice_scatter(ctx, layer, inputs):
    """The flat positions of the slice (the same Slice applied to a tensor of positions)
    are where ONNX ScatterND writes the updates into the flattened data."""
    data, updates, start, stop, step = inputs[:5]
    step_value = ctx.value(step)
    if step_value is not None and (step_value == 0).any():
        raise B2SError(f"{layer.where()}: input 'step' has a 0 (steps must be non-zero)")
    shape = ctx.one("Shape", [data])
    count = ctx.reduce("ReduceProd", shape, [0], keepdims=False)
    zero, one = ctx.const("zero", np.asarray(0)), ctx.const("one", np.asarray(1))
    positions = ctx.one("Reshape", [ctx.one("Range", [zero, count, one]), shape])
    axes = ctx.int64(inputs[5]) if len(inputs) > 5 else ""
    bounds = [ctx.int64(start), ctx.int64(stop), axes, ctx.int64(step)]
    chosen = ctx.one("Slice", [positions, *bounds])
    flat = ctx.const("flat", np.asarray([-1]))
    rows = ctx.one("Unsqueeze", [ctx.one("Reshape", [chosen, flat]), flat])
    written = ctx.one(
        "ScatterND",
        [ctx.one("Reshape", [data, flat]), rows, ctx.one("Reshape", [updates, flat])],
    )
    ctx.one("Reshape", [written, shape], ctx.out(layer))
