"""DetectionOutput-1/8 (SSD post-processing) as a subgraph of standard ONNX ops.

Follows OpenVINO's reference algorithm step by step:
1. decode every prior with its location deltas (CENTER_SIZE or CORNER code), optionally
   clipped to [0, 1];
2. per image and foreground class: the ``top_k`` highest scores above
   ``confidence_threshold`` (TopK), then greedy NMS at ``nms_threshold``
   (NonMaxSuppression, one NMS batch per image and class);
3. per image: if more than ``keep_top_k`` boxes survive, the ``keep_top_k`` best scores;
4. rows ``[image, label, score, xmin, ymin, xmax, ymax]`` ordered by image, label, then
   score; valid rows first, then one row whose image is -1, then zeros.

Supported: shared locations, normalized priors, Caffe-style labels, three inputs (no
ARM refinement). Anything else is refused by name.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, Float, Int, Ints
from b2s_onnx.ir.reader import Layer

_CODES = {
    "caffe.priorboxparameter.center_size": "center_size",
    "caffe.priorboxparameter.corner": "corner",
}
DETECTION_OUTPUT_8 = {
    "background_label_id": Int(default=0),
    "top_k": Int(default=-1, minimum=-1),
    "variance_encoded_in_target": Bool(default=False),
    "keep_top_k": Ints(required=True, minimum=-1),
    "code_type": Choice(allowed=tuple(_CODES), default="caffe.priorboxparameter.corner"),
    "share_location": Bool(default=True),
    "nms_threshold": Float(required=True, minimum=0),
    "confidence_threshold": Float(default=0.0),
    "clip_after_nms": Bool(default=False),
    "clip_before_nms": Bool(default=False),
    "decrease_label_id": Bool(default=False),
    "normalized": Bool(default=False),
    "input_height": Int(default=1, minimum=1),
    "input_width": Int(default=1, minimum=1),
    "objectness_score": Float(default=0.0),
}
DETECTION_OUTPUT_1 = {**DETECTION_OUTPUT_8, "num_classes": Int(required=True, minimum=1)}


def _static(ctx: ConversionContext, layer: Layer, tensor: str) -> tuple[int, ...]:
    shape = ctx.shape(tensor)
    if shape is None or any(d is None for d in shape):
        raise B2SError(f"{layer.where()}: DetectionOutput needs static input shapes")
    return tuple(shape)


def _dynamic_prior_count(ctx: ConversionContext, loc: str, conf: str) -> bool:
    """Whether the number of priors is known only at run time (an SSD on dynamic H, W)."""
    shapes = [ctx.shape(loc), ctx.shape(conf)]
    return any(s is not None and len(s) == 2 and s[1] is None for s in shapes)


def _dynamic_counts(ctx, layer, loc: str, keep_top_k: int) -> tuple[int, None, int, int]:
    """(images, None, classes, output rows) for a prior count known only at run time: the
    batch must be static, the class count an attribute (version 1), ``top_k`` and
    ``keep_top_k`` positive, so every size after the per-class TopK is fixed."""
    shape = ctx.shape(loc)
    images = None if shape is None else shape[0]
    if images is None:
        raise B2SError(f"{layer.where()}: DetectionOutput needs a static batch")
    attrs = layer.attrs
    needs = []
    if layer.version != "opset1":
        needs.append("version 1's num_classes")
    if attrs["top_k"] <= 0:
        needs.append("a positive top_k")
    if keep_top_k <= 0:
        needs.append("a positive keep_top_k")
    if needs:
        raise B2SError(
            f"{layer.where()}: DetectionOutput on a run-time number of priors needs "
            + ", ".join(needs)
        )
    return images, None, attrs["num_classes"], images * keep_top_k


def _require(layer: Layer, condition: bool, what: str) -> None:
    if not condition:
        raise B2SError(f"{layer.where()}: DetectionOutput with {what} is not supported")


def _decode(ctx, layer, loc, priors, images, num_priors, code, encoded):
    """Decoded boxes [images, P, 4] in the reference's operation order (``num_priors``
    None: a count known only at run time)."""
    prior_shape = ctx.shape(priors)
    if prior_shape is None or len(prior_shape) != 3 or None in prior_shape[:2]:
        raise B2SError(
            f"{layer.where()}: DetectionOutput needs priors of shape [1 or N, 1 or 2, P*4]"
        )
    prior_batch, prior_kinds = prior_shape[:2]
    _require(layer, prior_batch in (1, images), "a prior batch that is neither 1 nor N")
    if num_priors is None:
        shape = [prior_batch, prior_kinds, -1, 4]
    else:
        shape = [prior_batch, -1, num_priors, 4]
    rows = ctx.one("Reshape", [priors, _i64(ctx, "prior_rows", shape)])
    boxes = ctx.one("Gather", [rows, _i64(ctx, "row0", 0)], axis=1)
    deltas = ctx.one("Reshape", [loc, _i64(ctx, "loc_rows", [images, num_priors or -1, 4])])
    px0, py0, px1, py1 = ctx.node(
        "Split",
        [boxes, _i64(ctx, "four", [1, 1, 1, 1])],
        [ctx.tmp(f"p{i}") for i in range(4)],
        axis=2,
    )
    dx0, dy0, dx1, dy1 = ctx.node(
        "Split",
        [deltas, _i64(ctx, "four", [1, 1, 1, 1])],
        [ctx.tmp(f"d{i}") for i in range(4)],
        axis=2,
    )
    if not encoded:
        variances = ctx.one("Gather", [rows, _i64(ctx, "row1", 1)], axis=1)
        v0, v1, v2, v3 = ctx.node(
            "Split",
            [variances, _i64(ctx, "four", [1, 1, 1, 1])],
            [ctx.tmp(f"v{i}") for i in range(4)],
            axis=2,
        )
        dx0, dy0 = ctx.one("Mul", [v0, dx0]), ctx.one("Mul", [v1, dy0])
        dx1, dy1 = ctx.one("Mul", [v2, dx1]), ctx.one("Mul", [v3, dy1])
    if code == "corner":
        parts = [
            ctx.one("Add", [p, d]) for p, d in ((px0, dx0), (py0, dy0), (px1, dx1), (py1, dy1))
        ]
    else:
        half = _f32(ctx, "half", 2.0)
        width, height = ctx.one("Sub", [px1, px0]), ctx.one("Sub", [py1, py0])
        center_x = ctx.one("Div", [ctx.one("Add", [px0, px1]), half])
        center_y = ctx.one("Div", [ctx.one("Add", [py0, py1]), half])
        box_cx = ctx.one("Add", [ctx.one("Mul", [dx0, width]), center_x])
        box_cy = ctx.one("Add", [ctx.one("Mul", [dy0, height]), center_y])
        box_w = ctx.one("Mul", [ctx.one("Exp", [dx1]), width])
        box_h = ctx.one("Mul", [ctx.one("Exp", [dy1]), height])
        half_w, half_h = ctx.one("Div", [box_w, half]), ctx.one("Div", [box_h, half])
        parts = [
            ctx.one("Sub", [box_cx, half_w]),
            ctx.one("Sub", [box_cy, half_h]),
            ctx.one("Add", [box_cx, half_w]),
            ctx.one("Add", [box_cy, half_h]),
        ]
    decoded = ctx.one("Concat", parts, axis=2)
    if layer.attrs["clip_before_nms"]:
        decoded = ctx.one("Clip", [decoded, _f32(ctx, "zero", 0.0), _f32(ctx, "one", 1.0)])
    return decoded


@converts("DetectionOutput", (1,), inputs=(3, 5), attrs=DETECTION_OUTPUT_1)
@converts("DetectionOutput", (8,), inputs=(3, 5), attrs=DETECTION_OUTPUT_8)
def detection_output(ctx, layer, inputs):
    attrs = layer.attrs
    _require(layer, len(inputs) == 3, f"{len(inputs)} inputs (ARM refinement)")
    _require(layer, attrs["share_location"], "share_location=false")
    _require(layer, attrs["normalized"], "normalized=false")
    _require(layer, not attrs["decrease_label_id"], "decrease_label_id=true")
    code = _CODES[attrs["code_type"]]
    loc, conf, priors = inputs
    top_k = attrs["top_k"]
    keep_top_k = (attrs["keep_top_k"] or [-1])[0]
    if _dynamic_prior_count(ctx, loc, conf):
        images, num_priors, num_classes, out_rows = _dynamic_counts(ctx, layer, loc, keep_top_k)
    else:
        images, loc_size = _static(ctx, layer, loc)
        num_priors = loc_size // 4
        _require(layer, num_priors > 0 and loc_size % 4 == 0, f"{loc_size} location values")
        conf_shape = _static(ctx, layer, conf)
        num_classes = (
            attrs["num_classes"] if layer.version == "opset1" else conf_shape[1] // num_priors
        )
        _require(
            layer,
            len(conf_shape) == 2 and conf_shape[1] == num_classes * num_priors,
            f"confidences {list(conf_shape)} for {num_classes} classes x {num_priors} priors",
        )
        out_rows = _static(ctx, layer, ctx.out(layer))[2]
    background = attrs["background_label_id"]
    threshold = attrs["confidence_threshold"]
    labels = [c for c in range(num_classes) if c != background]
    fg = len(labels)
    # With a run-time prior count the candidates are padded to at least top_k (below).
    per_class = top_k if num_priors is None or 0 <= top_k < num_priors else num_priors

    boxes = _decode(
        ctx,
        layer,
        loc,
        priors,
        images,
        num_priors,
        code,
        attrs["variance_encoded_in_target"],
    )
    conf_rows = [images, num_priors or -1, num_classes]
    scores = ctx.one(
        "Transpose",
        [ctx.one("Reshape", [conf, _i64(ctx, "conf_rows", conf_rows)])],
        perm=[0, 2, 1],
    )
    scores = ctx.one("Gather", [scores, _i64(ctx, "labels", labels)], axis=1)  # [N, C', P]
    if num_priors is None:
        # top_k candidates whatever the count: top_k more priors, scored -inf (below any
        # threshold, so NMS drops them), at a box of zeros.
        scores = ctx.one(
            "Pad",
            [scores, _i64(ctx, "score_pad", [0, 0, 0, 0, 0, top_k]), _f32(ctx, "none", -np.inf)],
        )
        boxes = ctx.one("Pad", [boxes, _i64(ctx, "box_pad", [0, 0, 0, 0, top_k, 0])])
    # 2. top_k candidates per (image, class), best first; ties keep the lower prior first.
    top_scores, top_priors = ctx.node(
        "TopK",
        [scores, _i64(ctx, "top_k", [per_class])],
        [ctx.tmp("top_scores"), ctx.tmp("top_priors")],
        axis=2,
        largest=1,
        sorted=1,
    )
    flat_priors = ctx.one("Reshape", [top_priors, _i64(ctx, "flat", [images, fg * per_class, 1])])
    candidate_boxes = ctx.one("GatherND", [boxes, flat_priors], batch_dims=1)
    nms_boxes = ctx.one(
        "Reshape", [candidate_boxes, _i64(ctx, "nms_boxes", [images * fg, per_class, 4])]
    )
    nms_scores = ctx.one(
        "Reshape", [top_scores, _i64(ctx, "nms_scores", [images * fg, 1, per_class])]
    )
    selected = ctx.one(
        "NonMaxSuppression",
        [
            nms_boxes,
            nms_scores,
            _i64(ctx, "max_out", [per_class]),
            _f32(ctx, "iou", [attrs["nms_threshold"]]),
            _f32(ctx, "score", [threshold]),
        ],
    )
    # Mark survivors in a dense [N*C', K] grid: -inf where nothing survived.
    batch_and_rank = ctx.one("Gather", [selected, _i64(ctx, "cols", [0, 2])], axis=1)
    ones = ctx.one(
        "Expand",
        [
            _f32(ctx, "one_f", 1.0),
            ctx.one(
                "Slice",
                [ctx.one("Shape", [batch_and_rank]), _i64(ctx, "s0", [0]), _i64(ctx, "s1", [1])],
            ),
        ],
    )
    kept = ctx.one(
        "ScatterND", [_f32(ctx, "grid", np.zeros((images * fg, per_class))), batch_and_rank, ones]
    )
    flat_scores = ctx.one(
        "Reshape", [top_scores, _i64(ctx, "grid_shape", [images * fg, per_class])]
    )
    minus_inf = _f32(ctx, "minus_inf", -np.inf)
    survivor_scores = ctx.one(
        "Where", [ctx.one("Greater", [kept, _f32(ctx, "half_f", 0.5)]), flat_scores, minus_inf]
    )
    per_image = ctx.one(
        "Reshape", [survivor_scores, _i64(ctx, "per_image", [images, fg * per_class])]
    )
    # 3. keep_top_k best per image (all of them when keep_top_k is -1).
    keep = fg * per_class if keep_top_k < 0 else min(keep_top_k, fg * per_class)
    best_scores, best_slots = ctx.node(
        "TopK",
        [per_image, _i64(ctx, "keep", [keep])],
        [ctx.tmp("best_scores"), ctx.tmp("best_slots")],
        axis=1,
        largest=1,
        sorted=1,
    )
    valid = ctx.one("Greater", [best_scores, minus_inf])
    # 4. order by label, then score: slot // K is the class, the TopK position the score rank.
    class_of = ctx.one("Div", [best_slots, _i64(ctx, "k_div", per_class)])
    order_key = ctx.one(
        "Add",
        [
            ctx.one("Mul", [class_of, _i64(ctx, "stride", keep)]),
            _i64(ctx, "position", np.arange(keep)),
        ],
    )
    order_key = ctx.one("Where", [valid, order_key, _i64(ctx, "last", fg * keep + keep)])
    order_key = ctx.one("Cast", [order_key], to=TensorProto.FLOAT)
    order = ctx.node(
        "TopK",
        [order_key, _i64(ctx, "keep2", [keep])],
        [ctx.tmp("order_keys"), ctx.tmp("order")],
        axis=1,
        largest=0,
        sorted=1,
    )[1]
    slots = ctx.one("GatherElements", [best_slots, order], axis=1)
    row_scores = ctx.one("GatherElements", [best_scores, order], axis=1)
    row_valid = ctx.one("GatherElements", [valid, order], axis=1)
    classes = ctx.one("Div", [slots, _i64(ctx, "k_div2", per_class)])
    label_values = ctx.one(
        "Cast", [ctx.one("Gather", [_i64(ctx, "label_ids", labels), classes])], to=TensorProto.FLOAT
    )
    prior_grid = ctx.one("Reshape", [top_priors, _i64(ctx, "prior_grid", [images, fg * per_class])])
    prior_ids = ctx.one("GatherElements", [prior_grid, slots], axis=1)
    row_boxes = ctx.one(
        "GatherND",
        [boxes, ctx.one("Unsqueeze", [prior_ids, _i64(ctx, "last_axis", [2])])],
        batch_dims=1,
    )  # [N, keep, 4]
    if attrs["clip_after_nms"]:
        row_boxes = ctx.one("Clip", [row_boxes, _f32(ctx, "zero2", 0.0), _f32(ctx, "one2", 1.0)])
    image_ids = ctx.one(
        "Expand",
        [
            _f32(ctx, "image_ids", np.arange(images, dtype=np.float32).reshape(images, 1, 1)),
            _i64(ctx, "col_shape", [images, keep, 1]),
        ],
    )
    rows = ctx.one(
        "Concat",
        [
            image_ids,
            ctx.one("Unsqueeze", [label_values, _i64(ctx, "u2", [2])]),
            ctx.one("Unsqueeze", [row_scores, _i64(ctx, "u3", [2])]),
            row_boxes,
        ],
        axis=2,
    )
    rows = ctx.one(
        "Where",
        [ctx.one("Unsqueeze", [row_valid, _i64(ctx, "u4", [2])]), rows, _f32(ctx, "zero_row", 0.0)],
    )
    # Valid rows of all images first (stable), then the -1 marker, then zeros.
    total = images * keep
    flat_rows = ctx.one("Reshape", [rows, _i64(ctx, "all_rows", [total, 7])])
    flat_valid = ctx.one("Reshape", [row_valid, _i64(ctx, "all_valid", [total])])
    positions = _i64(ctx, "positions", np.arange(total))
    compact_key = ctx.one(
        "Cast",
        [
            ctx.one(
                "Where",
                [flat_valid, positions, ctx.one("Add", [positions, _i64(ctx, "shift", total)])],
            )
        ],
        to=TensorProto.FLOAT,
    )
    compact = ctx.node(
        "TopK",
        [compact_key, _i64(ctx, "total", [total])],
        [ctx.tmp("compact_keys"), ctx.tmp("compact")],
        axis=0,
        largest=0,
        sorted=1,
    )[1]
    ordered = ctx.one("Gather", [flat_rows, compact], axis=0)
    if out_rows > total:
        ordered = ctx.one("Pad", [ordered, _i64(ctx, "pad_rows", [0, 0, out_rows - total, 0])])
    elif out_rows < total:
        ordered = ctx.one(
            "Slice",
            [ordered, _i64(ctx, "r0", [0]), _i64(ctx, "r1", [out_rows]), _i64(ctx, "r2", [0])],
        )
    count = ctx.one("ReduceSum", [ctx.one("Cast", [flat_valid], to=TensorProto.INT64)], keepdims=1)
    marker = ctx.one(
        "Equal", [_i64(ctx, "row_index", np.arange(out_rows).reshape(out_rows, 1)), count]
    )
    first_column = _i64(ctx, "first_col", np.eye(1, 7, dtype=np.int64))
    is_marker = ctx.one("And", [marker, ctx.one("Cast", [first_column], to=TensorProto.BOOL)])
    result = ctx.one("Where", [is_marker, _f32(ctx, "minus_one", -1.0), ordered])
    ctx.one("Reshape", [result, _i64(ctx, "out_shape", [1, 1, out_rows, 7])], ctx.out(layer))
