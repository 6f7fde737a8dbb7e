"""Prior-box generators: pure functions of shapes, so they are computed here, as constants.

They need their two inputs (feature-map size and image size) to be constants, which they
are in any model with static shapes (ShapeOf of static tensors folds). On sizes known only
at run time both are computed by ONNX ops instead (``prior_grid.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.prior_grid import (
    prior_box_at_run_time,
    prior_box_clustered_at_run_time,
)
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Float, Floats
from b2s_onnx.ir.reader import Layer

#: Prior boxes are computed here: refuse grids whose output would be absurdly large.
MAX_PRIOR_VALUES = 1 << 26
#: Sizes of the priors are computed here too: refuse ones no image has.
MAX_PRIOR_SIZE = 1e6

_VARIANCE = Floats(minimum=0)
PRIOR_BOX_CLUSTERED = {
    "width": Floats(default=[1.0], minimum=0, maximum=MAX_PRIOR_SIZE),
    "height": Floats(default=[1.0], minimum=0, maximum=MAX_PRIOR_SIZE),
    "clip": Bool(default=True),
    "offset": Float(required=True),
    "variance": _VARIANCE,
    "img_w": Float(default=0.0, minimum=0),
    "img_h": Float(default=0.0, minimum=0),
    "step": Float(default=0.0, minimum=0),
    "step_w": Float(default=0.0, minimum=0),
    "step_h": Float(default=0.0, minimum=0),
}
_SIZES = Floats(default=[], minimum=0, maximum=MAX_PRIOR_SIZE)
PRIOR_BOX_1 = {
    "min_size": _SIZES,
    "max_size": _SIZES,
    "aspect_ratio": Floats(default=[], minimum=0, maximum=MAX_PRIOR_SIZE),
    "flip": Bool(default=False),
    "clip": Bool(default=False),
    "step": Float(default=0.0),
    "offset": Float(required=True),
    "variance": _VARIANCE,
    "scale_all_sizes": Bool(default=True),
    "fixed_ratio": Floats(default=[], minimum=0, maximum=MAX_PRIOR_SIZE),
    "fixed_size": _SIZES,
    "density": Floats(default=[], minimum=0, maximum=1024),
}
PRIOR_BOX_8 = {**PRIOR_BOX_1, "min_max_aspect_ratios_order": Bool(default=True)}


def _variance(layer: Layer) -> list[float]:
    variance = layer.attrs["variance"] or [0.1]
    if len(variance) not in (1, 4):
        raise B2SError(f"{layer.where()}: attribute variance needs 1 or 4 values")
    return variance


def _sizes(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> tuple[int, int, int, int]:
    layer_hw = ctx.require_value(layer, inputs[0], "the feature-map size").reshape(-1)
    image_hw = ctx.require_value(layer, inputs[1], "the image size").reshape(-1)
    if layer_hw.size != 2 or image_hw.size != 2:
        raise B2SError(f"{layer.where()}: both inputs must hold [height, width]")
    values = [int(v) for v in (*layer_hw, *image_hw)]
    if any(v <= 0 for v in values):
        raise B2SError(f"{layer.where()}: sizes must be positive, got {values}")
    declared = layer.outputs[0].dims if layer.outputs else None
    cells = values[0] * values[1]
    if cells > MAX_PRIOR_VALUES or (declared and declared[-1] and declared[-1] > MAX_PRIOR_VALUES):
        raise B2SError(f"{layer.where()}: a {values[0]}x{values[1]} prior grid is absurdly large")
    return values[0], values[1], values[2], values[3]


def prior_box_clustered(
    layer: Layer, layer_h: int, layer_w: int, image_h: int, image_w: int
) -> np.ndarray:
    """[2, 4 * H * W * P]: boxes (xmin, ymin, xmax, ymax per prior), then their variances."""
    attrs = layer.attrs
    widths, heights = attrs["width"], attrs["height"]
    if len(widths) != len(heights):
        raise B2SError(f"{layer.where()}: width and height need the same number of values")
    clip = attrs["clip"]
    offset = attrs["offset"]
    variance = _variance(layer)
    img_w = attrs["img_w"] or float(image_w)
    img_h = attrs["img_h"] or float(image_h)
    step = attrs["step"]
    step_w, step_h = attrs["step_w"], attrs["step_h"]
    if step_w == 0 and step_h == 0:
        step_w = step_h = step
    if step_w == 0 and step_h == 0:
        step_w, step_h = img_w / layer_w, img_h / layer_h
    f32 = np.float32
    cx = ((np.arange(layer_w, dtype=f32) + f32(offset)) * f32(step_w))[None, :, None]
    cy = ((np.arange(layer_h, dtype=f32) + f32(offset)) * f32(step_h))[:, None, None]
    half_w = (np.asarray(widths, f32) / f32(2))[None, None, :]
    half_h = (np.asarray(heights, f32) / f32(2))[None, None, :]
    boxes = np.stack(
        np.broadcast_arrays(
            (cx - half_w) / f32(img_w),
            (cy - half_h) / f32(img_h),
            (cx + half_w) / f32(img_w),
            (cy + half_h) / f32(img_h),
        ),
        axis=-1,
    ).astype(f32)
    if clip:
        boxes = np.clip(boxes, f32(0), f32(1))
    variances = np.broadcast_to(np.asarray(variance * (4 // len(variance)), f32), boxes.shape)
    return np.stack([boxes.reshape(-1), variances.reshape(-1)]).astype(f32)


@converts("PriorBoxClustered", (1,), inputs=(2, 2), attrs=PRIOR_BOX_CLUSTERED)
def prior_box_clustered_layer(ctx, layer, inputs):
    if ctx.value(inputs[0]) is None or ctx.value(inputs[1]) is None:
        prior_box_clustered_at_run_time(ctx, layer, inputs, _variance(layer))
        return
    value = prior_box_clustered(layer, *_sizes(ctx, layer, inputs))
    ctx.add_constant(ctx.out(layer), value)


def _aspect_ratios(layer: Layer) -> list[float]:
    ratios = [1.0]
    for ratio in layer.attrs["aspect_ratio"]:
        if ratio <= 0:
            raise B2SError(f"{layer.where()}: attribute aspect_ratio has {ratio:g}, not positive")
        if any(abs(ratio - seen) < 1e-6 for seen in ratios):
            continue
        ratios.append(ratio)
        if layer.attrs["flip"]:
            ratios.append(1.0 / ratio)
    return ratios


@dataclass(frozen=True)
class Prior:
    """One prior of every cell: its centre moved by ``x_shifts``/``y_shifts`` in turn (the
    sub-cells of a dense prior), its half sizes, and whether it is clipped on its own
    (dense priors are)."""

    x_shifts: tuple[np.float32, ...]
    y_shifts: tuple[np.float32, ...]
    half_w: np.float32
    half_h: np.float32
    clip: bool


def prior_box_settings(layer: Layer) -> dict:
    """PriorBox's attributes as the generators read them, validated."""
    attrs = layer.attrs
    settings = {
        "ratios": _aspect_ratios(layer),
        "step": attrs["step"],
        "offset": attrs["offset"],
        "min_sizes": attrs["min_size"],
        "scale_all": attrs["scale_all_sizes"],
    }
    if attrs["fixed_size"] and len(attrs["density"]) < len(attrs["fixed_size"]):
        raise B2SError(f"{layer.where()}: density needs one value per fixed_size")
    if any(ratio <= 0 for ratio in attrs["fixed_ratio"]):
        raise B2SError(f"{layer.where()}: attribute fixed_ratio values must be positive")
    return settings


def prior_specs(layer: Layer, min_sizes: list) -> list[Prior]:
    """The priors of one cell in OpenVINO's order, their float32 constants computed as its
    reference computes them (``min_sizes`` already scaled for ``scale_all_sizes=false``)."""
    f32 = np.float32
    attrs = layer.attrs
    ratios = _aspect_ratios(layer)
    max_sizes, fixed_sizes = attrs["max_size"], attrs["fixed_size"]
    fixed_ratios, densities = attrs["fixed_ratio"], attrs["density"]
    scale_all = attrs["scale_all_sizes"]
    min_max_order = attrs["min_max_aspect_ratios_order"] if layer.version == "opset8" else True
    priors: list[Prior] = []

    def plain(half_w, half_h) -> None:
        priors.append(Prior((), (), f32(half_w), f32(half_h), False))

    def dense(size, density, half_w, half_h) -> None:
        shift = int(size / density)
        start = (-f32(int(size) // 2), f32(shift / 2.0))
        for r in range(density):
            for c in range(density):
                x_shifts, y_shifts = (*start, f32(c * shift)), (*start, f32(r * shift))
                priors.append(Prior(x_shifts, y_shifts, f32(half_w), f32(half_h), True))

    for s, size in enumerate(fixed_sizes):
        density = int(densities[s])
        half = f32(int(size)) * f32(0.5)
        if fixed_ratios:
            for ratio in fixed_ratios:
                root = f32(np.sqrt(f32(ratio)))
                dense(size, density, f32(size) * f32(0.5) * root, f32(size) * f32(0.5) / root)
            continue
        if densities:
            dense(size, density, half, half)
        for ratio in ratios:
            if abs(ratio - 1.0) < 1e-6:
                continue
            root = f32(np.sqrt(f32(ratio)))
            dense(size, density, f32(size) * f32(0.5) * root, f32(size) * f32(0.5) / root)

    for index, size in enumerate(min_sizes):
        half = f32(size) * f32(0.5)
        plain(half, half)
        with_ratios = scale_all or index == len(min_sizes) - 1
        base = min_sizes[index if scale_all else 0]

        def ratio_priors(base=base) -> None:
            for ratio in ratios:
                if abs(ratio - 1.0) < 1e-6:
                    continue
                root = f32(np.sqrt(f32(ratio)))
                plain(f32(base) * f32(0.5) * root, f32(base) * f32(0.5) / root)

        def max_prior(index=index, size=size) -> None:
            if len(max_sizes) > index:
                half_max = f32(np.sqrt(f32(size) * f32(max_sizes[index]))) * f32(0.5)
                plain(half_max, half_max)

        if min_max_order:
            max_prior()
            if with_ratios:
                ratio_priors()
        else:
            if with_ratios:
                ratio_priors()
            max_prior()
    return priors


def prior_box(layer: Layer, layer_h: int, layer_w: int, image_h: int, image_w: int) -> np.ndarray:
    """PriorBox-1/8: [2, 4 * H * W * P], OpenVINO's prior order and float32 arithmetic."""
    f32 = np.float32
    settings = prior_box_settings(layer)
    step, offset, min_sizes = settings["step"], settings["offset"], settings["min_sizes"]
    if not settings["scale_all"]:  # MXNet-style priors: sizes and step relative to the height
        step = f32(image_h) / f32(layer_h) if step == -1 else f32(step) * f32(image_h)
        min_sizes = [f32(s) * f32(image_h) for s in min_sizes]
    inv_w, inv_h = f32(1) / f32(image_w), f32(1) / f32(image_h)
    cols = np.arange(layer_w, dtype=f32)[None, :]
    rows = np.arange(layer_h, dtype=f32)[:, None]
    if step == 0:
        center_x = (cols + f32(0.5)) * (f32(image_w) / f32(layer_w))
        center_y = (rows + f32(0.5)) * (f32(image_h) / f32(layer_h))
    else:
        center_x = (f32(offset) + cols) * f32(step)
        center_y = (f32(offset) + rows) * f32(step)
    center_x, center_y = np.broadcast_arrays(center_x, center_y)
    boxes = []
    for prior in prior_specs(layer, min_sizes):
        cx, cy = center_x, center_y
        for shift in prior.x_shifts:
            cx = cx + shift
        for shift in prior.y_shifts:
            cy = cy + shift
        box = [
            (cx - prior.half_w) * inv_w,
            (cy - prior.half_h) * inv_h,
            (cx + prior.half_w) * inv_w,
            (cy + prior.half_h) * inv_h,
        ]
        if prior.clip:
            box = [
                np.maximum(box[0], f32(0)),
                np.maximum(box[1], f32(0)),
                np.minimum(box[2], f32(1)),
                np.minimum(box[3], f32(1)),
            ]
        boxes.append(np.stack(box, axis=-1).astype(f32))
    stacked = np.stack(boxes, axis=2)  # [H, W, P, 4]
    if layer.attrs["clip"]:
        stacked = np.clip(stacked, f32(0), f32(1))
    variance = _variance(layer)
    variances = np.broadcast_to(np.asarray(variance * (4 // len(variance)), f32), stacked.shape)
    return np.stack([stacked.reshape(-1), variances.reshape(-1)]).astype(f32)


@converts("PriorBox", (1,), inputs=(2, 2), attrs=PRIOR_BOX_1)
@converts("PriorBox", (8,), inputs=(2, 2), attrs=PRIOR_BOX_8)
def prior_box_layer(ctx, layer, inputs):
    if ctx.value(inputs[0]) is None or ctx.value(inputs[1]) is None:
        settings = prior_box_settings(layer)
        if not settings["scale_all"]:
            raise B2SError(
                f"{layer.where()}: scale_all_sizes=false scales the priors by the image "
                "height, which must then be a constant to convert this layer"
            )
        priors = prior_specs(layer, settings["min_sizes"])
        prior_box_at_run_time(ctx, layer, inputs, _variance(layer), settings, priors)
        return
    value = prior_box(layer, *_sizes(ctx, layer, inputs))
    declared = layer.outputs[0].dims
    if (
        declared
        and declared[-1] is not None
        and declared[-1] < value.shape[1]
        and not prior_box_settings(layer)["scale_all"]
        and layer.attrs["max_size"]
    ):
        # With scale_all_sizes=false OpenVINO's shape formula leaves out the max_size
        # priors, which its CPU plugin still writes, cell after cell, up to the declared
        # width: the row's first values (its own layer tests use such a grid).
        value = np.ascontiguousarray(value[:, : declared[-1]])
    if declared and declared[-1] is not None and declared[-1] != value.shape[1]:
        # OpenVINO's shape formula and its own reference disagree for some attribute
        # combinations (several fixed_ratio values): there is no right answer to copy.
        raise B2SError(
            f"{layer.where()}: the attributes give {value.shape[1]} values per row "
            f"but the IR declares {declared[-1]}; OpenVINO itself is inconsistent "
            "here, so the layer cannot be converted"
        )
    ctx.add_constant(ctx.out(layer), value)
