"""MulticlassNms-8/9: per-class NMS, per-image ``keep_top_k`` and OpenVINO's output order,
on ONNX's NonMaxSuppression.

OpenVINO's CPU plugin keeps candidates scoring ``>= score_threshold`` (ONNX: ``>``: the
float below the threshold is passed), feeds at most ``nms_top_k`` of them per class to the
greedy selection (the others' scores are masked here), suppresses at ``iou >= threshold``
(see :mod:`nms`), and counts pixels inclusively when ``normalized`` is false (the far
corners move out by one). The selected boxes are then ordered by image and score, cut to
``keep_top_k`` per image and reordered as ``sort_result_type`` asks, using stable sorts
(TopK keeps equal keys in order). With a third input (``roisnum``, version 9) every class
has its own boxes and each image its own range of them: each (image, class) pair becomes one
batch of ONNX's NonMaxSuppression. Adaptive NMS (``nms_eta`` < 1) is :mod:`adaptive_nms`.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.adaptive_nms import adaptive_selection
from b2s_onnx.ir.converters.nms import onnxruntime_thresholds
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, ElementType, Float, Int
from b2s_onnx.ir.reader import Layer

_ATTRS = {
    "sort_result_type": Choice(allowed=("classid", "score", "none"), default="none"),
    "sort_result_across_batch": Bool(default=False),
    "output_type": ElementType(allowed=("i32", "i64"), default="i64"),
    "iou_threshold": Float(default=0.0),
    "score_threshold": Float(default=0.0),
    "nms_top_k": Int(default=-1, minimum=-1),
    "keep_top_k": Int(default=-1, minimum=-1),
    "background_class": Int(default=-1),
    "nms_eta": Float(default=1.0, minimum=0.0, maximum=1.0),
    "normalized": Bool(default=True),
}


def _float(ctx: ConversionContext, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


def _column(ctx: ConversionContext, table: str, index: int) -> str:
    return ctx.one("Gather", [table, _i64(ctx, "col", index)], axis=1)


def _merge_leading(ctx: ConversionContext, tensor: str, lead: list[int]) -> str:
    """``tensor`` with its first two axes merged into one, after ``lead`` ([-1] or [-1, 1])."""
    rest = ctx.one("Slice", [ctx.one("Shape", [tensor]), _i64(ctx, "b", [2]), _i64(ctx, "e", [8])])
    return ctx.one("Reshape", [tensor, ctx.one("Concat", [_i64(ctx, "lead", lead), rest], axis=0)])


def _stable_order(ctx: ConversionContext, key: str) -> str:
    """Indices sorting ``key`` (1-D) in descending order, equal keys keeping their order."""
    count = ctx.one("Shape", [key])
    _, order = ctx.node("TopK", [key, count], [ctx.tmp("sorted"), ctx.tmp("order")])
    return order


def _candidates(ctx: ConversionContext, layer: Layer, scores: str) -> str:
    """Scores [B, C, M] with the background class and everything past each class's
    ``nms_top_k`` best masked to -inf."""
    attrs = layer.attrs
    minus_inf = _f32(ctx, "minus_inf", -np.inf)
    background = attrs["background_class"]
    if background >= 0:
        classes = ctx.one("Gather", [ctx.one("Shape", [scores]), _i64(ctx, "c", 1)])
        ids = ctx.one("Range", [_i64(ctx, "z", 0), classes, _i64(ctx, "o", 1)])
        is_background = ctx.one(
            "Unsqueeze",
            [ctx.one("Equal", [ids, _i64(ctx, "bg", background)]), _i64(ctx, "ax", [0, 2])],
        )
        scores = ctx.one("Where", [is_background, minus_inf, scores])
    top_k = attrs["nms_top_k"]
    if top_k >= 0:
        boxes = ctx.one(
            "Slice", [ctx.one("Shape", [scores]), _i64(ctx, "b", [2]), _i64(ctx, "e", [3])]
        )
        keep = ctx.one("Min", [boxes, _i64(ctx, "k", [top_k])])
        _, best = ctx.node("TopK", [scores, keep], [ctx.tmp("best"), ctx.tmp("best_i")], axis=2)
        zeros = ctx.one("ConstantOfShape", [ctx.one("Shape", [scores])])
        ones = ctx.one(
            "ConstantOfShape",
            [ctx.one("Shape", [best])],
            value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]),
        )
        chosen = ctx.one("ScatterElements", [zeros, best, ones], axis=2)
        scores = ctx.one(
            "Where", [ctx.one("Greater", [chosen, _f32(ctx, "z", 0.0)]), scores, minus_inf]
        )
    return scores


def _select(ctx: ConversionContext, layer: Layer, boxes: str, scores: str) -> str:
    """ONNX NonMaxSuppression with OpenVINO's thresholds (a Loop for adaptive NMS):
    selected [K, 3] int64."""
    attrs = layer.attrs
    if attrs["nms_eta"] < 1.0:
        return adaptive_selection(
            ctx,
            boxes,
            scores,
            iou_threshold=attrs["iou_threshold"],
            eta=attrs["nms_eta"],
            score_threshold=attrs["score_threshold"],
            top_k=attrs["nms_top_k"],
            normalized=attrs["normalized"],
        )
    if not attrs["normalized"]:
        boxes = ctx.one("Add", [boxes, _f32(ctx, "inclusive", [0.0, 0.0, 1.0, 1.0])])
    count = ctx.one("Slice", [ctx.one("Shape", [scores]), _i64(ctx, "b", [2]), _i64(ctx, "e", [3])])
    if attrs["nms_top_k"] == 0:
        count = _i64(ctx, "none", [0])
    max_boxes, iou = onnxruntime_thresholds(ctx, count, _f32(ctx, "iou", [attrs["iou_threshold"]]))
    below = np.nextafter(np.float32(attrs["score_threshold"]), np.float32(-np.inf))
    return ctx.one(
        "NonMaxSuppression",
        [boxes, scores, max_boxes, iou, _f32(ctx, "score", [below])],
    )


def multiclass_nms(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    boxes, scores = _float(ctx, inputs[0]), _float(ctx, inputs[1])
    shared = len(inputs) == 2
    shape = ctx.one("Shape", [scores])
    if shared:  # boxes [N, M, 4], scores [N, C, M]
        images = ctx.one("Slice", [shape, _i64(ctx, "b", [0]), _i64(ctx, "e", [1])])
        classes = ctx.one("Gather", [shape, _i64(ctx, "c", 1)])
        per_image = ctx.one("Gather", [shape, _i64(ctx, "m", 2)])
        selected = _select(ctx, layer, boxes, _candidates(ctx, layer, scores))
        batch, cls, box = (_column(ctx, selected, i) for i in range(3))
        score = ctx.one("GatherND", [scores, selected])
        pick = ctx.one(
            "Concat",
            [ctx.one("Unsqueeze", [t, _i64(ctx, "ax", [1])]) for t in (batch, box)],
            axis=1,
        )
        coords = ctx.one("GatherND", [boxes, pick])
        flat_index = ctx.one("Add", [ctx.one("Mul", [batch, per_image]), box])
    else:  # boxes [C, M, 4], scores [C, M], roisnum [N]
        counts = ctx.int64(inputs[2])
        images = ctx.one("Shape", [counts])
        classes = ctx.one("Gather", [shape, _i64(ctx, "c", 0)])
        first = ctx.one("Sub", [ctx.one("CumSum", [counts, _i64(ctx, "a0", 0)]), counts])
        longest = ctx.reduce(
            "ReduceMax", ctx.one("Concat", [counts, _i64(ctx, "z", [0])], axis=0), [0], True
        )
        slots = ctx.one(
            "Range", [_i64(ctx, "z", 0), ctx.one("Squeeze", [longest]), _i64(ctx, "o", 1)]
        )
        unsq = _i64(ctx, "ax", [1])
        valid = ctx.one("Less", [slots, ctx.one("Unsqueeze", [counts, unsq])])  # [N, S]
        where = ctx.one("Add", [ctx.one("Unsqueeze", [first, unsq]), slots])
        where = ctx.one("Where", [valid, where, _i64(ctx, "z", 0)])
        own_scores = ctx.one(
            "Transpose", [ctx.one("Gather", [scores, where], axis=1)], perm=[1, 0, 2]
        )
        own_scores = ctx.one(
            "Where",
            [ctx.one("Unsqueeze", [valid, unsq]), own_scores, _f32(ctx, "minus_inf", -np.inf)],
        )  # [N, C, S]
        own_boxes = ctx.one(
            "Transpose", [ctx.one("Gather", [boxes, where], axis=1)], perm=[1, 0, 2, 3]
        )
        masked = _candidates(ctx, layer, own_scores)
        pair_boxes = _merge_leading(ctx, own_boxes, [-1])  # [N*C, S, 4]
        pair_scores = _merge_leading(ctx, masked, [-1, 1])  # [N*C, 1, S]
        selected = _select(ctx, layer, pair_boxes, pair_scores)
        pair, box = _column(ctx, selected, 0), _column(ctx, selected, 2)
        batch = ctx.one("Div", [pair, classes])
        cls = ctx.one("Mod", [pair, classes])
        pick = ctx.one(
            "Concat", [ctx.one("Unsqueeze", [t, _i64(ctx, "ax", [1])]) for t in (pair, box)], axis=1
        )
        flat_scores = _merge_leading(ctx, own_scores, [-1])  # [N*C, S]
        score = ctx.one("GatherND", [flat_scores, pick])
        coords = ctx.one("GatherND", [pair_boxes, pick])
        flat_index = ctx.one(
            "Add",
            [
                ctx.one("Mul", [ctx.one("Add", [ctx.one("Gather", [first, batch]), box]), classes]),
                cls,
            ],
        )
    order_and_emit(ctx, layer, images, [batch, cls, score, coords, flat_index])


def order_and_emit(
    ctx: ConversionContext,
    layer: Layer,
    images: str,
    rows: list[str],
    class_within_image: bool = True,
) -> None:
    """Orders the selected boxes (``rows``: image, class, score, corners, flat box index)
    by image then score, cuts each image to ``keep_top_k``, applies ``sort_result_type``
    (by class within each image only if ``class_within_image``: MatrixNms does not) and
    writes the three outputs."""
    attrs = layer.attrs
    rows = list(rows)

    def reorder(order: str) -> None:
        rows[:] = [ctx.one("Gather", [t, order], axis=0) for t in rows]

    def by_ascending(index: int) -> None:
        reorder(_stable_order(ctx, ctx.one("Neg", [rows[index]])))

    reorder(_stable_order(ctx, rows[2]))  # score, descending
    by_ascending(0)  # image: (image, score desc, class, box) order
    image_ids = ctx.one(
        "Range", [_i64(ctx, "z", 0), ctx.one("Squeeze", [images]), _i64(ctx, "o", 1)]
    )

    def per_image(batch_ids: str) -> tuple[str, str]:
        member = ctx.one(
            "Cast",
            [
                ctx.one(
                    "Equal",
                    [
                        ctx.one("Unsqueeze", [batch_ids, _i64(ctx, "ax", [1])]),
                        ctx.one("Unsqueeze", [image_ids, _i64(ctx, "ax", [0])]),
                    ],
                )
            ],
            to=TensorProto.INT64,
        )  # [K, N]
        return member, ctx.reduce("ReduceSum", member, [0], False)

    if attrs["keep_top_k"] >= 0:
        _, counts = per_image(rows[0])
        before = ctx.one("Sub", [ctx.one("CumSum", [counts, _i64(ctx, "a0", 0)]), counts])
        position = ctx.one(
            "Range",
            [
                _i64(ctx, "z", 0),
                ctx.one("Squeeze", [ctx.one("Shape", [rows[0]])]),
                _i64(ctx, "o", 1),
            ],
        )
        rank = ctx.one("Sub", [position, ctx.one("Gather", [before, rows[0]])])
        kept = ctx.one("Less", [rank, _i64(ctx, "keep", attrs["keep_top_k"])])
        rows[:] = [ctx.one("Compress", [t, kept], axis=0) for t in rows]
    sort, across = attrs["sort_result_type"], attrs["sort_result_across_batch"]
    if across and sort == "score":
        reorder(_stable_order(ctx, rows[2]))
    elif sort == "classid" and (across or class_within_image):
        by_ascending(1)
        if not across:
            by_ascending(0)
    batch, cls, score, coords, flat_index = rows
    value_columns = [
        ctx.one("Unsqueeze", [ctx.one("Cast", [cls], to=TensorProto.FLOAT), _i64(ctx, "ax", [1])]),
        ctx.one("Unsqueeze", [score, _i64(ctx, "ax", [1])]),
        coords,
    ]
    _write(ctx, layer, 0, ctx.one("Concat", value_columns, axis=1), (None, 6))
    _write(ctx, layer, 1, ctx.one("Unsqueeze", [flat_index, _i64(ctx, "ax", [1])]), (None, 1))
    _, counts = per_image(batch)
    _write(ctx, layer, 2, counts, None)


def _write(ctx: ConversionContext, layer: Layer, index: int, value: str, shape) -> None:
    if index >= len(layer.outputs):
        return
    out = ctx.out(layer, index)
    wanted = ctx.type_of(out)
    ctx.one("Cast", [value], out, to=wanted)
    if shape is not None:
        ctx.shapes[out] = shape


converts("MulticlassNms", (8,), inputs=(2, 2), attrs=_ATTRS)(multiclass_nms)
converts("MulticlassNms", (9,), inputs=(2, 3), attrs=_ATTRS)(multiclass_nms)
