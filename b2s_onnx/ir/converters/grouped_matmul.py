"""GroupedMatMul-17: the per-expert products of a mixture-of-experts layer.

OpenVINO 2026.4 defines two forms, both with the weights as ``[G, N, K]`` (each group's
matrix transposed, as the shape inference checks ``K`` against ``mat_b``'s last axis):

- 3-D x 3-D, ``[G, M, K] x [G, N, K] -> [G, M, N]``: a batched MatMul on the weights
  transposed (folded into the constant when they are one).
- 2-D x 3-D with ``offsets``, ``[T, K] x [G, N, K] -> [T, N]``: the token rows come sorted
  by expert; group ``g`` owns rows ``offsets[g-1] .. offsets[g]`` (from 0 for the first)
  and multiplies them by its own matrix. Rows after the last offset belong to no group and
  stay 0, as in OpenVINO's reference. The offsets are computed at run time (routing), so
  an ONNX Loop runs one MatMul per group on its slice of rows and scatters the product
  into the output: every row is multiplied once, by its own expert, where multiplying all
  rows by all experts and picking would cost G times the work and a [G, T, N] buffer.
  Offsets are clamped to [0, T]; a decreasing one gives its group no rows (OpenVINO's
  reference reads out of bounds there). Offsets beyond the G-th are ignored, as OpenVINO
  does; fewer than G are refused when their count is static (OpenVINO would read past
  them) and fail in onnxruntime's Gather otherwise.

OpenVINO 2026.4's CPU plugin cannot run the op (no kernel and no reference fallback), so
its tests compare with the specification's formula.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters._constants import axis_size, int64s
from b2s_onnx.ir.converters.kernel_types import cast, has_kernel, wider_type
from b2s_onnx.ir.converters.registry import converts


@converts("GroupedMatMul", (17,), inputs=(2, 3), attrs={})
def grouped_matmul(ctx, layer, inputs):
    a, b = inputs[:2]
    ranks = (ctx.rank(layer, a), ctx.rank(layer, b))
    elem = ctx.type_of(a)
    if ctx.type_of(b) != elem:
        raise B2SError(f"{layer.where()}: inputs 'mat_a' and 'mat_b' must have one element type")
    if ranks == (3, 3):
        _check_dims(layer, ctx.shape(a), ctx.shape(b), ((0, 0), (2, 2)))
        weights = _transposed_weights(ctx, b)
        _in_type(ctx, layer, a, weights, lambda x, w, _, out: ctx.one("MatMul", [x, w], out))
        return
    if ranks != (2, 3):
        raise B2SError(
            f"{layer.where()}: 'mat_a' x 'mat_b' of ranks {ranks[0]} x {ranks[1]}: "
            "GroupedMatMul-17 takes 3-D x 3-D or 2-D x 3-D"
        )
    if len(inputs) < 3:
        raise B2SError(f"{layer.where()}: 2-D x 3-D needs input 'offsets' (one end per group)")
    offsets = inputs[2]
    if ctx.type_of(offsets) not in (TensorProto.INT32, TensorProto.INT64):
        raise B2SError(f"{layer.where()}: input 'offsets' must be i32 or i64")
    _check_dims(layer, ctx.shape(a), ctx.shape(b), ((1, 2),))
    groups = (ctx.shape(b) or (None,))[0]
    offsets_shape = ctx.shape(offsets)
    if offsets_shape is not None and len(offsets_shape) != 1:
        raise B2SError(f"{layer.where()}: input 'offsets' must be 1-D (one end per group)")
    if groups is not None and offsets_shape is not None and (offsets_shape[0] or groups) < groups:
        raise B2SError(
            f"{layer.where()}: input 'offsets' holds {offsets_shape[0]} ends for {groups} "
            "groups; it needs one end per group"
        )
    weights = _transposed_weights(ctx, b)
    _in_type(
        ctx,
        layer,
        a,
        weights,
        lambda x, w, work, out: _by_groups(ctx, layer, x, w, offsets, work, out),
    )


def _check_dims(layer, a_shape, b_shape, pairs) -> None:
    """Static dimensions that must agree: (axis of mat_a, axis of mat_b) pairs."""
    if a_shape is None or b_shape is None:
        return
    for axis_a, axis_b in pairs:
        da, db = a_shape[axis_a], b_shape[axis_b]
        if da is not None and db is not None and da != db:
            what = "group count" if axis_a == 0 else "inner dimension K"
            raise B2SError(
                f"{layer.where()}: {what} differs: 'mat_a' axis {axis_a} is {da}, "
                f"'mat_b' axis {axis_b} is {db}"
            )


def _transposed_weights(ctx, weights: str) -> str:
    """[G, N, K] -> [G, K, N]: a constant is transposed here, a computed one by a node."""
    value = ctx.value(weights)
    if value is not None:
        return ctx.const("weights", np.ascontiguousarray(np.transpose(value, (0, 2, 1))))
    return ctx.one("Transpose", [weights], perm=[0, 2, 1])


def _in_type(ctx, layer, a: str, weights: str, product) -> None:
    """Writes the layer's output as ``product(a, weights, type, output)`` in a type
    onnxruntime's MatMul has: integer products wrap, so a wider integer type followed by a
    Cast back keeps the low bits exactly."""
    elem = ctx.type_of(a)
    if has_kernel("MatMul", elem, ctx.opset):
        product(a, weights, elem, ctx.out(layer))
        return
    work = wider_type("MatMul", elem, ctx.opset)
    if work is None:
        raise B2SError(f"{layer.where()}: no MatMul kernel for this element type")
    result = product(cast(ctx, a, work), cast(ctx, weights, work), work, None)
    ctx.one("Cast", [result], ctx.out(layer), to=elem)


def _by_groups(
    ctx, layer, a: str, weights: str, offsets: str, elem: int, output: str | None
) -> str:
    """The 2-D x 3-D form in element type ``elem``: an ONNX Loop over the groups, each one
    MatMul on its rows."""
    rows, columns = axis_size(ctx, a, 0), axis_size(ctx, weights, 2)
    groups = ctx.one("Squeeze", [axis_size(ctx, weights, 0)])
    ends = ctx.one("Cast", [offsets], to=TensorProto.INT64)
    zero = int64s(ctx, "zero", [0])
    ends = ctx.one("Where", [ctx.one("Less", [ends, zero]), zero, ends])
    ends = ctx.one("Where", [ctx.one("Greater", [ends, rows]), rows, ends])
    starts = ctx.one(
        "Concat",
        [zero, ctx.one("Slice", [ends, int64s(ctx, "s", [0]), int64s(ctx, "e", [-1])])],
        axis=0,
    )
    filled = ctx.one(
        "ConstantOfShape",
        [ctx.one("Concat", [rows, columns], axis=0)],
        value=helper.make_tensor("zero", elem, [1], [0]),
    )

    g, keep, acc = ctx.tmp("group"), ctx.tmp("cond"), ctx.tmp("acc")
    hints = "begin end b1 e1 part w prod span count last index column next going"
    n = {hint: ctx.tmp(hint) for hint in hints.split()}
    axis0 = int64s(ctx, "axis0", [0])
    one = int64s(ctx, "one", 1)
    body = [
        helper.make_node("Gather", [starts, g], [n["begin"]], axis=0),
        helper.make_node("Gather", [ends, g], [n["end"]], axis=0),
        helper.make_node("Unsqueeze", [n["begin"], axis0], [n["b1"]]),
        helper.make_node("Unsqueeze", [n["end"], axis0], [n["e1"]]),
        helper.make_node("Slice", [a, n["b1"], n["e1"], axis0], [n["part"]]),
        helper.make_node("Gather", [weights, g], [n["w"]], axis=0),
        helper.make_node("MatMul", [n["part"], n["w"]], [n["prod"]]),
        # The product's row count, not end - begin: a decreasing end gives an empty slice.
        helper.make_node("Shape", [n["part"]], [n["span"]]),
        helper.make_node("Gather", [n["span"], int64s(ctx, "first", 0)], [n["count"]], axis=0),
        helper.make_node("Add", [n["begin"], n["count"]], [n["last"]]),
        helper.make_node("Range", [n["begin"], n["last"], one], [n["index"]]),
        helper.make_node("Unsqueeze", [n["index"], int64s(ctx, "axis1", [1])], [n["column"]]),
        helper.make_node("ScatterND", [acc, n["column"], n["prod"]], [n["next"]]),
        helper.make_node("Identity", [keep], [n["going"]]),
    ]
    graph = helper.make_graph(
        body,
        f"{layer.name}_groups",
        [
            helper.make_tensor_value_info(g, TensorProto.INT64, []),
            helper.make_tensor_value_info(keep, TensorProto.BOOL, []),
            helper.make_tensor_value_info(acc, elem, None),
        ],
        [
            helper.make_tensor_value_info(n["going"], TensorProto.BOOL, []),
            helper.make_tensor_value_info(n["next"], elem, None),
        ],
    )
    return ctx.one("Loop", [groups, "", filled], output, body=graph)
