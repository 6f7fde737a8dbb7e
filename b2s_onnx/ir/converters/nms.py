"""NonMaxSuppression-1/3/4/5/9: ONNX's NonMaxSuppression, bent to OpenVINO's rules.

OpenVINO's CPU plugin returns only the selected rows for every version (no -1 padding, a
data-dependent first dimension), in batch, class, selection order, or sorted by score
across all batches when ``sort_result_descending`` is set. It differs from onnxruntime in
three ways, each absorbed here: it suppresses at ``iou >= threshold`` (onnxruntime at
``>``), an absent score threshold means 0 (onnxruntime: none), and any IoU threshold is
allowed (onnxruntime refuses those outside [0, 1]). Soft-NMS (a positive
``soft_nms_sigma``) has no ONNX operator: it is composed as a Loop that selects one box per
batch and class per iteration and decays the others' scores by ``exp(-iou^2 / 2 sigma)``;
like the CPU plugin, soft-NMS ignores the IoU threshold (only the score threshold ends it).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, ElementType
from b2s_onnx.ir.reader import Layer

#: One float32 ulp below 1: ``t * BELOW`` is the largest float32 under a positive normal ``t``.
BELOW = np.float32(1 - 2**-24)

_ENCODING = {"box_encoding": Choice(allowed=("corner", "center"), default="corner")}
_SORT = {"sort_result_descending": Bool(default=True)}
_OUTPUT_TYPE = {"output_type": ElementType(allowed=("i32", "i64"), default="i64")}


def _f32(ctx: ConversionContext, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


def one_value(ctx: ConversionContext, inputs: list[str], index: int, default, to: int) -> str:
    """Optional scalar input ``index`` as a one-element tensor of type ``to``."""
    if index >= len(inputs):
        dtype = np.int64 if to == TensorProto.INT64 else np.float32
        return ctx.const("default", np.asarray([default], dtype))
    value = inputs[index]
    if ctx.type_of(value) != to:
        value = ctx.one("Cast", [value], to=to)
    return ctx.one("Reshape", [value, ctx.const("one", np.asarray([1], np.int64))])


def onnxruntime_thresholds(ctx: ConversionContext, max_boxes: str, iou: str) -> tuple[str, str]:
    """(max boxes, IoU threshold) for onnxruntime that select what OpenVINO selects: the
    float just below a positive threshold turns ``>`` into ``>=``; a threshold <= 0
    suppresses every box that overlaps a selected one at all, including disjoint ones, so
    each class keeps its best box only."""
    zero = ctx.const("zero", np.asarray([0.0], np.float32))
    positive = ctx.one("Greater", [iou, zero])
    below = ctx.one(
        "Min",
        [
            ctx.one("Mul", [iou, ctx.const("below", np.asarray([BELOW]))]),
            ctx.const("unit", np.asarray([1.0], np.float32)),
        ],
    )
    threshold = ctx.one("Where", [positive, below, zero])
    one_box = ctx.one("Min", [max_boxes, ctx.const("one_box", np.asarray([1], np.int64))])
    return ctx.one("Where", [positive, max_boxes, one_box]), threshold


def _corners(ctx: ConversionContext, boxes: str, center: bool) -> list[str]:
    """[ymin, xmin, ymax, xmax] of every box, each [B, N], as OpenVINO normalises them."""
    parts = ctx.node(
        "Split",
        [boxes, ctx.const("split", np.asarray([1, 1, 1, 1]))],
        [ctx.tmp(f"coord{i}") for i in range(4)],
        axis=2,
    )
    squeeze = ctx.const("last", np.asarray([2], np.int64))
    a, b, c, d = (ctx.one("Squeeze", [p, squeeze]) for p in parts)
    if center:  # [x_center, y_center, width, height]
        half = ctx.const("half", np.asarray(0.5, np.float32))
        half_w, half_h = ctx.one("Mul", [c, half]), ctx.one("Mul", [d, half])
        return [
            ctx.one("Sub", [b, half_h]),
            ctx.one("Sub", [a, half_w]),
            ctx.one("Add", [b, half_h]),
            ctx.one("Add", [a, half_w]),
        ]
    return [
        ctx.one("Min", [a, c]),
        ctx.one("Min", [b, d]),
        ctx.one("Max", [a, c]),
        ctx.one("Max", [b, d]),
    ]


def _pairwise_iou(ctx: ConversionContext, boxes: str, center: bool) -> str:
    """[B, N, N] IoU of every pair of boxes of a batch; 0 where either box is empty."""
    ymin, xmin, ymax, xmax = _corners(ctx, boxes, center)
    rows = ctx.const("rows", np.asarray([2], np.int64))
    cols = ctx.const("cols", np.asarray([1], np.int64))
    zero = ctx.const("zero", np.asarray(0.0, np.float32))

    def pair(value: str) -> tuple[str, str]:
        return ctx.one("Unsqueeze", [value, rows]), ctx.one("Unsqueeze", [value, cols])

    (ymin_i, ymin_j), (xmin_i, xmin_j) = pair(ymin), pair(xmin)
    (ymax_i, ymax_j), (xmax_i, xmax_j) = pair(ymax), pair(xmax)
    area = ctx.one("Mul", [ctx.one("Sub", [ymax, ymin]), ctx.one("Sub", [xmax, xmin])])
    area_i, area_j = pair(area)
    height = ctx.one("Sub", [ctx.one("Min", [ymax_i, ymax_j]), ctx.one("Max", [ymin_i, ymin_j])])
    width = ctx.one("Sub", [ctx.one("Min", [xmax_i, xmax_j]), ctx.one("Max", [xmin_i, xmin_j])])
    inter = ctx.one("Mul", [ctx.one("Max", [height, zero]), ctx.one("Max", [width, zero])])
    union = ctx.one("Sub", [ctx.one("Add", [area_i, area_j]), inter])
    empty = ctx.one(
        "Or", [ctx.one("LessOrEqual", [area_i, zero]), ctx.one("LessOrEqual", [area_j, zero])]
    )
    return ctx.one("Where", [empty, zero, ctx.one("Div", [inter, union])])


def _soft_nms_body(
    local,
    soft: str,
    scale: str,
    iou_threshold: str,
    score_threshold: str,
    outer: dict[str, str],
    rules: tuple[str, str],
) -> object:
    """One greedy step for every (batch, class) row at once: select the best remaining box,
    then decay (soft) or drop (hard) the others by their IoU with it. ``local`` prefixes the
    body's own names so that none shadows a name of the enclosing graph; ``outer`` maps the
    body's names for enclosing tensors (pairwise IoU, each row's batch) to theirs. ``rules``
    names the comparisons that keep a score and that drop an overlapping box."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    score_rule, iou_rule = rules

    def n(op: str, inputs: list[str], outputs: list[str], **attrs):
        return helper.make_node(
            op, [outer.get(x, x) for x in inputs], [local(x) for x in outputs], **attrs
        )

    def constant(name: str, dtype: int, dims: list[int], values: list) -> object:
        return n("Constant", [], [name], value=helper.make_tensor(local(name), dtype, dims, values))

    nodes = [
        n("ArgMax", [local("scores")], ["best"], axis=1, keepdims=1),
        n("GatherElements", [local("scores"), local("best")], ["value"], axis=1),
        n(score_rule, [local("value"), score_threshold], ["above"]),
        n("And", [local("alive"), local("above")], ["valid"]),
        n("Concat", ["row_batch", local("best")], ["pick"], axis=1),
        n("GatherND", ["pairwise", local("pick")], ["iou"]),
        n("Mul", [local("iou"), local("iou")], ["iou2"]),
        n("Mul", [local("iou2"), scale], ["exponent"]),
        n("Exp", [local("exponent")], ["weight"]),
        n("Mul", [local("scores"), local("weight")], ["decayed"]),
        n(iou_rule, [local("iou"), iou_threshold], ["overlap"]),
        constant("gone", f, [], [-np.inf]),
        n("Where", [local("overlap"), local("gone"), local("scores")], ["dropped"]),
        n("Where", [soft, local("decayed"), local("dropped")], ["updated"]),
        n("Shape", [local("best")], ["best_shape"]),
        n("Expand", [local("gone"), local("best_shape")], ["gone_rows"]),
        n(
            "ScatterElements",
            [local("updated"), local("best"), local("gone_rows")],
            ["without_best"],
            axis=1,
        ),
        n("Where", [local("valid"), local("without_best"), local("scores")], ["scores_out"]),
        n("Identity", [local("cond")], ["cond_out"]),
        constant("axis1", i64, [1], [1]),
        n("Squeeze", [local("best"), local("axis1")], ["best_row"]),
        n("Squeeze", [local("value"), local("axis1")], ["value_row"]),
        n("Squeeze", [local("valid"), local("axis1")], ["valid_row"]),
    ]

    def info(name: str, dtype: int, dims: list) -> object:
        return helper.make_tensor_value_info(local(name), dtype, dims)

    return helper.make_graph(
        nodes,
        "soft_nms_step",
        [
            info("iteration", i64, []),
            info("cond", b, []),
            info("scores", f, ["rows", "boxes"]),
            info("alive", b, ["rows", 1]),
        ],
        [
            info("cond_out", b, []),
            info("scores_out", f, ["rows", "boxes"]),
            info("valid", b, ["rows", 1]),
            info("best_row", i64, ["rows"]),
            info("value_row", f, ["rows"]),
            info("valid_row", b, ["rows"]),
        ],
    )


#: NonMaxSuppression-5/9: keep scores above the threshold, drop at IoU >= threshold.
NMS_RULES = ("Greater", "GreaterOrEqual")


def greedy_selection(
    ctx: ConversionContext,
    pairwise: str,
    scores: str,
    max_boxes: str,
    iou: str,
    score_threshold: str,
    sigma: str,
    rules: tuple[str, str] = NMS_RULES,
) -> tuple[str, str]:
    """Greedy (soft-)NMS of every batch and class as a Loop, given the pairwise IoU
    [B, N, N] of each batch's boxes; returns the selected [M, 3] indices (int64) and their
    final scores [M], in batch, class, selection order."""
    i64 = np.int64
    shape = ctx.one("Shape", [scores])
    classes = ctx.one("Gather", [shape, ctx.const("c", np.asarray([1], i64))])
    count = ctx.one("Gather", [shape, ctx.const("n", np.asarray([2], i64))])
    flat = ctx.one("Flatten", [scores], axis=2)  # [B*C, N]
    rows = ctx.one("Gather", [ctx.one("Shape", [flat]), ctx.const("r", np.asarray([0], i64))])
    # One more candidate that is never valid keeps every step's ArgMax defined, even with
    # no boxes at all; it overlaps nothing.
    never = ctx.one(
        "Expand",
        [
            ctx.const("never", np.full((1, 1), -np.inf, np.float32)),
            ctx.one("Concat", [rows, ctx.const("one", np.asarray([1], i64))], axis=0),
        ],
    )
    flat = ctx.one("Concat", [flat, never], axis=1)
    pairwise = ctx.one("Pad", [pairwise, ctx.const("pads", np.asarray([0, 0, 0, 0, 1, 1], i64))])
    row_index = ctx.one(
        "Range",
        [
            ctx.const("start", np.asarray(0, i64)),
            ctx.one("Squeeze", [rows, ctx.const("ax0", np.asarray([0], i64))]),
            ctx.const("step", np.asarray(1, i64)),
        ],
    )
    row_batch = ctx.one(
        "Unsqueeze", [ctx.one("Div", [row_index, classes]), ctx.const("ax1", np.asarray([1], i64))]
    )
    steps = ctx.one("Min", [max_boxes, count])
    trips = ctx.one(
        "Squeeze",
        [
            ctx.one("Max", [steps, ctx.const("one", np.asarray([1], i64))]),
            ctx.const("ax0", np.asarray([0], i64)),
        ],
    )
    alive = ctx.one(
        "Expand",
        [
            ctx.const("alive", np.asarray([[True]])),
            ctx.one("Concat", [rows, ctx.const("one", np.asarray([1], i64))], axis=0),
        ],
    )
    soft = ctx.one("Greater", [sigma, ctx.const("zero", np.asarray([0.0], np.float32))])
    scale = ctx.one("Div", [ctx.const("minus_half", np.asarray([-0.5], np.float32)), sigma])
    prefix = ctx.tmp("step")
    body = _soft_nms_body(
        lambda name: f"{prefix}/{name}",
        soft,
        scale,
        iou,
        score_threshold,
        {"pairwise": pairwise, "row_batch": row_batch},
        rules,
    )
    loop_out = [ctx.tmp(h) for h in ("scores_left", "alive_left", "best", "value", "valid")]
    ctx.node(
        "Loop",
        [trips, ctx.const("true", np.asarray(True)), flat, alive],
        loop_out,
        body=body,
    )
    _, _, best, value, valid = loop_out
    # Iterations past min(max_boxes, N) ran only to keep the Loop non-empty.
    in_range = ctx.one(
        "Less",
        [
            ctx.one(
                "Unsqueeze",
                [
                    ctx.one(
                        "Range",
                        [
                            ctx.const("start", np.asarray(0, i64)),
                            trips,
                            ctx.const("step", np.asarray(1, i64)),
                        ],
                    ),
                    ctx.const("ax1", np.asarray([1], i64)),
                ],
            ),
            steps,
        ],
    )
    valid = ctx.one("And", [valid, in_range])
    order = [1, 0]
    found = ctx.one(
        "Transpose", [ctx.one("NonZero", [ctx.one("Transpose", [valid], perm=order)])], perm=order
    )
    box = ctx.one("GatherND", [ctx.one("Transpose", [best], perm=order), found])
    score = ctx.one("GatherND", [ctx.one("Transpose", [value], perm=order), found])
    row = ctx.one("Gather", [found, ctx.const("col0", np.asarray(0, i64))], axis=1)
    columns = [ctx.one("Div", [row, classes]), ctx.one("Mod", [row, classes]), box]
    last = ctx.const("ax1", np.asarray([1], i64))
    selected = ctx.one("Concat", [ctx.one("Unsqueeze", [c, last]) for c in columns], axis=1)
    return selected, score


def _hard_nms(
    ctx: ConversionContext,
    boxes: str,
    scores: str,
    max_boxes: str,
    iou: str,
    score_threshold: str,
    center: bool,
) -> tuple[str, str]:
    max_boxes, iou = onnxruntime_thresholds(ctx, max_boxes, iou)
    selected = ctx.one(
        "NonMaxSuppression",
        [boxes, scores, max_boxes, iou, score_threshold],
        center_point_box=int(center),
    )
    return selected, ctx.one("GatherND", [scores, selected])


def emit_outputs(
    ctx: ConversionContext, layer: Layer, selected: str, score: str, sort: bool
) -> None:
    if sort:  # TopK keeps equal scores in index order: a stable sort, as OpenVINO's
        count = ctx.one("Shape", [score])
        _, order = ctx.node("TopK", [score, count], [ctx.tmp("sorted"), ctx.tmp("order")])
        selected = ctx.one("Gather", [selected, order], axis=0)
        score = ctx.one("Gather", [score, order], axis=0)
    index_type = ctx.type_of(ctx.out(layer, 0))
    if index_type == TensorProto.INT64:
        ctx.one("Identity", [selected], ctx.out(layer, 0))
    else:
        ctx.one("Cast", [selected], ctx.out(layer, 0), to=index_type)
    ctx.shapes[ctx.out(layer, 0)] = (None, 3)
    if len(layer.outputs) > 1:
        batch_class = ctx.one(
            "Slice",
            [
                selected,
                ctx.const("begin", np.asarray([0], np.int64)),
                ctx.const("end", np.asarray([2], np.int64)),
                ctx.const("axis", np.asarray([1], np.int64)),
            ],
        )
        columns = [
            ctx.one("Cast", [batch_class], to=TensorProto.FLOAT),
            ctx.one("Unsqueeze", [score, ctx.const("ax1", np.asarray([1], np.int64))]),
        ]
        score_type = ctx.type_of(ctx.out(layer, 1))
        if score_type == TensorProto.FLOAT:
            ctx.one("Concat", columns, ctx.out(layer, 1), axis=1)
        else:
            ctx.one("Cast", [ctx.one("Concat", columns, axis=1)], ctx.out(layer, 1), to=score_type)
        ctx.shapes[ctx.out(layer, 1)] = (None, 3)
    if len(layer.outputs) > 2:
        rows = ctx.one(
            "Slice",
            [
                ctx.one("Shape", [selected]),
                ctx.const("begin", np.asarray([0], np.int64)),
                ctx.const("end", np.asarray([1], np.int64)),
            ],
        )
        ctx.one("Cast", [rows], ctx.out(layer, 2), to=ctx.type_of(ctx.out(layer, 2)))


def _soft_sigma(ctx: ConversionContext, inputs: list[str]) -> str | None:
    """The soft-NMS sigma when it may be positive at run time; None for hard NMS."""
    if len(inputs) < 6:
        return None
    known = ctx.value(inputs[5])
    if known is not None and not (np.asarray(known, np.float64) > 0).any():
        return None
    return one_value(ctx, inputs, 5, 0.0, TensorProto.FLOAT)


def non_max_suppression(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    center = layer.attrs["box_encoding"] == "center"
    boxes, scores = _f32(ctx, inputs[0]), _f32(ctx, inputs[1])
    max_boxes = one_value(ctx, inputs, 2, 0, TensorProto.INT64)
    iou = one_value(ctx, inputs, 3, 0.0, TensorProto.FLOAT)
    score_threshold = one_value(ctx, inputs, 4, 0.0, TensorProto.FLOAT)
    sigma = _soft_sigma(ctx, inputs)
    if sigma is None:
        selected, score = _hard_nms(ctx, boxes, scores, max_boxes, iou, score_threshold, center)
    else:
        pairwise = _pairwise_iou(ctx, boxes, center)
        selected, score = greedy_selection(
            ctx, pairwise, scores, max_boxes, iou, score_threshold, sigma
        )
    emit_outputs(ctx, layer, selected, score, layer.attrs["sort_result_descending"])


converts("NonMaxSuppression", (1,), inputs=(2, 5), attrs={**_ENCODING, **_SORT})(
    non_max_suppression
)
converts("NonMaxSuppression", (3, 4), inputs=(2, 5), attrs={**_ENCODING, **_SORT, **_OUTPUT_TYPE})(
    non_max_suppression
)
converts("NonMaxSuppression", (5, 9), inputs=(2, 6), attrs={**_ENCODING, **_SORT, **_OUTPUT_TYPE})(
    non_max_suppression
)
