"""OpenVINO's ExperimentalDetectron* layers (opset6) that ONNX can express exactly:
TopKROIs, PriorGridGenerator and ROIFeatureExtractor.

ROIFeatureExtractor pools every ROI from the pyramid level its size selects (FPN's rule:
``floor(2 + log2(sqrt(area) / 224))``, clamped to the levels; an empty box gets no level
and zeros), as Caffe2's RoiAlign, which is ONNX's RoiAlign in ``output_half_pixel`` mode;
``aligned`` shifts the boxes by half a pixel of the level first.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import float32s as _f32
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Float, Floats, Int, Ints
from b2s_onnx.ir.reader import Layer


def _float(ctx: ConversionContext, tensor: str) -> str:
    if ctx.type_of(tensor) == TensorProto.FLOAT:
        return tensor
    return ctx.one("Cast", [tensor], to=TensorProto.FLOAT)


def _write(ctx: ConversionContext, layer: Layer, index: int, value: str) -> None:
    out = ctx.out(layer, index)
    if ctx.type_of(out) == TensorProto.FLOAT:
        ctx.one("Identity", [value], out)
    else:
        ctx.one("Cast", [value], out, to=ctx.type_of(out))


@converts(
    "ExperimentalDetectronTopKROIs",
    (6,),
    inputs=(2, 2),
    attrs={"max_rois": Int(required=True, minimum=0)},
)
def topk_rois(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """The ``max_rois`` most probable ROIs, most probable first (equal probabilities keep
    their order); rows past the number of ROIs are zeros."""
    rois, probs = _float(ctx, inputs[0]), _float(ctx, inputs[1])
    wanted = layer.attrs["max_rois"]
    count = ctx.one("Shape", [probs])
    keep = ctx.one("Min", [count, _i64(ctx, "max", [wanted])])
    _, order = ctx.node(
        "TopK",
        [ctx.one("Reshape", [probs, _i64(ctx, "flat", [-1])]), keep],
        [ctx.tmp("best"), ctx.tmp("order")],
    )
    best = ctx.one("Gather", [rois, order], axis=0)
    missing = ctx.one("Sub", [_i64(ctx, "max", [wanted]), keep])
    pads = ctx.one("Concat", [_i64(ctx, "zero", [0, 0]), missing, _i64(ctx, "zero", [0])], axis=0)
    _write(ctx, layer, 0, ctx.one("Pad", [best, pads]))


def _require_grid_of_feature_map(ctx: ConversionContext, layer: Layer, feature: str) -> None:
    """Refuses an h x w grid (attributes h, w) with another number of cells than the feature
    map: OpenVINO shapes the output by the feature map but fills only h * w cells of it,
    leaving the rest of the buffer uninitialised (its own layer test of that case is
    disabled), so there is no defined result to convert. The same number of cells laid out
    differently is defined, and converts."""
    shape = ctx.shape(feature)
    if shape is None or len(shape) != 4 or None in shape[2:]:
        return
    rows, columns = layer.attrs["h"] or shape[2], layer.attrs["w"] or shape[3]
    if rows * columns != shape[2] * shape[3]:
        raise B2SError(
            f"{layer.where()}: a grid of h={rows} x w={columns} cells does not fill the "
            f"feature map's {shape[2]} x {shape[3]} (input 1); OpenVINO then shapes the output "
            "by the feature map but fills only h * w cells of it, so there is no defined "
            "result to convert"
        )


@converts(
    "ExperimentalDetectronPriorGridGenerator",
    (6,),
    inputs=(3, 3),
    attrs={
        "flatten": Bool(default=True),
        "h": Int(default=0, minimum=0),
        "w": Int(default=0, minimum=0),
        "stride_x": Float(default=0.0, minimum=0.0),
        "stride_y": Float(default=0.0, minimum=0.0),
    },
)
def prior_grid_generator(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """Every prior centred on every cell of an h x w grid (the feature map's size unless
    given), in (row, column, prior) order; the strides default to image size / grid size."""
    attrs = layer.attrs
    _require_grid_of_feature_map(ctx, layer, inputs[1])
    priors = _float(ctx, inputs[0])
    feature = ctx.one("Shape", [inputs[1]])
    image = ctx.one("Shape", [inputs[2]])

    def size(attr: str, shape: str, axis: int) -> str:
        if attrs[attr]:
            return _i64(ctx, attr, attrs[attr])
        return ctx.one("Gather", [shape, _i64(ctx, "axis", axis)])

    height, width = size("h", feature, 2), size("w", feature, 3)

    def stride(attr: str, cells: str, axis: int) -> str:
        if attrs[attr]:
            return _f32(ctx, attr, attrs[attr])
        extent = ctx.one(
            "Cast", [ctx.one("Gather", [image, _i64(ctx, "axis", axis)])], to=TensorProto.FLOAT
        )
        return ctx.one("Div", [extent, ctx.one("Cast", [cells], to=TensorProto.FLOAT)])

    step_x, step_y = stride("stride_x", width, 3), stride("stride_y", height, 2)

    def centres(cells: str, step: str, axes: list[int]) -> str:
        index = ctx.one(
            "Cast",
            [ctx.one("Range", [_i64(ctx, "z", 0), cells, _i64(ctx, "o", 1)])],
            to=TensorProto.FLOAT,
        )
        centre = ctx.one("Mul", [ctx.one("Add", [index, _f32(ctx, "half", 0.5)]), step])
        return ctx.one("Unsqueeze", [centre, _i64(ctx, "ax", axes)])

    shift_x = centres(width, step_x, [0, 2, 3])  # [1, W, 1, 1]
    shift_y = centres(height, step_y, [1, 2, 3])  # [H, 1, 1, 1]
    zero = _f32(ctx, "zero", 0.0)
    shifts = ctx.one(
        "Concat",
        [
            ctx.one("Add", [shift_x, ctx.one("Mul", [shift_y, zero])]),
            ctx.one("Add", [shift_y, ctx.one("Mul", [shift_x, zero])]),
        ]
        * 2,
        axis=3,
    )  # [H, W, 1, 4]: (x, y, x, y)
    grid = ctx.one("Add", [shifts, ctx.one("Unsqueeze", [priors, _i64(ctx, "ax", [0, 1])])])
    if attrs["flatten"]:
        target = _i64(ctx, "flat", [-1, 4])
    else:  # OpenVINO shapes the output by the feature map even when h/w differ
        target = ctx.one(
            "Concat",
            [
                ctx.one("Slice", [feature, _i64(ctx, "b", [2]), _i64(ctx, "e", [4])]),
                _i64(ctx, "rest", [-1, 4]),
            ],
            axis=0,
        )
    _write(ctx, layer, 0, ctx.one("Reshape", [grid, target]))


@converts(
    "ExperimentalDetectronROIFeatureExtractor",
    (6,),
    inputs=(2, 2**16),
    attrs={
        "output_size": Int(required=True, minimum=1),
        "sampling_ratio": Int(required=True, minimum=0),
        "pyramid_scales": Ints(required=True, minimum=1),
        "aligned": Bool(default=False),
    },
)
def roi_feature_extractor(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    attrs = layer.attrs
    rois, levels = _float(ctx, inputs[0]), inputs[1:]
    scales = attrs["pyramid_scales"]
    if len(scales) < len(levels):
        raise B2SError(
            f"{layer.where()}: attribute pyramid_scales='{','.join(map(str, scales))}': needs "
            f"one value per feature level ({len(levels)})"
        )
    x0, y0, x1, y1 = (ctx.one("Gather", [rois, _i64(ctx, f"c{i}", i)], axis=1) for i in range(4))
    area = ctx.one("Mul", [ctx.one("Sub", [x1, x0]), ctx.one("Sub", [y1, y0])])
    scaled = ctx.one(
        "Add",
        [
            ctx.one("Div", [ctx.one("Sqrt", [area]), _f32(ctx, "canon", 224.0)]),
            _f32(ctx, "eps", 1e-6),
        ],
    )
    log2 = ctx.one("Div", [ctx.one("Log", [scaled]), _f32(ctx, "ln2", np.log(2.0))])
    level = ctx.one("Floor", [ctx.one("Add", [log2, _f32(ctx, "canon_level", 2.0)])])
    level = ctx.one("Clip", [level, _f32(ctx, "lo", 0.0), _f32(ctx, "hi", float(len(levels) - 1))])
    # An empty or inverted box is assigned no level: its features stay zero.
    level = ctx.one(
        "Where",
        [ctx.one("Greater", [area, _f32(ctx, "zero", 0.0)]), level, _f32(ctx, "none", -1.0)],
    )
    batch = ctx.one(
        "ConstantOfShape",
        [ctx.one("Shape", [area])],
        value=helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
    )
    pooled = None
    for index, feature in enumerate(levels):
        scale = 1.0 / scales[index]
        boxes = rois
        if attrs["aligned"]:  # x * scale - 0.5, as a shift of the box before scaling
            boxes = ctx.one("Sub", [rois, _f32(ctx, "shift", 0.5 / scale)])
        features = ctx.one(
            "RoiAlign",
            [_float(ctx, feature), boxes, batch],
            mode="avg",
            output_height=attrs["output_size"],
            output_width=attrs["output_size"],
            sampling_ratio=attrs["sampling_ratio"],
            spatial_scale=scale,
            **({"coordinate_transformation_mode": "output_half_pixel"} if ctx.opset >= 16 else {}),
        )
        here = ctx.one("Equal", [level, _f32(ctx, "level", float(index))])
        here = ctx.one("Unsqueeze", [here, _i64(ctx, "ax", [1, 2, 3])])
        chosen = ctx.one("Where", [here, features, _f32(ctx, "zero", 0.0)])
        pooled = chosen if pooled is None else ctx.one("Add", [pooled, chosen])
    _write(ctx, layer, 0, pooled)
    if len(layer.outputs) > 1:
        _write(ctx, layer, 1, rois)


@converts(
    "ExperimentalDetectronDetectionOutput",
    (6,),
    inputs=(4, 4),
    attrs={
        "score_threshold": Float(required=True),
        "nms_threshold": Float(required=True),
        "max_delta_log_wh": Float(required=True),
        "num_classes": Int(required=True, minimum=1),
        "post_nms_count": Int(required=True, minimum=1),
        "max_detections_per_image": Int(required=True, minimum=1),
        "class_agnostic_box_regression": Bool(default=False),
        "deltas_weights": Floats(required=True, length=4),
    },
)
def detectron_detection_output(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """rois [R, 4], deltas [R, C*4], scores [R, C], im_info -> boxes, classes and scores of
    at most ``max_detections_per_image`` detections, zero-padded. As OpenVINO's CPU plugin:
    class 0 is the background, boxes are refined per class with inclusive pixels and only
    clipped at 0, NMS runs per class (each class one batch of ONNX's NonMaxSuppression, the
    far corners moved out by one pixel for the inclusive IoU), and the detections stay in
    class order unless there are too many, when the best ``max_detections_per_image`` are
    kept in score order."""
    attrs = layer.attrs
    rois, deltas, scores = (_float(ctx, t) for t in inputs[:3])
    classes = attrs["num_classes"]
    weights = attrs["deltas_weights"]
    x0, y0, x1, y1 = (ctx.one("Gather", [rois, _i64(ctx, f"c{i}", [i])], axis=1) for i in range(4))
    zero, one, half = _f32(ctx, "zero", 0.0), _f32(ctx, "one", 1.0), _f32(ctx, "half", 0.5)
    valid = ctx.one(
        "And",
        [
            ctx.one("Greater", [ctx.one("Sub", [x1, x0]), zero]),
            ctx.one("Greater", [ctx.one("Sub", [y1, y0]), zero]),
        ],
    )  # [R, 1]
    ww = ctx.one("Add", [ctx.one("Sub", [x1, x0]), one])
    hh = ctx.one("Add", [ctx.one("Sub", [y1, y0]), one])
    ctr_x = ctx.one("Add", [x0, ctx.one("Mul", [half, ww])])
    ctr_y = ctx.one("Add", [y0, ctx.one("Mul", [half, hh])])
    moves = ctx.one("Reshape", [deltas, _i64(ctx, "moves", [0, classes, 4])])  # [R, C, 4]

    def delta(k: int) -> str:
        value = ctx.one("Gather", [moves, _i64(ctx, f"k{k}", k)], axis=2)  # [R, C]
        return ctx.one("Div", [value, _f32(ctx, "weight", weights[k])])

    cap = _f32(ctx, "cap", attrs["max_delta_log_wh"])
    pred_x = ctx.one("Add", [ctx.one("Mul", [delta(0), ww]), ctr_x])
    pred_y = ctx.one("Add", [ctx.one("Mul", [delta(1), hh]), ctr_y])
    pred_w = ctx.one("Mul", [ctx.one("Exp", [ctx.one("Min", [delta(2), cap])]), ww])
    pred_h = ctx.one("Mul", [ctx.one("Exp", [ctx.one("Min", [delta(3), cap])]), hh])
    half_w, half_h = ctx.one("Mul", [half, pred_w]), ctx.one("Mul", [half, pred_h])
    corners = [
        ctx.one("Sub", [pred_x, half_w]),
        ctx.one("Sub", [pred_y, half_h]),
        ctx.one("Sub", [ctx.one("Add", [pred_x, half_w]), one]),
        ctx.one("Sub", [ctx.one("Add", [pred_y, half_h]), one]),
    ]
    corners = [ctx.one("Where", [valid, ctx.one("Max", [c, zero]), zero]) for c in corners]
    boxes = ctx.one(
        "Concat", [ctx.one("Unsqueeze", [c, _i64(ctx, "ax", [2])]) for c in corners], axis=2
    )
    boxes = ctx.one("Transpose", [boxes], perm=[1, 0, 2])  # [C, R, 4]
    background = np.zeros((1, classes), bool)
    background[0, 0] = True
    ranked = ctx.one("Where", [valid, scores, zero])
    ranked = ctx.one(
        "Where", [ctx.const("background", background), _f32(ctx, "gone", -np.inf), ranked]
    )
    ranked = ctx.one(
        "Unsqueeze", [ctx.one("Transpose", [ranked], perm=[1, 0]), _i64(ctx, "ax", [1])]
    )
    inclusive = ctx.one("Add", [boxes, _f32(ctx, "grow", [0.0, 0.0, 1.0, 1.0])])
    selected = ctx.one(
        "NonMaxSuppression",
        [
            inclusive,
            ranked,
            _i64(ctx, "post", [attrs["post_nms_count"]]),
            _f32(ctx, "iou", [min(max(attrs["nms_threshold"], 0.0), 1.0)]),
            _f32(ctx, "score", [attrs["score_threshold"]]),
        ],
    )  # [K, 3]: class, 0, roi
    pick = ctx.one("Gather", [selected, _i64(ctx, "cols", [0, 2])], axis=1)
    chosen_scores = ctx.one("GatherND", [ctx.one("Squeeze", [ranked, _i64(ctx, "ax", [1])]), pick])
    chosen_boxes = ctx.one("GatherND", [boxes, pick])
    chosen_classes = ctx.one("Gather", [selected, _i64(ctx, "c0", 0)], axis=1)
    limit = attrs["max_detections_per_image"]
    total = ctx.one("Shape", [chosen_scores])
    kept = ctx.one("Min", [total, _i64(ctx, "limit", [limit])])
    _, by_score = ctx.node("TopK", [chosen_scores, kept], [ctx.tmp("best"), ctx.tmp("by_score")])
    in_order = ctx.one("Range", [_i64(ctx, "z", 0), ctx.one("Squeeze", [kept]), _i64(ctx, "o", 1)])
    too_many = ctx.one("Greater", [total, _i64(ctx, "limit", [limit])])
    order = ctx.one("Where", [too_many, by_score, in_order])
    missing = ctx.one("Sub", [_i64(ctx, "limit", [limit]), kept])
    pads_1d = ctx.one("Concat", [_i64(ctx, "z", [0]), missing], axis=0)
    pads_2d = ctx.one("Concat", [_i64(ctx, "z", [0, 0]), missing, _i64(ctx, "z", [0])], axis=0)

    def final(values: str, pads: str) -> str:
        return ctx.one("Pad", [ctx.one("Gather", [values, order], axis=0), pads])

    _write(ctx, layer, 0, final(chosen_boxes, pads_2d))
    out = ctx.out(layer, 1)
    ctx.one("Cast", [final(chosen_classes, pads_1d)], out, to=ctx.type_of(out))
    _write(ctx, layer, 2, final(chosen_scores, pads_1d))
