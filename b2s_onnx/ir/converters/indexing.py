"""Layers that pick elements by index: Slice, GatherND, GatherElements, OneHot."""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters._constants import INT64_MAX, int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice, Int, input_rank
from b2s_onnx.ir.reader import Layer


@converts("Slice", (8,), inputs=(4, 5), attrs={})
def slice_(ctx, layer, inputs):
    """Slice-8 is ONNX Slice: numpy clamping, negative steps; any integer bound type."""
    data, *bounds = inputs
    step = ctx.value(bounds[2])
    if step is not None and (step == 0).any():
        raise B2SError(f"{layer.where()}: input 'step' has a 0 (steps must be non-zero)")
    start, stop, step = (ctx.int64(b) for b in bounds[:3])
    axes = ctx.int64(bounds[3]) if len(bounds) > 3 else ""
    ctx.one("Slice", [data, start, stop, axes, step], ctx.out(layer))


def _batch_dims(layer: Layer) -> int | None:
    """GatherND's batch_dims may not exceed either input's rank minus one."""
    ranks = [input_rank(layer, 0), input_rank(layer, 1)]
    known = [r for r in ranks if r is not None]
    return min(known) - 1 if known else None


@converts(
    "GatherND",
    (5, 8),
    inputs=(2, 2),
    attrs={"batch_dims": Int(default=0, minimum=0)},
)
def gather_nd(ctx, layer, inputs):
    """GatherND-8 is ONNX GatherND; GatherND-5 folds the batch dims of its output into one."""
    data, indices = inputs
    batch_dims = layer.attrs["batch_dims"]
    most = _batch_dims(layer)
    if most is not None and batch_dims > most:
        raise B2SError(
            f"{layer.where()}: attribute batch_dims={batch_dims} must be below both inputs' "
            f"ranks (at most {most})"
        )
    if layer.version == "opset8" or batch_dims <= 1:
        ctx.one("GatherND", [data, ctx.int64(indices)], ctx.out(layer), batch_dims=batch_dims)
        return
    gathered = ctx.one("GatherND", [data, ctx.int64(indices)], batch_dims=batch_dims)
    shape = ctx.one("Shape", [gathered])
    rest = ctx.one(
        "Slice", [shape, int64s(ctx, "start", [batch_dims]), int64s(ctx, "end", [INT64_MAX])]
    )
    folded = ctx.one("Concat", [int64s(ctx, "batch", [-1]), rest], axis=0)
    ctx.one("Reshape", [gathered, folded], ctx.out(layer))


@converts("GatherElements", (6,), inputs=(2, 2), attrs={"axis": Int(required=True)})
def gather_elements(ctx, layer, inputs):
    data, indices = inputs
    rank = ctx.rank(layer, data)
    axis = layer.attrs["axis"]
    if not -rank <= axis < rank:
        raise B2SError(f"{layer.where()}: attribute axis={axis} is outside rank {rank}")
    ctx.one("GatherElements", [data, ctx.int64(indices)], ctx.out(layer), axis=axis)


@converts(
    "OneHot",
    (1, 16),
    inputs=(4, 4),
    attrs={
        "axis": Int(required=True),
        "negative_indices_mode": Choice(
            allowed=("ignore_negative", "normalize"), default="ignore_negative"
        ),
    },
)
def one_hot(ctx, layer, inputs):
    """Compared against Range(depth) rather than ONNX OneHot, whose onnxruntime kernels take
    few type combinations and which counts negative indices from the end (OneHot-1 and the
    default of OneHot-16 give all off-values for them; 'normalize' adds depth)."""
    indices, depth, on_value, off_value = inputs
    rank = ctx.rank(layer, indices)
    axis = layer.attrs["axis"]
    if not -rank - 1 <= axis <= rank:
        raise B2SError(f"{layer.where()}: attribute axis={axis} is outside rank {rank + 1}")
    axis = axis + rank + 1 if axis < 0 else axis
    mode = layer.attrs["negative_indices_mode"] if layer.version == "opset16" else None
    index = ctx.int64(indices)
    count = ctx.int64(ctx.one("Reshape", [depth, int64s(ctx, "scalar", [])]))
    if mode == "normalize":
        negative = ctx.one("Less", [index, int64s(ctx, "zero", 0)])
        index = ctx.one("Where", [negative, ctx.one("Add", [index, count]), index])
    positions = ctx.one("Range", [int64s(ctx, "zero", 0), count, int64s(ctx, "one", 1)])
    placed = [1] * (rank + 1)
    placed[axis] = -1
    positions = ctx.one("Reshape", [positions, int64s(ctx, "placed", placed)])
    hit = ctx.one("Equal", [ctx.one("Unsqueeze", [index, int64s(ctx, "axis", [axis])]), positions])
    on = ctx.one("Reshape", [on_value, int64s(ctx, "scalar", [])])
    off = ctx.one("Reshape", [off_value, int64s(ctx, "scalar", [])])
    ctx.one("Where", [hit, on, off], ctx.out(layer))
