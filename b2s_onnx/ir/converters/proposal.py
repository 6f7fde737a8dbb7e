"""Proposal-1/4: region proposals of a Faster R-CNN RPN, composed from ONNX ops.

The steps follow OpenVINO's CPU plugin: anchors (fixed by the attributes, computed here)
are shifted over the feature map, moved by the predicted deltas and clipped; boxes
smaller than ``min_size`` keep a zero score; the ``pre_nms_topn`` best go through NMS,
whose IoU counts pixels inclusively (``+1``) in Caffe's convention, which ONNX's
NonMaxSuppression computes when the far corners are moved out by one. Each image's
``post_nms_topn`` rows are written in order; the rest are zeros, and the row after the
last box starts with -1, as OpenVINO marks the end of the list.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, Float, Floats, Int
from b2s_onnx.ir.reader import Layer

f32 = np.float32


def _f32(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, f32))


def anchors(base_size: int, ratios: list[float], scales: list[float], tensorflow: bool):
    """[4, A] anchor corners (x0, y0, x1, y1 offsets from a cell's corner), ratio-major."""
    offset = f32(0.0 if tensorflow else 1.0)
    base_area = f32(base_size * base_size)
    half_base = f32(base_size) * f32(0.5)
    center = f32(0.5) * (f32(base_size) - offset)
    corners = []
    for ratio in ratios:
        width = np.sqrt(base_area / f32(ratio)).astype(f32)
        if not tensorflow:
            width = f32(np.floor(width + f32(0.5)))  # roundf of a positive number
        height = width * f32(ratio)
        if not tensorflow:
            height = f32(np.floor(height + f32(0.5)))
        for scale in scales:
            half_w = f32(0.5) * (width * f32(scale) - offset)
            half_h = f32(0.5) * (height * f32(scale) - offset)
            box = [center - half_w, center - half_h, center + half_w, center + half_h]
            if tensorflow:
                box = [v - half_base for v in box]
            corners.append(box)
    return np.asarray(corners, f32).T


_ATTRS = {
    "base_size": Int(required=True, minimum=1),
    "pre_nms_topn": Int(required=True, minimum=1),
    "post_nms_topn": Int(required=True, minimum=1),
    "nms_thresh": Float(required=True),
    "feat_stride": Int(required=True, minimum=1),
    "min_size": Int(required=True, minimum=0),
    "ratio": Floats(required=True),
    "scale": Floats(required=True),
    "clip_before_nms": Bool(default=True),
    "clip_after_nms": Bool(default=False),
    "normalize": Bool(default=False),
    "box_size_scale": Float(default=1.0),
    "box_coordinate_scale": Float(default=1.0),
    "framework": Choice(allowed=("tensorflow",), default=""),
}


class _Builder:
    """Small arithmetic helpers over one context, so the box formulas read as formulas."""

    def __init__(self, ctx: ConversionContext) -> None:
        self.ctx = ctx

    def __call__(self, op: str, *inputs: str, **attrs) -> str:
        return self.ctx.one(op, list(inputs), **attrs)

    def clamp(self, value: str, high: str) -> str:
        return self("Max", self("Min", value, high), _f32(self.ctx, "zero", 0.0))


def proposal(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    attrs = layer.attrs
    tensorflow = attrs["framework"] == "tensorflow"
    if not attrs["ratio"] or not attrs["scale"]:
        raise B2SError(f"{layer.where()}: attributes ratio and scale need at least one value")
    corner = anchors(attrs["base_size"], attrs["ratio"], attrs["scale"], tensorflow)
    count = corner.shape[1]
    offset = 0.0 if tensorflow else 1.0
    op = _Builder(ctx)
    probs, deltas, info = (
        inputs[i]
        if ctx.type_of(inputs[i]) == TensorProto.FLOAT
        else op("Cast", inputs[i], to=TensorProto.FLOAT)
        for i in range(3)
    )
    shape = op("Shape", probs)
    height = op("Gather", shape, _i64(ctx, "h", 2))
    width = op("Gather", shape, _i64(ctx, "w", 3))

    # Scores of the foreground channels and the deltas, both in (h, w, anchor) order.
    foreground = op(
        "Slice", probs, _i64(ctx, "b", [count]), _i64(ctx, "e", [2 * count]), _i64(ctx, "a", [1])
    )
    scores = op("Reshape", op("Transpose", foreground, perm=[0, 2, 3, 1]), _i64(ctx, "f", [0, -1]))
    moves = op("Reshape", deltas, _i64(ctx, "d", [0, count, 4, -1]))  # [N, A, 4, H*W]
    moves = op("Reshape", op("Transpose", moves, perm=[0, 3, 1, 2]), _i64(ctx, "f4", [0, -1, 4]))
    dx, dy, dw, dh = (op("Gather", moves, _i64(ctx, f"k{k}", k), axis=2) for k in range(4))
    dx = op("Div", dx, _f32(ctx, "coord", attrs["box_coordinate_scale"]))
    dy = op("Div", dy, _f32(ctx, "coord", attrs["box_coordinate_scale"]))
    dw = op("Div", dw, _f32(ctx, "size", attrs["box_size_scale"]))
    dh = op("Div", dh, _f32(ctx, "size", attrs["box_size_scale"]))

    # Anchor corners shifted to every cell: [H * W * A].
    stride = _i64(ctx, "stride", attrs["feat_stride"])
    rows = op(
        "Cast",
        op("Mul", op("Range", _i64(ctx, "0", 0), height, _i64(ctx, "1", 1)), stride),
        to=TensorProto.FLOAT,
    )
    cols = op(
        "Cast",
        op("Mul", op("Range", _i64(ctx, "0", 0), width, _i64(ctx, "1", 1)), stride),
        to=TensorProto.FLOAT,
    )
    rows = op("Unsqueeze", rows, _i64(ctx, "ax", [1, 2]))  # [H, 1, 1]
    cols = op("Unsqueeze", cols, _i64(ctx, "ax", [0, 2]))  # [1, W, 1]
    shift_x, shift_y = (rows, cols) if tensorflow else (cols, rows)

    cells = op(
        "Concat",
        op("Unsqueeze", height, _i64(ctx, "ax", [0])),
        op("Unsqueeze", width, _i64(ctx, "ax", [0])),
        _i64(ctx, "a", [count]),
        axis=0,
    )

    def shifted(index: int, shift: str) -> str:
        value = op("Add", shift, _f32(ctx, "anchor", corner[index].reshape(1, 1, count)))
        return op("Reshape", op("Expand", value, cells), _i64(ctx, "flat", [1, -1]))

    x0, y0, x1, y1 = (shifted(i, s) for i, s in enumerate((shift_x, shift_y, shift_x, shift_y)))

    # Image size and scales: [img_h, img_w, scale_h(, scale_w)].
    def info_value(index: int) -> str:
        return op("Gather", info, _i64(ctx, "i", [index]))

    img_h, img_w = (info_value(1), info_value(0)) if tensorflow else (info_value(0), info_value(1))
    scale_h = info_value(2)
    # A 3-value info has one scale for both axes.
    scale_w = op("Gather", op("Concat", info, scale_h, axis=0), _i64(ctx, "i", [3]))
    if tensorflow:
        x0, x1 = op.clamp(x0, img_w), op.clamp(x1, img_w)
        y0, y1 = op.clamp(y0, img_h), op.clamp(y1, img_h)
    off = _f32(ctx, "offset", offset)
    half = _f32(ctx, "half", 0.5)
    ww = op("Add", op("Sub", x1, x0), off)
    hh = op("Add", op("Sub", y1, y0), off)
    ctr_x = op("Add", x0, op("Mul", half, ww))
    ctr_y = op("Add", y0, op("Mul", half, hh))
    pred_x = op("Add", op("Mul", dx, ww), ctr_x)
    pred_y = op("Add", op("Mul", dy, hh), ctr_y)
    pred_w = op("Mul", op("Exp", dw), ww)
    pred_h = op("Mul", op("Exp", dh), hh)
    x0 = op("Sub", pred_x, op("Mul", half, pred_w))
    y0 = op("Sub", pred_y, op("Mul", half, pred_h))
    x1 = op("Add", pred_x, op("Mul", half, pred_w))
    y1 = op("Add", pred_y, op("Mul", half, pred_h))
    if attrs["clip_before_nms"]:
        limit_w, limit_h = op("Sub", img_w, off), op("Sub", img_h, off)
        x0, x1 = op.clamp(x0, limit_w), op.clamp(x1, limit_w)
        y0, y1 = op.clamp(y0, limit_h), op.clamp(y1, limit_h)
    box_w = op("Add", op("Sub", x1, x0), off)
    box_h = op("Add", op("Sub", y1, y0), off)
    min_size = _f32(ctx, "min_size", float(attrs["min_size"]))
    big = op(
        "And",
        op("LessOrEqual", op("Mul", min_size, scale_w), box_w),
        op("LessOrEqual", op("Mul", min_size, scale_h), box_h),
    )
    scores = op("Mul", scores, op("Cast", big, to=TensorProto.FLOAT))

    # The pre_nms_topn best boxes of each image, then NMS.
    total = op("Gather", op("Shape", scores), _i64(ctx, "p", [1]))
    keep = op("Min", total, _i64(ctx, "pre", [attrs["pre_nms_topn"]]))
    _, order = ctx.node("TopK", [scores, keep], [ctx.tmp("best"), ctx.tmp("order")], axis=1)
    boxes = op(
        "Concat", *(op("Unsqueeze", c, _i64(ctx, "ax", [2])) for c in (x0, y0, x1, y1)), axis=2
    )
    index4 = op(
        "Expand",
        op("Unsqueeze", order, _i64(ctx, "ax", [2])),
        op("Concat", op("Shape", order), _i64(ctx, "four", [4]), axis=0),
    )
    top_boxes = op("GatherElements", boxes, index4, axis=1)  # [N, pre, 4]
    top_scores = op("GatherElements", scores, order, axis=1)  # [N, pre]
    # Inclusive pixel counting: the far corners move out by the offset.
    inclusive = op("Add", top_boxes, _f32(ctx, "grow", [0.0, 0.0, offset, offset]))
    threshold = min(max(attrs["nms_thresh"], 0.0), 1.0)
    selected = op(
        "NonMaxSuppression",
        inclusive,
        op("Unsqueeze", top_scores, _i64(ctx, "ax", [1])),
        _i64(ctx, "post", [attrs["post_nms_topn"]]),
        _f32(ctx, "iou", [threshold]),
    )
    batch = op("Gather", selected, _i64(ctx, "c0", 0), axis=1)
    pick = op(
        "Concat",
        op("Unsqueeze", batch, _i64(ctx, "ax", [1])),
        op("Slice", selected, _i64(ctx, "b", [2]), _i64(ctx, "e", [3]), _i64(ctx, "a", [1])),
        axis=1,
    )
    chosen = op("GatherND", top_boxes, pick)  # [K, 4]
    chosen_scores = op("GatherND", top_scores, pick)  # [K]
    if attrs["clip_after_nms"]:
        bounds = op("Concat", img_w, img_h, img_w, img_h, axis=0)
        chosen = op("Max", op("Min", chosen, bounds), _f32(ctx, "zero", 0.0))
    if attrs["normalize"]:
        chosen = op("Div", chosen, op("Concat", img_w, img_h, img_w, img_h, axis=0))

    # Rank of each row within its image, then scatter into [N, post, 5].
    images = op("Gather", op("Shape", probs), _i64(ctx, "n", [0]))
    image_ids = op("Range", _i64(ctx, "0", 0), op("Squeeze", images), _i64(ctx, "1", 1))
    member = op(
        "Equal",
        op("Unsqueeze", batch, _i64(ctx, "ax", [1])),
        op("Unsqueeze", image_ids, _i64(ctx, "ax", [0])),
    )  # [K, N]
    member_i = op("Cast", member, to=TensorProto.INT64)
    per_image = ctx.reduce("ReduceSum", member_i, [0], False)  # [N]
    before = op("Sub", op("CumSum", per_image, _i64(ctx, "a0", 0)), per_image)
    row = op(
        "Range",
        _i64(ctx, "0", 0),
        op("Squeeze", op("Gather", op("Shape", batch), _i64(ctx, "z", [0]))),
        _i64(ctx, "1", 1),
    )
    rank = op("Sub", row, op("Gather", before, batch))
    where = op(
        "Concat",
        op("Unsqueeze", batch, _i64(ctx, "ax", [1])),
        op("Unsqueeze", rank, _i64(ctx, "ax", [1])),
        axis=1,
    )
    post = attrs["post_nms_topn"]
    grid_shape = op("Concat", images, _i64(ctx, "rows", [post, 5]), axis=0)
    rows_out = op(
        "Concat",
        op("Unsqueeze", op("Cast", batch, to=TensorProto.FLOAT), _i64(ctx, "ax", [1])),
        chosen,
        axis=1,
    )
    table = op("ScatterND", op("ConstantOfShape", grid_shape), where, rows_out)
    # The -1 marker after each image's last box.
    slots = _i64(ctx, "slots", np.arange(post).reshape(1, post))
    marker = op("Equal", slots, op("Unsqueeze", per_image, _i64(ctx, "ax", [1])))  # [N, post]
    first_column = _f32(ctx, "col0", [1.0, 0.0, 0.0, 0.0, 0.0])
    marked = op(
        "Sub",
        table,
        op(
            "Mul",
            op("Unsqueeze", op("Cast", marker, to=TensorProto.FLOAT), _i64(ctx, "ax", [2])),
            first_column,
        ),
    )
    rois = op("Reshape", marked, _i64(ctx, "flat", [-1, 5]))
    _write(ctx, layer, 0, rois)
    if len(layer.outputs) > 1:
        prob_table = op(
            "ScatterND",
            op("ConstantOfShape", op("Concat", images, _i64(ctx, "p", [post]), axis=0)),
            where,
            chosen_scores,
        )
        _write(ctx, layer, 1, op("Reshape", prob_table, _i64(ctx, "flat", [-1])))


def _write(ctx: ConversionContext, layer: Layer, index: int, value: str) -> None:
    out = ctx.out(layer, index)
    if ctx.type_of(out) == TensorProto.FLOAT:
        ctx.one("Identity", [value], out)
    else:
        ctx.one("Cast", [value], out, to=ctx.type_of(out))


converts("Proposal", (1, 4), inputs=(3, 3), attrs=_ATTRS)(proposal)
