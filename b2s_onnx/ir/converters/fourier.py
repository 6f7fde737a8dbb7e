"""Fourier transforms: DFT, IDFT, RDFT, IRDFT, STFT.

OpenVINO stores a complex tensor as a real one with a last dimension of 2 (real,
imaginary). Each transformed axis becomes a product with constant cosine and sine matrices
(the axis moved last, a MatMul, moved back), which handles any signal size: a shorter
signal drops input rows, a longer one (zero padding) only changes the period. Exact up to
float rounding; sizes along transformed axes must be static.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool
from b2s_onnx.ir.reader import Layer


def _matrices(
    inputs: int, period: int, outputs: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2*pi*j*k/period for input index j and output index k."""
    j = np.arange(inputs, dtype=np.float64)[:, None]
    k = np.arange(outputs, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * ((j * k) % period) / period
    cos, sin = np.cos(angle), np.sin(angle)
    if weights is not None:
        cos, sin = cos * weights[:, None], sin * weights[:, None]
    return cos.astype(np.float32), sin.astype(np.float32)


class _Signal:
    """A complex signal as separate real and imaginary tensors (imaginary None: zero)."""

    def __init__(self, ctx: ConversionContext, real: str, imag: str | None, rank: int):
        self.ctx, self.real, self.imag, self.rank = ctx, real, imag, rank

    def _along(self, tensor: str, axis: int, length: int, count: int, matrix: np.ndarray) -> str:
        ctx = self.ctx
        if length > count:
            tensor = ctx.one(
                "Slice",
                [
                    tensor,
                    int64s(ctx, "start", [0]),
                    int64s(ctx, "stop", [count]),
                    int64s(ctx, "axis", [axis]),
                ],
            )
        last = self.rank - 1
        if axis == last:
            return ctx.one("MatMul", [tensor, ctx.const("basis", matrix)])
        perm = list(range(self.rank))
        perm[axis], perm[last] = last, axis
        moved = ctx.one("Transpose", [tensor], perm=perm)
        product = ctx.one("MatMul", [moved, ctx.const("basis", matrix)])
        return ctx.one("Transpose", [product], perm=perm)

    def transform(
        self,
        axis: int,
        length: int,
        period: int,
        outputs: int,
        *,
        inverse: bool,
        weights: np.ndarray | None = None,
        real_only: bool = False,
    ) -> None:
        """y_k = sum_j x_j exp(-+2 pi i j k / period), over the first min(length, period)
        inputs (weights scale input rows; inverse divides by the period)."""
        count = min(length, period)
        cos, sin = _matrices(count, period, outputs, None if weights is None else weights[:count])
        if inverse:
            cos, sin = cos / period, sin / period
        ctx = self.ctx
        re_cos = self._along(self.real, axis, length, count, cos)
        re_sin = self._along(self.real, axis, length, count, sin)
        if self.imag is None:  # a real signal
            self.real = re_cos
            if not real_only:
                self.imag = re_sin if inverse else ctx.one("Neg", [re_sin])
            return
        im_sin = self._along(self.imag, axis, length, count, sin)
        combine = "Sub" if inverse else "Add"
        real = ctx.one(combine, [re_cos, im_sin])
        if real_only:
            self.real, self.imag = real, None
            return
        im_cos = self._along(self.imag, axis, length, count, cos)
        imag = ctx.one("Add" if inverse else "Sub", [im_cos, re_sin])
        self.real, self.imag = real, imag

    def stacked(self, output: str) -> str:
        ctx = self.ctx
        last = int64s(ctx, "last", [-1])
        parts = [ctx.one("Unsqueeze", [self.real, last])]
        imag = (
            self.imag
            if self.imag is not None
            else ctx.one("Mul", [self.real, ctx.const("zero", np.zeros((), np.float32))])
        )
        parts.append(ctx.one("Unsqueeze", [imag, last]))
        return ctx.one("Concat", parts, output, axis=-1)


def _split_complex(ctx: ConversionContext, data: str, rank: int) -> _Signal:
    """[..., 2] (real, imaginary) as two tensors."""
    real, imag = (ctx.one("Gather", [data, int64s(ctx, "part", i)], axis=rank - 1) for i in (0, 1))
    return _Signal(ctx, real, imag, rank - 1)


def _axes_and_sizes(
    ctx: ConversionContext, layer: Layer, inputs: list[str], signal_rank: int, shape: Sequence
) -> tuple[list[int], list[int]]:
    """The transformed axes (normalised) and their signal sizes (-1: the input's size)."""
    raw = [int(a) for a in ctx.require_value(layer, inputs[1], "the axes input").reshape(-1)]
    axes = []
    for axis in raw:
        if not -signal_rank <= axis < signal_rank:
            raise B2SError(f"{layer.where()}: input 'axes' = {axis} is outside rank {signal_rank}")
        axes.append(axis + signal_rank if axis < 0 else axis)
    if len(set(axes)) != len(axes):
        raise B2SError(f"{layer.where()}: input 'axes' repeats an axis: {raw}")
    for axis in axes:
        if shape[axis] is None:
            raise B2SError(f"{layer.where()}: dimension {axis} is transformed and must be static")
    sizes = [-1] * len(axes)
    if len(inputs) > 2:
        sizes = [
            int(s) for s in ctx.require_value(layer, inputs[2], "the signal_size input").reshape(-1)
        ]
        if len(sizes) != len(axes):
            raise B2SError(
                f"{layer.where()}: input 'signal_size' has {len(sizes)} values for {len(axes)} axes"
            )
    return axes, sizes


def _shape(ctx: ConversionContext, layer: Layer, data: str) -> tuple:
    shape = ctx.shape(data)
    if shape is None:
        raise B2SError(f"{layer.where()}: the shape of input 'data' is unknown")
    return shape


@converts("DFT", (7,), inputs=(2, 3), attrs={})
@converts("IDFT", (7,), inputs=(2, 3), attrs={})
def dft(ctx, layer, inputs):
    shape = _shape(ctx, layer, inputs[0])
    rank = len(shape)
    axes, sizes = _axes_and_sizes(ctx, layer, inputs, rank - 1, shape)
    signal = _split_complex(ctx, inputs[0], rank)
    for axis, size in zip(axes, sizes, strict=True):
        period = shape[axis] if size == -1 else size
        signal.transform(axis, shape[axis], period, period, inverse=layer.type == "IDFT")
    signal.stacked(ctx.out(layer))


@converts("RDFT", (9,), inputs=(2, 3), attrs={})
def rdft(ctx, layer, inputs):
    """The last listed axis keeps its first size//2 + 1 outputs (the rest mirror them)."""
    shape = _shape(ctx, layer, inputs[0])
    axes, sizes = _axes_and_sizes(ctx, layer, inputs, len(shape), shape)
    signal = _Signal(ctx, inputs[0], None, len(shape))
    order = [*zip(axes, sizes, strict=True)]
    last_axis, last_size = order.pop()
    period = shape[last_axis] if last_size == -1 else last_size
    signal.transform(last_axis, shape[last_axis], period, period // 2 + 1, inverse=False)
    for axis, size in order:
        period = shape[axis] if size == -1 else size
        signal.transform(axis, shape[axis], period, period, inverse=False)
    signal.stacked(ctx.out(layer))


@converts("IRDFT", (9,), inputs=(2, 3), attrs={})
def irdft(ctx, layer, inputs):
    """Inverse over every listed axis but the last, then a real inverse over the last from
    its half spectrum: the mirrored half doubles the weight of the inner frequencies."""
    shape = _shape(ctx, layer, inputs[0])
    rank = len(shape)
    axes, sizes = _axes_and_sizes(ctx, layer, inputs, rank - 1, shape)
    signal = _split_complex(ctx, inputs[0], rank)
    order = [*zip(axes, sizes, strict=True)]
    last_axis, last_size = order.pop()
    for axis, size in order:
        period = shape[axis] if size == -1 else size
        signal.transform(axis, shape[axis], period, period, inverse=True)
    period = 2 * (shape[last_axis] - 1) if last_size == -1 else last_size
    used = min(shape[last_axis], period // 2 + 1)
    weights = np.full(used, 2.0)
    weights[0] = 1.0
    if period % 2 == 0 and used == period // 2 + 1:
        weights[-1] = 1.0
    signal.transform(
        last_axis,
        shape[last_axis],
        period,
        period,
        inverse=True,
        weights=np.concatenate([weights, np.zeros(max(0, period - used))]),
        real_only=True,
    )
    ctx.one("Identity", [signal.real], ctx.out(layer))


def _static_scalar(ctx: ConversionContext, layer: Layer, tensor: str, what: str) -> int:
    value = int(ctx.require_value(layer, tensor, f"input '{what}'").reshape(-1)[0])
    if value <= 0:
        raise B2SError(f"{layer.where()}: input '{what}' = {value} must be positive")
    return value


@converts("STFT", (15,), inputs=(4, 4), attrs={"transpose_frames": Bool(required=True)})
def stft(ctx, layer, inputs):
    """Frames are gathered with a constant index matrix, multiplied by the window (centred
    in the frame when shorter) and transformed like RDFT along the frame."""
    signal, window, size_input, step_input = inputs
    shape = _shape(ctx, layer, signal)
    window_shape = _shape(ctx, layer, window)
    size = _static_scalar(ctx, layer, size_input, "frame_size")
    step = _static_scalar(ctx, layer, step_input, "frame_step")
    length, window_length = shape[-1], window_shape[-1]
    if length is None or window_length is None:
        raise B2SError(f"{layer.where()}: the signal and window lengths must be static")
    if size > length or window_length > size:
        raise B2SError(
            f"{layer.where()}: frame_size {size} must lie between the window length "
            f"{window_length} and the signal length {length}"
        )
    frames = (length - size) // step + 1
    starts = np.arange(frames, dtype=np.int64)[:, None] * step
    index = starts + np.arange(size, dtype=np.int64)[None, :]
    framed = ctx.one("Gather", [signal, ctx.const("frames", index)], axis=len(shape) - 1)
    if window_length < size:
        before = (size - window_length) // 2
        window = ctx.one(
            "Pad", [window, int64s(ctx, "pads", [before, size - window_length - before])]
        )
    windowed = ctx.one("Mul", [framed, window])
    rank = len(shape) + 1
    transformed = _Signal(ctx, windowed, None, rank)
    transformed.transform(rank - 1, size, size, size // 2 + 1, inverse=False)
    if not layer.attrs["transpose_frames"]:
        transformed.stacked(ctx.out(layer))
        return
    stacked = transformed.stacked(ctx.tmp("stft"))
    perm = list(range(rank + 1))
    perm[-3], perm[-2] = perm[-2], perm[-3]
    ctx.one("Transpose", [stacked], ctx.out(layer), perm=perm)


@converts(
    "ISTFT",
    (16,),
    inputs=(4, 5),
    attrs={"center": Bool(required=True), "normalized": Bool(required=True)},
)
def istft(ctx, layer, inputs):
    """Each frame's real inverse transform, windowed, is overlap-added (ScatterElements
    'add' at constant positions) and divided by the overlap-added squared window where that
    is non-zero; 'center' drops frame_size // 2 samples at both ends, 'normalized' scales by
    sqrt(frame_size), and signal_length cuts or zero-pads the result."""
    data, window, size_input, step_input = inputs[:4]
    if ctx.opset < 16:
        raise B2SError(
            f"{layer.where()}: needs ONNX opset 16 or later (converting to opset {ctx.opset})"
        )
    shape = _shape(ctx, layer, data)
    window_length = _shape(ctx, layer, window)[-1]
    size = _static_scalar(ctx, layer, size_input, "frame_size")
    step = _static_scalar(ctx, layer, step_input, "frame_step")
    bins, frames = shape[-3], shape[-2]
    if bins is None or frames is None or window_length is None:
        raise B2SError(f"{layer.where()}: the frequency, frame and window sizes must be static")
    batched = len(shape) == 4
    rank = len(shape)
    perm = list(range(rank))
    perm[-3], perm[-2] = perm[-2], perm[-3]
    spectrum = _split_complex(ctx, ctx.one("Transpose", [data], perm=perm), rank)
    period = size
    used = min(bins, period // 2 + 1)
    weights = np.full(used, 2.0)
    weights[0] = 1.0
    if period % 2 == 0 and used == period // 2 + 1:
        weights[-1] = 1.0
    weights = np.concatenate([weights, np.zeros(max(0, period - used))])
    spectrum.transform(
        rank - 2, bins, period, period, inverse=True, weights=weights, real_only=True
    )
    if window_length < size:
        before = (size - window_length) // 2
        window = ctx.one(
            "Pad", [window, int64s(ctx, "pads", [before, size - window_length - before])]
        )
    windowed = ctx.one("Mul", [spectrum.real, window])  # [batch?, frames, size]
    length = (frames - 1) * step + size
    positions = (np.arange(frames)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    flat_shape = [0, frames * size] if batched else [frames * size]
    flat = ctx.one("Reshape", [windowed, int64s(ctx, "flat", flat_shape)])
    targets = ctx.one("Expand", [int64s(ctx, "positions", positions), ctx.one("Shape", [flat])])
    canvas_shape = ctx.one(
        "Concat",
        [
            ctx.one(
                "Slice", [ctx.one("Shape", [flat]), int64s(ctx, "s", [0]), int64s(ctx, "e", [-1])]
            ),
            int64s(ctx, "length", [length]),
        ],
        axis=0,
    )
    canvas = ctx.one("Expand", [ctx.const("zero", np.zeros((), np.float32)), canvas_shape])
    signal = ctx.one("ScatterElements", [canvas, targets, flat], axis=-1, reduction="add")
    squared = ctx.one("Mul", [window, window])
    tiled = ctx.one("Tile", [squared, int64s(ctx, "frames", [frames])])
    envelope = ctx.one(
        "ScatterElements",
        [
            ctx.const("empty", np.zeros(length, np.float32)),
            int64s(ctx, "positions", positions),
            tiled,
        ],
        axis=0,
        reduction="add",
    )
    covered = ctx.one("Greater", [envelope, ctx.const("zero", np.zeros((), np.float32))])
    safe = ctx.one("Where", [covered, envelope, ctx.const("one", np.ones((), np.float32))])
    signal = ctx.one("Div", [signal, safe])
    if layer.attrs["normalized"]:
        signal = ctx.one("Mul", [signal, ctx.const("scale", np.asarray(np.sqrt(size), np.float32))])
    start, stop = (size // 2, length - size // 2) if layer.attrs["center"] else (0, length)
    if len(inputs) > 4:
        wanted = ctx.one("Reshape", [ctx.int64(inputs[4]), int64s(ctx, "one", [1])])
        stop_at = ctx.one("Add", [wanted, int64s(ctx, "start", [start])])
        short = ctx.one(
            "Max",
            [ctx.one("Sub", [stop_at, int64s(ctx, "stop", [length])]), int64s(ctx, "zero", [0])],
        )
        zeros = int64s(ctx, "no_pad", [0] * (3 if batched else 1))
        signal = ctx.one("Pad", [signal, ctx.one("Concat", [zeros, short], axis=0)])
        ctx.one(
            "Slice",
            [signal, int64s(ctx, "from", [start]), stop_at, int64s(ctx, "axis", [-1])],
            ctx.out(layer),
        )
        return
    ctx.one(
        "Slice",
        [
            signal,
            int64s(ctx, "from", [start]),
            int64s(ctx, "to", [stop]),
            int64s(ctx, "axis", [-1]),
        ],
        ctx.out(layer),
    )
