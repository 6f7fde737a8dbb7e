"""Interpolate-1/4/11 as ONNX Resize (opset >= 18 for the axes attribute)."""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Choice, Float, Ints
from b2s_onnx.ir.reader import Layer

_COORDINATES = (
    "half_pixel",
    "pytorch_half_pixel",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "align_corners",
)


_PADS = {"pads_begin": Ints(default=[0]), "pads_end": Ints(default=[0])}
INTERPOLATE_1 = {
    "axes": Ints(required=True, unique=True, minimum=0),
    "mode": Choice(required=True, allowed=("nearest", "linear", "cubic", "area", "linear_onnx")),
    "align_corners": Bool(default=False),
    "antialias": Bool(default=False),
    **_PADS,
}
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
INTERPOLATE_4 = {
    "mode": Choice(required=True, allowed=("nearest", "linear", "linear_onnx", "cubic")),
    "shape_calculation_mode": Choice(required=True, allowed=("sizes", "scales")),
    "coordinate_transformation_mode": Choice(allowed=_COORDINATES, default="half_pixel"),
    "nearest_mode": Choice(allowed=_NEAREST_MODES, default="round_prefer_floor"),
    "antialias": Bool(default=False),
    "cube_coeff": Float(default=-0.75),
    **_PADS,
}
INTERPOLATE_11 = {
    **INTERPOLATE_4,
    "mode": Choice(
        required=True,
        allowed=("nearest", "linear", "linear_onnx", "cubic", "bilinear_pillow", "bicubic_pillow"),
    ),
}


def _no_pads(layer: Layer) -> None:
    if any(layer.attrs["pads_begin"]) or any(layer.attrs["pads_end"]):
        raise B2SError(f"{layer.where()}: Interpolate with pads is not supported")


def _resize(
    ctx: ConversionContext,
    layer: Layer,
    data: str,
    axes: list[int],
    *,
    sizes: str | None = None,
    scales: str | None = None,
    mode: str,
    coordinates: str,
    nearest_mode: str = "round_prefer_floor",
    cubic: float = -0.75,
    antialias: bool = False,
) -> None:
    if ctx.opset < 18:
        raise B2SError(f"{layer.where()}: Interpolate needs target opset >= 18 (Resize axes)")
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates, "axes": axes}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    if mode == "cubic":
        attrs["cubic_coeff_a"] = cubic
    if antialias:
        attrs["antialias"] = 1
    operands = [data, "", scales or "", sizes or ""]
    while operands and operands[-1] == "":
        operands.pop()
    ctx.one("Resize", operands, ctx.out(layer), **attrs)


def _sizes_and_scales(ctx, layer, data, axes):
    """The static output sizes on ``axes`` (from the IR) and the scales they imply."""
    in_shape, out_shape = ctx.shape(data), ctx.shape(ctx.out(layer))
    if in_shape is None or out_shape is None:
        return None, None
    sizes = [out_shape[a] for a in axes]
    ins = [in_shape[a] for a in axes]
    if any(v is None for v in sizes + ins):
        return None, None
    return sizes, [s / i for s, i in zip(sizes, ins, strict=True)]


def _simple_nearest(layer, scales) -> str:
    """OpenVINO's 'simple' rounding: floor when upsampling, ceil when downsampling."""
    if scales is None:
        raise B2SError(f"{layer.where()}: nearest_mode 'simple' needs static shapes")
    if all(s >= 1 for s in scales):
        return "floor"
    if all(s < 1 for s in scales):
        return "ceil"
    raise B2SError(f"{layer.where()}: nearest_mode 'simple' mixing up- and downsampling")


@converts("Interpolate", (1,), inputs=(2, 2), attrs=INTERPOLATE_1)
def interpolate1(ctx, layer, inputs):
    _no_pads(layer)
    data = inputs[0]
    rank = ctx.rank(layer, data)
    axes = layer.attrs["axes"]
    if any(a >= rank for a in axes):
        raise B2SError(f"{layer.where()}: attribute axes={axes} out of range for rank {rank}")
    mode = layer.attrs["mode"]
    if mode == "area" or (mode == "linear" and rank > 4):
        raise B2SError(f"{layer.where()}: mode '{mode}' for rank {rank} is not supported")
    if layer.attrs["antialias"]:
        raise B2SError(f"{layer.where()}: antialias is not supported for Interpolate-1")
    _, scales = _sizes_and_scales(ctx, layer, data, axes)
    align = layer.attrs["align_corners"]
    onnx_mode = "nearest" if mode == "nearest" else ("cubic" if mode == "cubic" else "linear")
    # OpenVINO's own Interpolate-1 -> Interpolate-4 mapping decides the coordinate mode.
    if align:
        coordinates = "align_corners"
    elif onnx_mode == "linear" and not (rank == 4 and sorted(axes) == [2, 3]):
        coordinates = "half_pixel"
    else:
        coordinates = "asymmetric"
    nearest = _simple_nearest(layer, scales) if onnx_mode == "nearest" else "round_prefer_floor"
    _resize(
        ctx,
        layer,
        data,
        axes,
        sizes=ctx.int64(inputs[1]),
        mode=onnx_mode,
        coordinates=coordinates,
        nearest_mode=nearest,
    )


@converts("Interpolate", (4,), inputs=(3, 4), attrs=INTERPOLATE_4)
@converts("Interpolate", (11,), inputs=(2, 3), attrs=INTERPOLATE_11)
def interpolate4(ctx, layer, inputs):
    _no_pads(layer)
    data = inputs[0]
    rank = ctx.rank(layer, data)
    mode = layer.attrs["mode"]
    calc = layer.attrs["shape_calculation_mode"]
    coordinates = layer.attrs["coordinate_transformation_mode"]
    nearest_mode = layer.attrs["nearest_mode"]
    if layer.version == "opset4":
        sizes_in, scales_in = inputs[1], inputs[2]
        axes_in = inputs[3] if len(inputs) > 3 else None
    else:
        sizes_in = scales_in = inputs[1]
        axes_in = inputs[2] if len(inputs) > 2 else None
    if axes_in is not None:
        given = [int(a) for a in ctx.require_value(layer, axes_in, "axes").reshape(-1)]
        if any(not -rank <= a < rank for a in given) or len({a % rank for a in given}) != len(
            given
        ):
            raise B2SError(f"{layer.where()}: axes {given} are not distinct axes of rank {rank}")
        axes = [a % rank for a in given]
    else:
        axes = list(range(rank))
    _, scales = _sizes_and_scales(ctx, layer, data, axes)
    if mode in ("bilinear_pillow", "bicubic_pillow"):
        raise B2SError(f"{layer.where()}: mode '{mode}' has no ONNX equivalent")
    if mode == "linear" and (scales is None or any(s < 1 for s in scales)):
        raise B2SError(f"{layer.where()}: mode 'linear' is only exact in ONNX when upsampling")
    onnx_mode = {"linear_onnx": "linear"}.get(mode, mode)
    if nearest_mode == "simple":
        nearest_mode = _simple_nearest(layer, scales)
    kwargs = {
        "mode": onnx_mode,
        "coordinates": coordinates,
        "nearest_mode": nearest_mode,
        "cubic": layer.attrs["cube_coeff"],
        # Anti-aliasing only shapes linear and cubic kernels (onnxruntime refuses it else).
        "antialias": layer.attrs["antialias"] and onnx_mode in ("linear", "cubic"),
    }
    given = ctx.value(sizes_in if calc == "sizes" else scales_in)
    if given is not None and not (given.reshape(-1) > 0).all():
        raise B2SError(f"{layer.where()}: {calc} {given.reshape(-1).tolist()} must be positive")
    if calc == "sizes":
        _resize(ctx, layer, data, axes, sizes=ctx.int64(sizes_in), **kwargs)
    else:
        scales_tensor = ctx.one("Cast", [scales_in], to=1)
        _resize(ctx, layer, data, axes, scales=scales_tensor, **kwargs)
