"""Interpolate-1/4/11: every mode, coordinate transformation, nearest mode, and pads.

Interpolate-1 is read as OpenVINO upgrades it to Interpolate-4: align_corners selects the
'align_corners' coordinates; otherwise linear resizing of anything but the last two axes
of a 4-D input uses 'half_pixel', all else 'asymmetric'; nearest rounds the 'simple' way.

Measured against OpenVINO's CPU plugin: 'linear' and 'linear_onnx' are ONNX's linear Resize
and 'cubic' its cubic Resize (OpenVINO's CPU plugin ignores ``antialias`` for all three);
the pillow modes are ONNX's antialiased Resize (half-pixel centres, samples outside the
image excluded; bicubic with a = -0.5) whatever the coordinate mode says. Pads are zeros
added before resizing. Nearest neighbour with static sizes is computed here as an index
table per axis (OpenVINO's f32 coordinate arithmetic, so ties round the same way; this
also covers what ONNX's Resize lacks: ``tf_half_pixel_for_nn``, the 'simple' rounding) and
applied with Gather: pure data movement, bit-exact. With run-time sizes or scales it is
ONNX's nearest Resize, whose coordinate arithmetic is OpenVINO's in the four coordinate
modes ONNX names (bit-exact in the tests); the others (``tf_half_pixel_for_nn``, 'simple')
compute the same index tables at run time from run-time sizes (``nearest_at_run_time``);
with run-time scales they need static sizes.

onnxruntime's linear and cubic Resize take only some axes in one node; the others are
resized one by one on a 4-D view of the tensor (see ``_resize``), with run-time scales or
sizes sliced per axis at run time.
"""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.nearest_at_run_time import nearest_at_run_time
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
#: Coordinate transformations ONNX's Resize (opset >= 13) has under the same name.
_ONNX_COORDINATES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
_MODES_4 = ("nearest", "linear", "linear_onnx", "cubic")
_PADS = {"pads_begin": Ints(default=[]), "pads_end": Ints(default=[])}
_INTERPOLATE_4 = {
    "mode": Choice(allowed=_MODES_4, required=True),
    "shape_calculation_mode": Choice(allowed=("sizes", "scales"), required=True),
    "coordinate_transformation_mode": Choice(allowed=_COORDINATES, default="half_pixel"),
    "nearest_mode": Choice(allowed=_NEAREST_MODES, default="round_prefer_floor"),
    "antialias": Bool(default=False),
    "cube_coeff": Float(default=-0.75),
    **_PADS,
}
_INTERPOLATE_1 = {
    "axes": Ints(required=True, unique=True),
    "mode": Choice(allowed=("nearest", "linear", "cubic", "area"), required=True),
    "align_corners": Bool(default=False),
    "antialias": Bool(default=False),
    **_PADS,
}
_INTERPOLATE_11 = {
    **_INTERPOLATE_4,
    "mode": Choice(allowed=(*_MODES_4, "bilinear_pillow", "bicubic_pillow"), required=True),
}


def _padded(ctx: ConversionContext, layer: Layer, data: str, rank: int):
    """``data`` with OpenVINO's zero pads applied, and its shape (None where unknown)."""
    begins = (list(layer.attrs["pads_begin"]) + [0] * rank)[:rank]
    ends = (list(layer.attrs["pads_end"]) + [0] * rank)[:rank]
    if any(v < 0 for v in begins + ends):
        raise B2SError(f"{layer.where()}: attributes pads_begin/pads_end must not be negative")
    shape = ctx.shape(data) or (None,) * rank
    shape = tuple(
        None if d is None else d + b + e for d, b, e in zip(shape, begins, ends, strict=True)
    )
    if not any(begins) and not any(ends):
        return data, shape
    padded = ctx.one("Pad", [data, _i64(ctx, "pads", begins + ends)], mode="constant")
    ctx.shapes[padded] = shape
    return padded, shape


def _source_coordinate(x: np.ndarray, mode: str, scale: np.float32, in_dim: int, out_dim: int):
    """OpenVINO's coordinate transformation, in f32 as its CPU plugin computes it. An axis
    kept at its length (or at scale 1) maps every position to itself whatever the mode, as
    OpenVINO's reference (``GetOriginalCoordinate``) and CPU plugin do: without this,
    'tf_half_pixel_for_nn' would read x + 0.5, which ceil and round_prefer_ceil take to
    the next element (the channels of an Interpolate listing all four axes shifted by one)."""
    f32 = np.float32
    if scale == f32(1) or in_dim == out_dim:
        return x
    if mode == "half_pixel":
        return (x + f32(0.5)) / scale - f32(0.5)
    if mode == "pytorch_half_pixel":
        return (x + f32(0.5)) / scale - f32(0.5) if out_dim > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + f32(0.5)) / scale
    if out_dim == 1:
        return np.zeros_like(x)
    return x * f32(in_dim - 1) / f32(out_dim - 1)


def _nearest_index(coordinate: np.ndarray, mode: str, scale: np.float32) -> np.ndarray:
    floor = np.floor(coordinate)
    if mode == "round_prefer_floor":
        return np.where(coordinate == floor + np.float32(0.5), floor, np.round(coordinate))
    if mode == "round_prefer_ceil":
        return np.where(
            coordinate == floor + np.float32(0.5), np.ceil(coordinate), np.round(coordinate)
        )
    if mode == "floor":
        return floor
    if mode == "ceil":
        return np.ceil(coordinate)
    return np.ceil(coordinate) if scale < 1 else np.trunc(coordinate)


def _integer_upsampling(index: np.ndarray) -> bool:
    """Whether ``index`` repeats every source position ``k`` times, in order (an integer
    upsampling, which onnxruntime's nearest Resize computes exactly: ``floor(x / k)`` with
    ``k`` a small integer is exact in float32 for any size below 2^23 / k)."""
    if index.size == 0:
        return False
    size = int(index[-1]) + 1
    if index.size % size or index.size < size or index.size >= 1 << 22:
        return False
    return bool(np.array_equal(index, np.arange(index.size) // (index.size // size)))


def _nearest_by_gather(ctx, layer, data, shape, axes, sizes, scales, coordinates, nearest_mode):
    """Each resized axis as a Gather of precomputed source indices (bit-exact). Axes whose
    indices are the identity (an unchanged axis listed in ``axes``, as OpenVINO's ONNX
    frontend lists all four) cost a copy of the tensor each and are skipped. When every
    resized axis of a 4-D tensor repeats each source position k times (integer upsampling,
    whatever the coordinate mode that gave it), onnxruntime's nearest Resize moves the same
    elements 7-18x faster than the Gathers (1 thread: [1,48,26,26] x2 0.43 -> 0.023 ms,
    [1,16,128,224] x2 6.3 -> 0.93 ms)."""
    gathers = []
    for position, axis in enumerate(axes):
        in_dim, out_dim = shape[axis], sizes[position]
        scale = np.float32(scales[position])
        x = np.arange(out_dim, dtype=np.float32)
        source = _source_coordinate(x, coordinates, scale, in_dim, out_dim)
        index = _nearest_index(source, nearest_mode, scale)
        index = np.clip(index, 0, in_dim - 1).astype(np.int64)
        if in_dim != out_dim or not np.array_equal(index, np.arange(in_dim)):
            gathers.append((axis, index))
    if gathers and len(shape) == 4 and all(_integer_upsampling(index) for _, index in gathers):
        scales_4d = np.ones(4, np.float32)
        for axis, index in gathers:
            scales_4d[axis] = index.size // (int(index[-1]) + 1)
        ctx.one(
            "Resize",
            [data, "", ctx.const("scales", scales_4d)],
            ctx.out(layer),
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
        return
    current = data
    for position, (axis, index) in enumerate(gathers):
        last = position == len(gathers) - 1
        current = ctx.one(
            "Gather",
            [current, ctx.const("indices", index)],
            ctx.out(layer) if last else None,
            axis=axis,
        )
    if not gathers:
        ctx.one("Identity", [current], ctx.out(layer))


def _static_sizes_and_scales(ctx, layer, shape, axes, sizes_in, scales_in, calculation):
    """Output sizes and scales on ``axes`` when known at conversion time: from a constant
    ``sizes`` input, else from the declared output shape (run-time sizes or scales)."""
    out_shape = ctx.shape(ctx.out(layer))
    sizes = None if out_shape is None else [out_shape[a] for a in axes]
    if sizes is not None and any(s is None for s in sizes):
        sizes = None
    targets = ctx.value(sizes_in) if calculation == "sizes" else None
    if targets is not None:
        targets = [int(v) for v in targets.reshape(-1)]
        if len(targets) != len(axes) or any(v < 0 for v in targets):
            raise B2SError(
                f"{layer.where()}: sizes {targets} must hold {len(axes)} non-negative values "
                f"(one per axis in {axes})"
            )
        if sizes is not None and sizes != targets:
            declared = [out_shape[a] for a in axes]
            raise B2SError(
                f"{layer.where()}: output port {layer.outputs[0].id} declares sizes "
                f"{declared} on axes {axes}, but the sizes input gives {targets}: the IR "
                "contradicts itself"
            )
        sizes = targets
    scales = None
    if calculation == "scales" and scales_in is not None and ctx.value(scales_in) is not None:
        scales = [float(v) for v in ctx.value(scales_in).reshape(-1).astype(np.float32)]
    elif sizes is not None and all(shape[a] is not None for a in axes):
        scales = [np.float32(s) / np.float32(shape[a]) for s, a in zip(sizes, axes, strict=True)]
    return sizes, scales


def _native_axes(rank: int, mode: str) -> frozenset[int]:
    """Axes onnxruntime's linear/cubic Resize (antialiased or not) resizes in one node
    whatever the scales: every axis of a 2-D input (and of a 3-D one, linear), the last two
    of a 4-D one, the last three of a 5-D one (linear). Elsewhere it wants scale 1."""
    if rank == 2 or (rank == 3 and mode == "linear"):
        return frozenset(range(rank))
    if rank == 4 or (rank == 5 and mode == "linear"):
        return frozenset(range(2, rank))
    return frozenset()


def _resize(ctx, layer, data, rank, axes, operands, **attrs):
    """ONNX Resize on ``axes`` (the attribute needs opset 18). onnxruntime's linear and
    cubic Resize take only some axes of some ranks (``_native_axes``), so the others run
    one at a time, each on a 4-D view ``[1, before, axis, after]`` of the tensor (a free
    Reshape) resized on its third axis, which onnxruntime takes for any scale. Linear and
    cubic interpolation (antialiased too) are separable, and every coordinate mode maps an
    axis by its own sizes and scale alone, so this is the same result up to float rounding.
    Operands known only at run time are sliced per axis at run time."""
    if ctx.opset < 18:
        raise B2SError(f"{layer.where()}: Interpolate needs target opset >= 18 (Resize axes)")
    native = _native_axes(rank, attrs["mode"])
    if attrs["mode"] == "nearest" or all(axis in native for axis in axes):
        ctx.one("Resize", [data, "", *operands], ctx.out(layer), axes=axes, **attrs)
        return
    inner = [position for position, axis in enumerate(axes) if axis in native]
    outer = [position for position, axis in enumerate(axes) if axis not in native]
    dims = list(ctx.shape(data) or [None] * rank)
    current = data
    for step, position in enumerate(outer):
        last = step == len(outer) - 1 and not inner
        picked = [_pick(ctx, t, [position]) for t in operands]
        current = _resize_axis_as_4d(
            ctx, current, dims, axes[position], picked, ctx.out(layer) if last else None, attrs
        )
        sizes = ctx.value(picked[1]) if len(picked) > 1 and picked[1] else None
        dims[axes[position]] = None if sizes is None else int(sizes.reshape(-1)[0])
    if inner:
        picked = [_pick(ctx, t, inner) for t in operands]
        kept = [axes[position] for position in inner]
        ctx.one("Resize", [current, "", *picked], ctx.out(layer), axes=kept, **attrs)


def _pick(ctx: ConversionContext, tensor: str, positions: list[int]) -> str:
    """The entries ``positions`` of a 1-D scales/sizes operand ('' stays absent)."""
    if not tensor:
        return tensor
    value = ctx.value(tensor)
    if value is not None:
        return ctx.const("picked", value.reshape(-1)[positions])
    return ctx.one("Gather", [tensor, _i64(ctx, "positions", positions)], axis=0)


def _resize_axis_as_4d(ctx, data, dims, axis, operands, output, attrs) -> str:
    """Resize of one ``axis`` of ``data`` (dims ``dims``, None where unknown) as the third
    axis of the 4-D view [1, before, axis, after]; the view's shapes are constants when the
    dims are known, else computed from the tensor's shape at run time."""
    rank = len(dims)
    before, after = dims[:axis], dims[axis + 1 :]
    if all(d is not None for d in dims):
        view = _i64(ctx, "view", [1, int(np.prod(before)), dims[axis], int(np.prod(after))])
        shape = None
    else:
        shape = ctx.one("Shape", [data])
        parts = [_i64(ctx, "one", [1])]
        for start, stop in ((0, axis), (axis + 1, rank)):
            known = dims[start:stop]
            if all(d is not None for d in known):
                parts.append(_i64(ctx, "size", [int(np.prod(known))]))
            else:
                piece = _shape_slice(ctx, shape, start, stop)
                parts.append(ctx.reduce("ReduceProd", piece, [0], True))
            if start == 0:
                parts.append(_shape_slice(ctx, shape, axis, axis + 1))
        view = ctx.one("Concat", parts, axis=0)
    viewed = ctx.one("Reshape", [data, view])
    resized = ctx.one("Resize", [viewed, "", *operands], axes=[2], **attrs)
    new_size = ctx.value(operands[1]) if len(operands) > 1 and operands[1] else None
    if shape is None and new_size is not None:
        target = [*before, int(new_size.reshape(-1)[0]), *after]
        back = _i64(ctx, "shape", target)
    else:
        shape = shape or ctx.one("Shape", [data])
        pieces = [
            _shape_slice(ctx, shape, 0, axis) if axis else None,
            _shape_slice(ctx, ctx.one("Shape", [resized]), 2, 3),
            _shape_slice(ctx, shape, axis + 1, rank) if axis + 1 < rank else None,
        ]
        back = ctx.one("Concat", [p for p in pieces if p], axis=0)
    return ctx.one("Reshape", [resized, back], output)


def _shape_slice(ctx: ConversionContext, shape: str, start: int, stop: int) -> str:
    return ctx.one("Slice", [shape, _i64(ctx, "start", [start]), _i64(ctx, "stop", [stop])])


def _convert(ctx, layer, data, axes, sizes_in, scales_in, settings=None):
    """``settings`` overrides the layer's attributes (for Interpolate-1's upgrade)."""
    values = {**layer.attrs, **(settings or {})}
    rank = ctx.rank(layer, data)
    padded, shape = _padded(ctx, layer, data, rank)
    calculation = values["shape_calculation_mode"]
    mode = values["mode"]
    coordinates = values["coordinate_transformation_mode"]
    nearest_mode = values["nearest_mode"]
    sizes, scales = _static_sizes_and_scales(
        ctx, layer, shape, axes, sizes_in, scales_in, calculation
    )
    static = sizes is not None and scales is not None and all(shape[a] is not None for a in axes)
    if mode == "nearest" and (
        static or coordinates not in _ONNX_COORDINATES or nearest_mode == "simple"
    ):
        if not static and calculation == "sizes":
            nearest_at_run_time(
                ctx, padded, axes, sizes_in, coordinates, nearest_mode, ctx.out(layer)
            )
            return
        if not static:
            raise B2SError(
                f"{layer.where()}: nearest_mode '{nearest_mode}' with coordinate mode "
                f"'{coordinates}' and run-time scales needs static input and output sizes"
            )
        _nearest_by_gather(
            ctx, layer, padded, shape, axes, sizes, scales, coordinates, nearest_mode
        )
        return
    if static:
        # OpenVINO's ONNX frontend lists every axis, the unscaled batch and channels too;
        # an axis kept at its size with scale 1 maps every coordinate mode to itself, so
        # dropping it changes nothing and spares onnxruntime axes it cannot resize.
        moved = [i for i, a in enumerate(axes) if not (sizes[i] == shape[a] and scales[i] == 1.0)]
        if not moved:
            ctx.one("Identity", [padded], ctx.out(layer))
            return
        axes = [axes[i] for i in moved]
        if calculation == "sizes" or not _onnx_sizes_agree(shape, axes, moved, sizes, scales):
            operands = ["", _i64(ctx, "sizes", [sizes[i] for i in moved])]
        else:
            operands = [ctx.const("scales", np.asarray([scales[i] for i in moved], np.float32))]
    elif calculation == "sizes":
        operands = ["", ctx.int64(sizes_in)]
    else:
        operands = [ctx.one("Cast", [scales_in], to=1)]
    if mode == "nearest":
        attrs = {
            "mode": "nearest",
            "coordinate_transformation_mode": coordinates,
            "nearest_mode": nearest_mode,
        }
    elif mode in ("linear", "linear_onnx", "cubic"):
        if coordinates not in _ONNX_COORDINATES:
            raise B2SError(
                f"{layer.where()}: coordinate mode '{coordinates}' is defined for nearest only"
            )
        attrs = {
            "mode": "cubic" if mode == "cubic" else "linear",
            "coordinate_transformation_mode": coordinates,
        }
        if mode == "cubic":
            attrs["cubic_coeff_a"] = values["cube_coeff"]
    else:
        attrs = {
            "mode": "linear" if mode == "bilinear_pillow" else "cubic",
            "coordinate_transformation_mode": "half_pixel",
            "antialias": 1,
            "exclude_outside": 1,
        }
        if mode == "bicubic_pillow":
            attrs["cubic_coeff_a"] = -0.5
    _resize(ctx, layer, padded, rank, axes, operands, **attrs)


def _onnx_sizes_agree(
    shape: tuple, axes: list[int], moved: list[int], sizes: list[int], scales: list[float]
) -> bool:
    """Whether ONNX's Resize given ``scales`` makes the sizes OpenVINO declares on ``axes``
    (entries ``moved`` of ``sizes`` and ``scales``). ONNX takes ``floor(in * scale)``;
    OpenVINO's shape inference ``in * (scale + 1e-6)``, so a rounded scale (1.333333 of 6:
    7.999998) gives it 8 where ONNX gives 7. Where they disagree the Resize is given the
    sizes instead (its scale then out / in: coordinates within float32 rounding of
    OpenVINO's)."""
    for axis, i in zip(axes, moved, strict=True):
        product = np.float32(shape[axis]) * np.float32(scales[i])
        if int(np.floor(product)) != sizes[i]:
            return False
    return True


def _axes(ctx: ConversionContext, layer: Layer, tensor: str | None, rank: int) -> list[int]:
    if tensor is None:
        return list(range(rank))
    values = [int(a) for a in ctx.require_value(layer, tensor, "axes").reshape(-1)]
    if any(not -rank <= a < rank for a in values):
        raise B2SError(f"{layer.where()}: axes {values} out of range for rank {rank}")
    return [a % rank for a in values]


@converts("Interpolate", (1,), inputs=(2, 2), attrs=_INTERPOLATE_1)
def interpolate_1(ctx, layer, inputs):
    rank = ctx.rank(layer, inputs[0])
    axes = layer.attrs["axes"]
    if any(not 0 <= a < rank for a in axes):
        raise B2SError(f"{layer.where()}: attribute axes={axes} out of range for rank {rank}")
    mode = layer.attrs["mode"]
    if mode == "area":
        raise B2SError(f"{layer.where()}: attribute mode='area' is not supported")
    if layer.attrs["align_corners"]:
        coordinates = "align_corners"
    elif mode == "linear" and not (rank == 4 and sorted(axes) == [2, 3]):
        coordinates = "half_pixel"
    else:
        coordinates = "asymmetric"
    settings = {
        "mode": "linear_onnx" if mode == "linear" else mode,
        "shape_calculation_mode": "sizes",
        "coordinate_transformation_mode": coordinates,
        "nearest_mode": "simple",
        "cube_coeff": -0.75,
    }
    _convert(ctx, layer, inputs[0], axes, inputs[1], None, settings)


@converts("Interpolate", (4,), inputs=(3, 4), attrs=_INTERPOLATE_4)
def interpolate_4(ctx, layer, inputs):
    rank = ctx.rank(layer, inputs[0])
    axes = _axes(ctx, layer, inputs[3] if len(inputs) > 3 else None, rank)
    _convert(ctx, layer, inputs[0], axes, inputs[1], inputs[2])


@converts("Interpolate", (11,), inputs=(2, 3), attrs=_INTERPOLATE_11)
def interpolate_11(ctx, layer, inputs):
    rank = ctx.rank(layer, inputs[0])
    axes = _axes(ctx, layer, inputs[2] if len(inputs) > 2 else None, rank)
    _convert(ctx, layer, inputs[0], axes, inputs[1], inputs[1])
