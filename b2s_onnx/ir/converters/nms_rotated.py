"""NMSRotated-13: greedy NMS of rotated boxes [x_center, y_center, width, height, angle].

ONNX's NonMaxSuppression knows only upright boxes, so the IoU of every pair of rotated
boxes of a batch is computed here and the greedy selection is :func:`nms.greedy_selection`
(an ONNX Loop). The intersection of two rotated rectangles is the convex polygon spanned by
the corners of each inside the other and the crossings of their edges (at most 24
candidate points): valid points are ordered by their angle around their centroid (a
pseudo-angle, ONNX having no atan2), the missing ones collapse onto the first, and the
shoelace formula gives the area. Memory grows with the square of the number of boxes.
As the spec says, a box is kept at ``score >= score_threshold`` and suppressed at
``iou > iou_threshold``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.nms import emit_outputs, greedy_selection, one_value
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType
from b2s_onnx.ir.reader import Layer

#: Slack for "corner inside the other box", relative to box size units.
INSIDE_EPS = np.float32(1e-5)


class _Ops:
    """Terse arithmetic on one context, so the geometry reads as formulas."""

    def __init__(self, ctx: ConversionContext) -> None:
        self.ctx = ctx

    def __call__(self, op: str, *inputs: str, **attrs) -> str:
        return self.ctx.one(op, list(inputs), **attrs)

    def part(self, tensor: str, index: int, axis: int = -1) -> str:
        return self("Gather", tensor, _i64(self.ctx, f"i{index}", index), axis=axis)

    def cross(self, ax: str, ay: str, bx: str, by: str) -> str:
        return self("Sub", self("Mul", ax, by), self("Mul", ay, bx))


def _corners(op: _Ops, boxes: str, clockwise: bool) -> tuple[str, str, list[str]]:
    """Corner coordinates ([B, M, 4] each) of boxes [B, M, 5], in order around the box,
    and the boxes' (cos, sin, cx, cy, half_w, half_h) parts [B, M] for inside tests."""
    ctx = op.ctx
    cx, cy, width, height, angle = (op.part(boxes, k) for k in range(5))
    if not clockwise:  # image coordinates: y grows downwards, so "clockwise" is the plain turn
        angle = op("Neg", angle)
    cos, sin = op("Cos", angle), op("Sin", angle)
    half = _f32(ctx, "half", 0.5)
    half_w, half_h = op("Mul", width, half), op("Mul", height, half)
    last = _i64(ctx, "ax", [-1])
    sign_x = _f32(ctx, "sx", [-1.0, 1.0, 1.0, -1.0])
    sign_y = _f32(ctx, "sy", [-1.0, -1.0, 1.0, 1.0])
    dx = op("Mul", op("Unsqueeze", half_w, last), sign_x)
    dy = op("Mul", op("Unsqueeze", half_h, last), sign_y)
    cos4, sin4 = op("Unsqueeze", cos, last), op("Unsqueeze", sin, last)
    xs = op("Add", op("Unsqueeze", cx, last), op("Sub", op("Mul", dx, cos4), op("Mul", dy, sin4)))
    ys = op("Add", op("Unsqueeze", cy, last), op("Add", op("Mul", dx, sin4), op("Mul", dy, cos4)))
    return xs, ys, [cos, sin, cx, cy, half_w, half_h]


def _inside(op: _Ops, px: str, py: str, frame: list[str]) -> str:
    """Whether points (px, py) lie in the boxes described by ``frame`` (broadcast)."""
    cos, sin, cx, cy, half_w, half_h = frame
    rx, ry = op("Sub", px, cx), op("Sub", py, cy)
    u = op("Add", op("Mul", rx, cos), op("Mul", ry, sin))
    v = op("Sub", op("Mul", ry, cos), op("Mul", rx, sin))
    eps = _f32(op.ctx, "eps", INSIDE_EPS)
    return op(
        "And",
        op("LessOrEqual", op("Abs", u), op("Add", half_w, eps)),
        op("LessOrEqual", op("Abs", v), op("Add", half_h, eps)),
    )


def rotated_pairwise_iou(ctx: ConversionContext, boxes: str, clockwise: bool) -> str:
    """[B, M, M] IoU of every pair of rotated boxes [B, M, 5] of a batch."""
    op = _Ops(ctx)
    xs, ys, frame = _corners(op, boxes, clockwise)

    def as_i(t: str, extra: list[int]) -> str:  # box i along axis 1
        return op("Unsqueeze", t, _i64(ctx, "ax", [2, *extra]))

    def as_j(t: str, extra: list[int]) -> str:  # box j along axis 2
        return op("Unsqueeze", t, _i64(ctx, "ax", [1, *extra]))

    # Corners of i inside j and of j inside i: [B, M, M, 4] each.
    frame_j = [as_j(t, [3]) for t in frame]
    frame_i = [as_i(t, [3]) for t in frame]
    xi, yi, xj, yj = as_i(xs, []), as_i(ys, []), as_j(xs, []), as_j(ys, [])
    shape = op("Shape", op("Add", xi, xj))
    xi_full, yi_full = op("Expand", xi, shape), op("Expand", yi, shape)
    xj_full, yj_full = op("Expand", xj, shape), op("Expand", yj, shape)
    in_j = _inside(op, xi_full, yi_full, frame_j)
    in_i = _inside(op, xj_full, yj_full, frame_i)

    # Edge crossings: edges k of i ([B, M, 1, 4, 1]) against edges l of j ([B, 1, M, 1, 4]).
    nxt = _i64(ctx, "next", [1, 2, 3, 0])

    def edges(cx: str, cy: str) -> tuple[str, str, str, str]:
        return (
            cx,
            cy,
            op("Sub", op("Gather", cx, nxt, axis=-1), cx),
            op("Sub", op("Gather", cy, nxt, axis=-1), cy),
        )

    px, py, rx, ry = (as_i(t, [4]) for t in edges(xs, ys))
    qx, qy, sx, sy = (as_j(t, [3]) for t in edges(xs, ys))
    denom = op.cross(rx, ry, sx, sy)
    gap_x, gap_y = op("Sub", qx, px), op("Sub", qy, py)
    parallel = op("Equal", denom, _f32(ctx, "zero", 0.0))
    safe = op("Where", parallel, _f32(ctx, "one", 1.0), denom)
    t = op("Div", op.cross(gap_x, gap_y, sx, sy), safe)
    u = op("Div", op.cross(gap_x, gap_y, rx, ry), safe)
    zero, one = _f32(ctx, "zero", 0.0), _f32(ctx, "one", 1.0)

    def unit(value: str) -> str:
        return op("And", op("GreaterOrEqual", value, zero), op("LessOrEqual", value, one))

    crossing = op("And", op("Not", parallel), op("And", unit(t), unit(u)))
    cross_x = op("Add", px, op("Mul", t, rx))
    cross_y = op("Add", py, op("Mul", t, ry))
    flat = op("Concat", _i64(ctx, "lead", [0, 0, 0]), _i64(ctx, "sixteen", [16]), axis=0)
    cross_x, cross_y, crossing = (op("Reshape", v, flat) for v in (cross_x, cross_y, crossing))

    # The candidate points of the intersection polygon: [B, M, M, 24].
    px_all = op("Concat", xi_full, xj_full, cross_x, axis=3)
    py_all = op("Concat", yi_full, yj_full, cross_y, axis=3)
    valid = op("Concat", in_j, in_i, crossing, axis=3)
    weight = op("Cast", valid, to=TensorProto.FLOAT)
    count = op("Max", ctx.reduce("ReduceSum", weight, [3], True), one)
    mean_x = op("Div", ctx.reduce("ReduceSum", op("Mul", px_all, weight), [3], True), count)
    mean_y = op("Div", ctx.reduce("ReduceSum", op("Mul", py_all, weight), [3], True), count)
    dx, dy = op("Sub", px_all, mean_x), op("Sub", py_all, mean_y)
    norm = op("Add", op("Abs", dx), op("Abs", dy))
    ratio = op("Div", dx, op("Where", op("Equal", norm, zero), one, norm))
    upper = op("Sub", one, ratio)
    lower = op("Add", _f32(ctx, "three", 3.0), ratio)
    angle = op("Where", op("GreaterOrEqual", dy, zero), upper, lower)
    angle = op("Where", valid, angle, _f32(ctx, "never", 10.0))
    points = _i64(ctx, "points", [24])
    _, order = ctx.node(
        "TopK", [angle, points], [ctx.tmp("angles"), ctx.tmp("order")], axis=3, largest=0
    )
    sx_sorted = op("GatherElements", px_all, order, axis=3)
    sy_sorted = op("GatherElements", py_all, order, axis=3)
    v_sorted = op("GatherElements", valid, order, axis=3)
    first_x, first_y = (
        op("Slice", v, _i64(ctx, "b", [0]), _i64(ctx, "e", [1]), _i64(ctx, "a", [3]))
        for v in (sx_sorted, sy_sorted)
    )
    sx_sorted = op("Where", v_sorted, sx_sorted, first_x)
    sy_sorted = op("Where", v_sorted, sy_sorted, first_y)
    next_x = op("Gather", sx_sorted, _i64(ctx, "cycle", [*range(1, 24), 0]), axis=3)
    next_y = op("Gather", sy_sorted, _i64(ctx, "cycle", [*range(1, 24), 0]), axis=3)
    twice = ctx.reduce("ReduceSum", op.cross(sx_sorted, sy_sorted, next_x, next_y), [3], False)
    inter = op("Mul", op("Abs", twice), _f32(ctx, "half", 0.5))
    area = op("Mul", op.part(boxes, 2), op.part(boxes, 3))  # [B, M]
    union = op("Sub", op("Add", as_i(area, []), as_j(area, [])), inter)
    positive = op("Greater", union, zero)
    return op("Where", positive, op("Div", inter, op("Where", positive, union, one)), zero)


@converts(
    "NMSRotated",
    (13,),
    inputs=(5, 5),
    attrs={
        "sort_result_descending": Bool(default=True),
        "output_type": ElementType(allowed=("i32", "i64"), default="i64"),
        "clockwise": Bool(default=True),
    },
)
def nms_rotated(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    boxes, scores = (
        t if ctx.type_of(t) == TensorProto.FLOAT else ctx.one("Cast", [t], to=TensorProto.FLOAT)
        for t in inputs[:2]
    )
    pairwise = rotated_pairwise_iou(ctx, boxes, layer.attrs["clockwise"])
    selected, score = greedy_selection(
        ctx,
        pairwise,
        scores,
        one_value(ctx, inputs, 2, 0, TensorProto.INT64),
        one_value(ctx, inputs, 3, 0.0, TensorProto.FLOAT),
        one_value(ctx, inputs, 4, 0.0, TensorProto.FLOAT),
        _f32(ctx, "hard", [0.0]),
        rules=("GreaterOrEqual", "Greater"),
    )
    emit_outputs(ctx, layer, selected, score, layer.attrs["sort_result_descending"])
