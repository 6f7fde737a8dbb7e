"""MatrixNms-8 (SOLOv2's matrix NMS): every candidate's score decays by its IoU with each
higher-scored box of its class, relative to how much that box was itself overlapped.

Nothing is sequential, so it is all tensor arithmetic: per (image, class) the candidates
(score > ``score_threshold``, the ``nms_top_k`` best) are sorted, their pairwise IoU matrix
[K, K] is masked to the pairs (lower-ranked, higher-ranked), and the decay is the minimum
over the higher-ranked boxes of ``(1 - iou) / (1 - max_iou)`` (linear) or
``exp((max_iou^2 - iou^2) * sigma)`` (gaussian), as OpenVINO's CPU plugin computes it.
Boxes whose decayed score stays above ``post_threshold`` are kept and ordered like
MulticlassNms's (:func:`multiclass_nms.order_and_emit`).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.adaptive_nms import sorted_boxes_of
from b2s_onnx.ir.converters.multiclass_nms import order_and_emit
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, ElementType, Float, Int
from b2s_onnx.ir.reader import Layer


def _pairwise_iou(ctx: ConversionContext, boxes: str, normalized: bool) -> str:
    """[..., K, K] IoU of boxes [..., K, 4] (x1, y1, x2, y2) as OpenVINO's MatrixNms: 0 for
    boxes that do not touch, inverted boxes have no area, +1 pixel when not normalized."""
    x1, y1, x2, y2 = (ctx.one("Gather", [boxes, _i64(ctx, f"k{k}", k)], axis=-1) for k in range(4))

    def pair(value: str) -> tuple[str, str]:
        return (
            ctx.one("Unsqueeze", [value, _i64(ctx, "ax", [-1])]),
            ctx.one("Unsqueeze", [value, _i64(ctx, "ax", [-2])]),
        )

    (ax1, bx1), (ay1, by1), (ax2, bx2), (ay2, by2) = (pair(v) for v in (x1, y1, x2, y2))
    apart = ctx.one(
        "Or",
        [
            ctx.one("Or", [ctx.one("Greater", [bx1, ax2]), ctx.one("Less", [bx2, ax1])]),
            ctx.one("Or", [ctx.one("Greater", [by1, ay2]), ctx.one("Less", [by2, ay1])]),
        ],
    )
    extra = _f32(ctx, "extra", 0.0 if normalized else 1.0)
    zero = _f32(ctx, "zero", 0.0)
    width = ctx.one(
        "Add", [ctx.one("Sub", [ctx.one("Min", [ax2, bx2]), ctx.one("Max", [ax1, bx1])]), extra]
    )
    height = ctx.one(
        "Add", [ctx.one("Sub", [ctx.one("Min", [ay2, by2]), ctx.one("Max", [ay1, by1])]), extra]
    )
    inter = ctx.one("Mul", [width, height])
    inverted = ctx.one("Or", [ctx.one("Less", [x2, x1]), ctx.one("Less", [y2, y1])])
    area = ctx.one(
        "Mul",
        [
            ctx.one("Add", [ctx.one("Sub", [x2, x1]), extra]),
            ctx.one("Add", [ctx.one("Sub", [y2, y1]), extra]),
        ],
    )
    area = ctx.one("Where", [inverted, zero, area])
    area_a, area_b = pair(area)
    union = ctx.one("Sub", [ctx.one("Add", [area_a, area_b]), inter])
    return ctx.one("Where", [apart, zero, ctx.one("Div", [inter, union])])


@converts(
    "MatrixNms",
    (8,),
    inputs=(2, 2),
    attrs={
        "sort_result_type": Choice(allowed=("classid", "score", "none"), default="none"),
        "sort_result_across_batch": Bool(default=False),
        "output_type": ElementType(allowed=("i32", "i64"), default="i64"),
        "score_threshold": Float(default=0.0),
        "nms_top_k": Int(default=-1, minimum=-1),
        "keep_top_k": Int(default=-1, minimum=-1),
        "background_class": Int(default=-1),
        "decay_function": Choice(allowed=("gaussian", "linear"), default="linear"),
        "gaussian_sigma": Float(default=2.0),
        "post_threshold": Float(default=0.0),
        "normalized": Bool(default=True),
    },
)
def matrix_nms(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    attrs = layer.attrs
    boxes, scores = (
        t if ctx.type_of(t) == TensorProto.FLOAT else ctx.one("Cast", [t], to=TensorProto.FLOAT)
        for t in inputs
    )
    shape = ctx.one("Shape", [scores])
    images = ctx.one("Slice", [shape, _i64(ctx, "b", [0]), _i64(ctx, "e", [1])])
    classes = ctx.one("Gather", [shape, _i64(ctx, "c", 1)])
    count = ctx.one("Slice", [shape, _i64(ctx, "b", [2]), _i64(ctx, "e", [3])])
    minus_inf = _f32(ctx, "minus_inf", -np.inf)
    background = attrs["background_class"]
    if background >= 0:
        ids = ctx.one("Range", [_i64(ctx, "z", 0), classes, _i64(ctx, "o", 1)])
        is_background = ctx.one(
            "Unsqueeze",
            [ctx.one("Equal", [ids, _i64(ctx, "bg", background)]), _i64(ctx, "ax", [0, 2])],
        )
        scores = ctx.one("Where", [is_background, minus_inf, scores])
    keep = count
    if attrs["nms_top_k"] >= 0:
        keep = ctx.one("Min", [count, _i64(ctx, "k", [attrs["nms_top_k"]])])
    ranked, order = ctx.node("TopK", [scores, keep], [ctx.tmp("ranked"), ctx.tmp("order")], axis=2)
    valid = ctx.one("Greater", [ranked, _f32(ctx, "score", attrs["score_threshold"])])  # [N, C, K]
    sorted_boxes = sorted_boxes_of(ctx, boxes, order)  # [N, C, K, 4]
    iou = _pairwise_iou(ctx, sorted_boxes, attrs["normalized"])  # [N, C, K(i), K(j)]
    ranks = ctx.one("Range", [_i64(ctx, "z", 0), ctx.one("Squeeze", [keep]), _i64(ctx, "o", 1)])
    higher = ctx.one(
        "Less",
        [
            ctx.one("Unsqueeze", [ranks, _i64(ctx, "ax", [0])]),
            ctx.one("Unsqueeze", [ranks, _i64(ctx, "ax", [1])]),
        ],
    )  # [K(i), K(j)]: j ranks above i
    zero = _f32(ctx, "zero", 0.0)
    iou = ctx.one("Where", [higher, iou, zero])
    overlapped = ctx.reduce("ReduceMax", iou, [3], False)  # [N, C, K]: each box's max IoU above it
    max_iou = ctx.one("Unsqueeze", [overlapped, _i64(ctx, "ax", [2])])  # indexed by j
    one = _f32(ctx, "one", 1.0)
    if attrs["decay_function"] == "linear":
        decay = ctx.one(
            "Div",
            [
                ctx.one("Sub", [one, iou]),
                ctx.one("Add", [ctx.one("Sub", [one, max_iou]), _f32(ctx, "eps", 1e-10)]),
            ],
        )
    else:
        decay = ctx.one(
            "Exp",
            [
                ctx.one(
                    "Mul",
                    [
                        ctx.one(
                            "Sub", [ctx.one("Mul", [max_iou, max_iou]), ctx.one("Mul", [iou, iou])]
                        ),
                        _f32(ctx, "sigma", attrs["gaussian_sigma"]),
                    ],
                )
            ],
        )
    decay = ctx.one("Where", [higher, decay, one])
    decay = ctx.one("Min", [ctx.reduce("ReduceMin", decay, [3], False), one])
    decayed = ctx.one("Mul", [decay, ranked])
    kept = ctx.one(
        "And", [valid, ctx.one("Greater", [decayed, _f32(ctx, "post", attrs["post_threshold"])])]
    )
    found = ctx.one("Transpose", [ctx.one("NonZero", [kept])], perm=[1, 0])  # [S, 3]: n, c, k
    batch = ctx.one("Gather", [found, _i64(ctx, "c0", 0)], axis=1)
    cls = ctx.one("Gather", [found, _i64(ctx, "c1", 1)], axis=1)
    score = ctx.one("GatherND", [decayed, found])
    coords = ctx.one("GatherND", [sorted_boxes, found])
    box = ctx.one("GatherND", [order, found])
    flat_index = ctx.one("Add", [ctx.one("Mul", [batch, ctx.one("Squeeze", [count])]), box])
    order_and_emit(
        ctx, layer, images, [batch, cls, score, coords, flat_index], class_within_image=False
    )
