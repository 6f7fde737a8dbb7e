"""GenerateProposals-9 and ExperimentalDetectronGenerateProposalsSingleImage-6: Detectron's
RPN proposals from given anchors, after OpenVINO's CPU plugin.

Each anchor moves by its deltas (size deltas capped at log(1000/16)), is clipped to the
image and marked too small against ``min_size``; for GenerateProposals-9 the
``pre_nms_count`` best scores (small boxes included) go through NMS, where small boxes
neither survive nor suppress (their score becomes -inf here), and each image's boxes
follow the previous image's (a data-dependent count). The single-image version scores
small boxes 0 before ranking, keeps them as candidates, and pads its ``post_nms_count``
rows with zeros.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType, Float, Int
from b2s_onnx.ir.reader import Layer

#: The cap OpenVINO puts on predicted log-width/height deltas.
MAX_LOG_DELTA = np.float32(np.log(1000.0 / 16.0))
#: The lowest float32: a score threshold below every real score and above -inf.
LOWEST = np.float32(np.finfo(np.float32).min)


def _float(ctx: ConversionContext, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


def _refine(
    ctx: ConversionContext,
    anchors: str,
    deltas: str,
    image: tuple[str, str],
    min_box: tuple[str, str],
    offset: float,
) -> tuple[str, str]:
    """Boxes [B, P, 4] (x0, y0, x1, y1) from anchors [1, P, 4] and deltas [B, P, 4], and
    whether each is at least ``min_box`` (height, width) large."""
    img_h, img_w = image

    def part(tensor: str, k: int) -> str:
        return ctx.one("Gather", [tensor, _i64(ctx, f"k{k}", k)], axis=2)

    x0, y0, x1, y1 = (part(anchors, k) for k in range(4))
    dx, dy, dw, dh = (part(deltas, k) for k in range(4))
    off, half = _f32(ctx, "offset", offset), _f32(ctx, "half", 0.5)
    ww = ctx.one("Add", [ctx.one("Sub", [x1, x0]), off])
    hh = ctx.one("Add", [ctx.one("Sub", [y1, y0]), off])
    ctr_x = ctx.one("Add", [x0, ctx.one("Mul", [half, ww])])
    ctr_y = ctx.one("Add", [y0, ctx.one("Mul", [half, hh])])
    pred_x = ctx.one("Add", [ctx.one("Mul", [dx, ww]), ctr_x])
    pred_y = ctx.one("Add", [ctx.one("Mul", [dy, hh]), ctr_y])
    cap = _f32(ctx, "cap", MAX_LOG_DELTA)
    pred_w = ctx.one("Mul", [ctx.one("Exp", [ctx.one("Min", [dw, cap])]), ww])
    pred_h = ctx.one("Mul", [ctx.one("Exp", [ctx.one("Min", [dh, cap])]), hh])
    half_w, half_h = ctx.one("Mul", [half, pred_w]), ctx.one("Mul", [half, pred_h])
    corners = [
        ctx.one("Sub", [pred_x, half_w]),
        ctx.one("Sub", [pred_y, half_h]),
        ctx.one("Sub", [ctx.one("Add", [pred_x, half_w]), off]),
        ctx.one("Sub", [ctx.one("Add", [pred_y, half_h]), off]),
    ]
    zero = _f32(ctx, "zero", 0.0)
    limits = [ctx.one("Sub", [img_w, off]), ctx.one("Sub", [img_h, off])] * 2
    corners = [
        ctx.one("Max", [ctx.one("Min", [c, limit]), zero])
        for c, limit in zip(corners, limits, strict=True)
    ]
    x0, y0, x1, y1 = corners
    box_w = ctx.one("Add", [ctx.one("Sub", [x1, x0]), off])
    box_h = ctx.one("Add", [ctx.one("Sub", [y1, y0]), off])
    min_h, min_w = min_box
    large = ctx.one(
        "And",
        [ctx.one("LessOrEqual", [min_w, box_w]), ctx.one("LessOrEqual", [min_h, box_h])],
    )
    boxes = ctx.one(
        "Concat", [ctx.one("Unsqueeze", [c, _i64(ctx, "ax", [2])]) for c in corners], axis=2
    )
    return boxes, large


def _best_then_nms(
    ctx: ConversionContext,
    boxes: str,
    scores: str,
    alive: str,
    pre: int,
    post: int,
    threshold: float,
    offset: float,
) -> tuple[str, str, str]:
    """The ``pre`` best (by ``scores``) of each image, then NMS among the ``alive`` ones:
    (selected [K, 3], boxes [B, pre, 4], scores [B, pre]) with rows of ``selected`` indexing
    the last two."""
    count = ctx.one("Gather", [ctx.one("Shape", [scores]), _i64(ctx, "p", [1])])
    keep = ctx.one("Min", [count, _i64(ctx, "pre", [pre])])
    best, order = ctx.node("TopK", [scores, keep], [ctx.tmp("best"), ctx.tmp("order")], axis=1)
    index4 = ctx.one(
        "Expand",
        [
            ctx.one("Unsqueeze", [order, _i64(ctx, "ax", [2])]),
            ctx.one("Concat", [ctx.one("Shape", [order]), _i64(ctx, "four", [4])], axis=0),
        ],
    )
    top_boxes = ctx.one("GatherElements", [boxes, index4], axis=1)
    top_alive = ctx.one("GatherElements", [alive, order], axis=1)
    ranked = ctx.one("Where", [top_alive, best, _f32(ctx, "dead", -np.inf)])
    inclusive = ctx.one("Add", [top_boxes, _f32(ctx, "grow", [0.0, 0.0, offset, offset])])
    selected = ctx.one(
        "NonMaxSuppression",
        [
            inclusive,
            ctx.one("Unsqueeze", [ranked, _i64(ctx, "ax", [1])]),
            _i64(ctx, "post", [post]),
            _f32(ctx, "iou", [min(max(threshold, 0.0), 1.0)]),
            _f32(ctx, "lowest", [LOWEST]),
        ],
    )
    return selected, top_boxes, best


def _pick(ctx: ConversionContext, selected: str) -> str:
    """(image, box) index pairs [K, 2] of ONNX NonMaxSuppression's selection."""
    return ctx.one("Gather", [selected, _i64(ctx, "cols", [0, 2])], axis=1)


def _write(ctx: ConversionContext, layer: Layer, index: int, value: str, shape=None) -> None:
    out = ctx.out(layer, index)
    ctx.one("Cast", [value], out, to=ctx.type_of(out))
    if shape is not None:
        ctx.shapes[out] = shape


@converts(
    "GenerateProposals",
    (9,),
    inputs=(4, 4),
    attrs={
        "min_size": Float(required=True),
        "nms_threshold": Float(required=True),
        "pre_nms_count": Int(required=True, minimum=1),
        "post_nms_count": Int(required=True, minimum=1),
        "normalized": Bool(default=True),
        "nms_eta": Float(default=1.0),
        "roi_num_type": ElementType(allowed=("i32", "i64"), default="i64"),
    },
)
def generate_proposals(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """im_info [N, 3|4] (height, width, scale(s)), anchors [H, W, A, 4], deltas
    [N, A*4, H, W], scores [N, A, H, W] -> rois [R, 4], scores [R], rois per image [N]."""
    attrs = layer.attrs
    info, anchors, deltas, scores = (_float(ctx, t) for t in inputs)
    offset = 0.0 if attrs["normalized"] else 1.0
    anchors = ctx.one("Reshape", [anchors, _i64(ctx, "anchors", [1, -1, 4])])
    count = ctx.one("Gather", [ctx.one("Shape", [scores]), _i64(ctx, "a", [1])])
    deltas = ctx.one(
        "Reshape",
        [deltas, ctx.one("Concat", [_i64(ctx, "n", [0]), count, _i64(ctx, "d", [4, -1])], axis=0)],
    )
    deltas = ctx.one(
        "Reshape",
        [ctx.one("Transpose", [deltas], perm=[0, 3, 1, 2]), _i64(ctx, "flat4", [0, -1, 4])],
    )
    scores = ctx.one(
        "Reshape",
        [ctx.one("Transpose", [scores], perm=[0, 2, 3, 1]), _i64(ctx, "flat", [0, -1])],
    )

    def column(index: int) -> str:
        return ctx.one("Gather", [info, _i64(ctx, "i", [index])], axis=1)  # [N, 1]

    scale_h = column(2)
    scale_w = ctx.one(
        "Gather", [ctx.one("Concat", [info, scale_h], axis=1), _i64(ctx, "i", [3])], axis=1
    )
    size = _f32(ctx, "min_size", attrs["min_size"])
    boxes, large = _refine(
        ctx,
        anchors,
        deltas,
        (column(0), column(1)),
        (ctx.one("Mul", [size, scale_h]), ctx.one("Mul", [size, scale_w])),
        offset,
    )
    selected, top_boxes, top_scores = _best_then_nms(
        ctx,
        boxes,
        scores,
        large,
        attrs["pre_nms_count"],
        attrs["post_nms_count"],
        attrs["nms_threshold"],
        offset,
    )
    pick = _pick(ctx, selected)
    _write(ctx, layer, 0, ctx.one("GatherND", [top_boxes, pick]), (None, 4))
    _write(ctx, layer, 1, ctx.one("GatherND", [top_scores, pick]), (None,))
    images = ctx.one("Gather", [ctx.one("Shape", [info]), _i64(ctx, "n", 0)])
    ids = ctx.one("Range", [_i64(ctx, "z", 0), images, _i64(ctx, "o", 1)])
    member = ctx.one(
        "Equal",
        [
            ctx.one(
                "Unsqueeze",
                [ctx.one("Gather", [selected, _i64(ctx, "c0", 0)], axis=1), _i64(ctx, "ax", [1])],
            ),
            ctx.one("Unsqueeze", [ids, _i64(ctx, "ax", [0])]),
        ],
    )
    counts = ctx.reduce("ReduceSum", ctx.one("Cast", [member], to=TensorProto.INT64), [0], False)
    _write(ctx, layer, 2, counts)


@converts(
    "ExperimentalDetectronGenerateProposalsSingleImage",
    (6,),
    inputs=(4, 4),
    attrs={
        "min_size": Float(required=True),
        "nms_threshold": Float(required=True),
        "pre_nms_count": Int(required=True, minimum=1),
        "post_nms_count": Int(required=True, minimum=1),
    },
)
def generate_proposals_single_image(
    ctx: ConversionContext, layer: Layer, inputs: list[str]
) -> None:
    """im_info [3], anchors [H*W*A, 4], deltas [A*4, H, W], scores [A, H, W] ->
    rois [post_nms_count, 4] and their scores, zero-padded."""
    attrs = layer.attrs
    info, anchors, deltas, scores = (_float(ctx, t) for t in inputs)
    post = attrs["post_nms_count"]
    anchors = ctx.one("Reshape", [anchors, _i64(ctx, "anchors", [1, -1, 4])])
    count = ctx.one("Slice", [ctx.one("Shape", [scores]), _i64(ctx, "b", [0]), _i64(ctx, "e", [1])])
    deltas = ctx.one(
        "Reshape", [deltas, ctx.one("Concat", [count, _i64(ctx, "d", [4, -1])], axis=0)]
    )
    deltas = ctx.one(
        "Reshape", [ctx.one("Transpose", [deltas], perm=[2, 0, 1]), _i64(ctx, "flat4", [1, -1, 4])]
    )
    scores = ctx.one(
        "Reshape", [ctx.one("Transpose", [scores], perm=[1, 2, 0]), _i64(ctx, "flat", [1, -1])]
    )
    img_h, img_w = (ctx.one("Gather", [info, _i64(ctx, "i", [i])]) for i in (0, 1))
    size = _f32(ctx, "min_size", [attrs["min_size"]])
    # OpenVINO's CPU plugin counts pixels inclusively (offset 1) for this version.
    boxes, large = _refine(ctx, anchors, deltas, (img_h, img_w), (size, size), 1.0)
    # Small boxes score 0 here but stay candidates (they may be chosen and suppress).
    kept_scores = ctx.one("Mul", [ctx.one("Cast", [large], to=TensorProto.FLOAT), scores])
    everyone = ctx.one("Equal", [kept_scores, kept_scores])
    # ...but its NMS (and the core reference's) measures overlap exclusively (offset 0).
    selected, top_boxes, top_scores = _best_then_nms(
        ctx, boxes, kept_scores, everyone, attrs["pre_nms_count"], post, attrs["nms_threshold"], 0.0
    )
    pick = _pick(ctx, selected)
    rois = ctx.one("GatherND", [top_boxes, pick])  # [K, 4]
    chosen = ctx.one("GatherND", [top_scores, pick])  # [K]
    missing = ctx.one(
        "Sub",
        [
            _i64(ctx, "post", [post]),
            ctx.one("Gather", [ctx.one("Shape", [rois]), _i64(ctx, "z", [0])]),
        ],
    )
    rois = ctx.one(
        "Pad",
        [rois, ctx.one("Concat", [_i64(ctx, "z", [0, 0]), missing, _i64(ctx, "z", [0])], axis=0)],
    )
    chosen = ctx.one("Pad", [chosen, ctx.one("Concat", [_i64(ctx, "z", [0]), missing], axis=0)])
    _write(ctx, layer, 0, rois)
    _write(ctx, layer, 1, chosen)
