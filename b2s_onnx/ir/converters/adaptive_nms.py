"""Adaptive NMS (MulticlassNms with ``nms_eta`` < 1) as an ONNX Loop.

The IoU threshold shrinks by ``eta`` after each selected box while it is above 0.5, so a
candidate's fate depends on how many boxes were chosen before it: no ONNX operator does
that. Candidates are sorted once per (batch, class) row; the Loop visits them in order,
all rows at once, keeping the selection mask and each row's current threshold as state.
OpenVINO's rules are kept: a candidate scores ``>= score_threshold``, is dropped at
``iou >= threshold`` with any selected box, and its IoU counts pixels inclusively when the
boxes are not normalized.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64


def _pairwise_iou(ctx: ConversionContext, boxes: str, extra: float) -> str:
    """[..., K, K] IoU of boxes [..., K, 4] as OpenVINO's MulticlassNms computes it: no
    reordering of corners, 0 when either box has no area."""
    lo0, lo1, hi0, hi1 = (
        ctx.one("Gather", [boxes, _i64(ctx, f"k{k}", k)], axis=-1) for k in range(4)
    )
    plus, zero = _f32(ctx, "extra", extra), _f32(ctx, "zero", 0.0)

    def pair(value: str) -> tuple[str, str]:
        return (
            ctx.one("Unsqueeze", [value, _i64(ctx, "ax", [-1])]),
            ctx.one("Unsqueeze", [value, _i64(ctx, "ax", [-2])]),
        )

    def side(low: str, high: str) -> str:
        return ctx.one("Add", [ctx.one("Sub", [high, low]), plus])

    area = ctx.one("Mul", [side(lo0, hi0), side(lo1, hi1)])
    area_i, area_j = pair(area)
    (a0, b0), (a1, b1), (c0, d0), (c1, d1) = (pair(v) for v in (lo0, lo1, hi0, hi1))
    inter = ctx.one(
        "Mul",
        [
            ctx.one("Max", [side(ctx.one("Max", [a0, b0]), ctx.one("Min", [c0, d0])), zero]),
            ctx.one("Max", [side(ctx.one("Max", [a1, b1]), ctx.one("Min", [c1, d1])), zero]),
        ],
    )
    empty = ctx.one(
        "Or", [ctx.one("LessOrEqual", [area_i, zero]), ctx.one("LessOrEqual", [area_j, zero])]
    )
    union = ctx.one("Sub", [ctx.one("Add", [area_i, area_j]), inter])
    return ctx.one("Where", [empty, zero, ctx.one("Div", [inter, union])])


def sorted_boxes_of(ctx: ConversionContext, boxes: str, order: str) -> str:
    """Boxes [B, M, 4] in the per-class order [B, C, K]: [B, C, K, 4]. Gathered from boxes
    broadcast over the classes, so that no Reshape meets a zero-sized dimension (which a
    Reshape target would read as "copy")."""
    per_class = ctx.one(
        "Expand",
        [
            ctx.one("Unsqueeze", [boxes, _i64(ctx, "ax", [1])]),
            ctx.one(
                "Concat",
                [
                    ctx.one(
                        "Slice",
                        [ctx.one("Shape", [order]), _i64(ctx, "b", [0]), _i64(ctx, "e", [2])],
                    ),
                    _i64(ctx, "one", [1, 1]),
                ],
                axis=0,
            ),
        ],
    )  # [B, C, M, 4]
    index = ctx.one(
        "Expand",
        [
            ctx.one("Unsqueeze", [order, _i64(ctx, "ax", [3])]),
            ctx.one("Concat", [ctx.one("Shape", [order]), _i64(ctx, "four", [4])], axis=0),
        ],
    )
    return ctx.one("GatherElements", [per_class, index], axis=2)


def _scan_body(local, iou: str, valid: str, marginal: str, eta: float, opset: int) -> object:
    """One candidate rank ``t`` for every row: kept unless it overlaps a selected box at the
    row's current threshold; a kept box shrinks that threshold (while above 0.5). A
    candidate scoring exactly the score threshold is compared with the last selected box
    only: OpenVINO stops comparing once a score is not above the threshold."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    outer = {"iou": iou, "valid": valid, "marginal": marginal}

    def n(op: str, inputs: list[str], outputs: list[str], **attrs):
        names = [outer.get(x, local(x)) for x in inputs]
        return helper.make_node(op, names, [local(x) for x in outputs], **attrs)

    def constant(name: str, dtype: int, dims: list[int], values: list) -> object:
        return n("Constant", [], [name], value=helper.make_tensor(local(name), dtype, dims, values))

    nodes = [
        n("Gather", ["iou", "t"], ["against"], axis=2),  # [B, C, K]: IoU of rank t with all
        n("Unsqueeze", ["threshold", "last"], ["threshold_k"]),
        n("GreaterOrEqual", ["against", "threshold_k"], ["overlaps"]),
        n("And", ["overlaps", "selected"], ["hits"]),
        n("Cast", ["hits"], ["hits_f"], to=f),
        (
            n("ReduceMax", ["hits_f", "last"], ["hit_any"], keepdims=0)
            if opset >= 18
            else n("ReduceMax", ["hits_f"], ["hit_any"], axes=[-1], keepdims=0)
        ),
        constant("none", i64, [], [0]),
        n("Max", ["latest", "none"], ["latest_safe"]),
        n("Unsqueeze", ["latest_safe", "last"], ["latest_k"]),
        n("GatherElements", ["overlaps", "latest_k"], ["latest_overlap"], axis=2),
        n("Squeeze", ["latest_overlap", "last"], ["latest_hit_raw"]),
        n("GreaterOrEqual", ["latest", "none"], ["has_latest"]),
        n("And", ["latest_hit_raw", "has_latest"], ["latest_hit"]),
        n("Cast", ["latest_hit"], ["latest_hit_f"], to=f),
        n("Gather", ["marginal", "t"], ["at_threshold"], axis=2),
        n("Where", ["at_threshold", "latest_hit_f", "hit_any"], ["hit"]),
        n("Gather", ["valid", "t"], ["candidate"], axis=2),  # [B, C]
        constant("zero", f, [], [0.0]),
        n("Equal", ["hit", "zero"], ["clear"]),
        n("And", ["candidate", "clear"], ["take"]),
        n("Shape", ["selected"], ["shape"]),
        n("Gather", ["shape", "two"], ["ranks"]),
        constant("start", i64, [], [0]),
        constant("step", i64, [], [1]),
        n("Range", ["start", "ranks", "step"], ["positions"]),
        n("Equal", ["positions", "t"], ["here"]),
        n("Unsqueeze", ["take", "last"], ["take_k"]),
        n("And", ["here", "take_k"], ["new"]),
        n("Or", ["selected", "new"], ["selected_out"]),
        constant("half", f, [], [0.5]),
        n("Greater", ["threshold", "half"], ["large"]),
        n("And", ["take", "large"], ["shrink"]),
        constant("eta", f, [], [eta]),
        n("Mul", ["threshold", "eta"], ["shrunk"]),
        n("Where", ["shrink", "shrunk", "threshold"], ["threshold_out"]),
        n("Shape", ["threshold"], ["row_shape"]),
        n("Expand", ["t", "row_shape"], ["t_rows"]),
        n("Where", ["take", "t_rows", "latest"], ["latest_out"]),
        n("Identity", ["cond"], ["cond_out"]),
    ]
    nodes.insert(0, constant("two", i64, [], [2]))
    nodes.insert(0, constant("last", i64, [1], [-1]))

    def info(name: str, dtype: int, dims) -> object:
        return helper.make_tensor_value_info(local(name), dtype, dims)

    return helper.make_graph(
        nodes,
        "adaptive_nms_step",
        [
            info("t", i64, []),
            info("cond", b, []),
            info("selected", b, None),
            info("threshold", f, None),
            info("latest", i64, None),
        ],
        [
            info("cond_out", b, []),
            info("selected_out", b, None),
            info("threshold_out", f, None),
            info("latest_out", i64, None),
        ],
    )


def adaptive_selection(
    ctx: ConversionContext,
    boxes: str,
    scores: str,
    *,
    iou_threshold: float,
    eta: float,
    score_threshold: float,
    top_k: int,
    normalized: bool,
) -> str:
    """Selected (batch, class, box) triples [S, 3] int64 for boxes [B, M, 4] and scores
    [B, C, M] (masked candidates at -inf), in batch, class, selection order, like ONNX's
    NonMaxSuppression."""
    shape = ctx.one("Shape", [scores])
    count = ctx.one("Slice", [shape, _i64(ctx, "b", [2]), _i64(ctx, "e", [3])])
    keep = count if top_k < 0 else ctx.one("Min", [count, _i64(ctx, "k", [top_k])])
    ranked, order = ctx.node("TopK", [scores, keep], [ctx.tmp("ranked"), ctx.tmp("order")], axis=2)
    valid = ctx.one(
        "And",
        [
            ctx.one("GreaterOrEqual", [ranked, _f32(ctx, "score", score_threshold)]),
            ctx.one("Greater", [ranked, _f32(ctx, "minus_inf", -np.inf)]),
        ],
    )
    sorted_boxes = sorted_boxes_of(ctx, boxes, order)  # [B, C, K, 4]
    iou = _pairwise_iou(ctx, sorted_boxes, 0.0 if normalized else 1.0)  # [B, C, K, K]
    nothing = ctx.one("Equal", [ranked, _f32(ctx, "nan", np.nan)])  # all false, [B, C, K]
    rows = ctx.one("Slice", [shape, _i64(ctx, "b", [0]), _i64(ctx, "e", [2])])
    threshold = ctx.one("Expand", [_f32(ctx, "iou", iou_threshold), rows])
    marginal = ctx.one("LessOrEqual", [ranked, _f32(ctx, "score", score_threshold)])
    latest = ctx.one("Expand", [_i64(ctx, "none", -1), rows])
    prefix = ctx.tmp("adaptive")
    body = _scan_body(lambda name: f"{prefix}/{name}", iou, valid, marginal, eta, ctx.opset)
    selected, _, _ = ctx.node(
        "Loop",
        [
            ctx.one("Squeeze", [keep]),
            ctx.const("true", np.asarray(True)),
            nothing,
            threshold,
            latest,
        ],
        [ctx.tmp("selected"), ctx.tmp("threshold"), ctx.tmp("latest")],
        body=body,
    )
    found = ctx.one("Transpose", [ctx.one("NonZero", [selected])], perm=[1, 0])  # [S, 3]
    box = ctx.one("GatherND", [order, found])
    lead = ctx.one("Slice", [found, _i64(ctx, "b", [0]), _i64(ctx, "e", [2]), _i64(ctx, "a", [1])])
    return ctx.one("Concat", [lead, ctx.one("Unsqueeze", [box, _i64(ctx, "ax", [1])])], axis=1)
