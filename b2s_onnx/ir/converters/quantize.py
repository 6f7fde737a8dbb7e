"""FakeQuantize: as QuantizeLinear/DequantizeLinear where that computes the same values,
else as its float formula.

``FakeQuantize(x; il, ih, ol, oh, levels L)`` snaps x to ``L`` levels:
``q = round((clamp(x) - il) / s_in)`` with ``s_in = (ih - il) / (L - 1)``, then
``y = q * s_out + ol``. When ``il = -k * s_in`` and ``ol = -k * s_out`` for one integer
``k`` in [0, 255] (zero is a level, as NNCF and POT choose), that is
``DequantizeLinear(QuantizeLinear(x, s_in, k), s_out, k)`` on uint8: ``round(x / s_in) + k``
saturates to [0, 255], which is FakeQuantize's clamp for 256 levels; fewer levels clamp
first (a Clip onnxruntime keeps). The QDQ form is what lets onnxruntime run the
neighbouring Conv/MatMul/Add/Concat on its integer kernels.

Rounding: both round half to even (FakeQuantize's reference uses ``nearbyint``); the
difference is float rounding of ``x / s_in + k`` versus ``(x - il) / s_in``, which can move
a value sitting within an ulp of a rounding boundary by one step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import BROADCAST, Int
from b2s_onnx.ir.reader import Layer

#: How far ``-il / s_in`` may sit from an integer and still count as the zero point: IRs
#: store ranges in f16 (relative precision 2^-11), which moves ``-il / s_in`` by up to about
#: 256 * 2^-11 = 0.125 for 256 levels. Snapping moves every level by that fraction of a step.
ZERO_POINT_SLACK = 0.15


@dataclass(frozen=True)
class QdqPlan:
    """Scales and zero points: scalars, or 1-D along ``axis`` (per-channel ranges)."""

    scale_in: np.ndarray
    scale_out: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    #: (low, high) for a Clip before QuantizeLinear when levels < 256, else None.
    clip: tuple[np.ndarray, np.ndarray] | None


def _range_axis(shapes: list[tuple[int, ...]]) -> tuple[int | None, int] | str:
    """The one axis the ranges vary along (None: they are scalars), and the rank they have."""
    rank = max(len(shape) for shape in shapes)
    axes = set()
    for shape in shapes:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        axes.update(axis for axis, d in enumerate(padded) if d != 1)
    if len(axes) > 1:
        return "ranges that vary along several axes"
    return (axes.pop() if axes else None), rank


def qdq_plan(levels: int, in_low, in_high, out_low, out_high) -> QdqPlan | str:
    """The QDQ form of a FakeQuantize with constant ranges, or why there is none."""
    if not 2 <= levels <= 256:
        return f"levels={levels} does not fit 8 bits"
    ranges = [np.asarray(v, np.float64) for v in (in_low, in_high, out_low, out_high)]
    if any(v.size == 0 for v in ranges):
        return "empty ranges"
    found = _range_axis([v.shape for v in ranges])
    if isinstance(found, str):
        return found
    axis, rank = found
    if axis is None:
        il, ih, ol, oh = (v.reshape(1) for v in ranges)
    else:
        count = max(v.reshape(-1).size for v in ranges)
        il, ih, ol, oh = (np.broadcast_to(v.reshape(-1), (count,)) for v in ranges)
    steps = levels - 1
    scale_in, scale_out = (ih - il) / steps, (oh - ol) / steps
    if not (np.all(scale_in > 0) and np.all(scale_out > 0)):
        return "an empty or inverted range"
    if not (np.all(np.isfinite(scale_in)) and np.all(np.isfinite(scale_out))):
        return "a range that is not finite"
    k_in, k_out = -il / scale_in, -ol / scale_out
    k = np.round(k_in)
    worst = float(max(np.abs(k_in - k).max(), np.abs(k_out - k).max()))
    if worst > ZERO_POINT_SLACK:
        return f"zero is not one of the levels (zero point off an integer by {worst:.3f})"
    if k.min() < 0 or k.max() > 255:
        return "the zero point does not fit uint8 (zero lies outside the range)"
    clip = None
    if levels < 256:
        low, high = np.minimum(il, ih), np.maximum(il, ih)
        shape = (-1,) + (1,) * (rank - 1 - axis) if axis is not None else ()
        clip = (low.astype(np.float32).reshape(shape), high.astype(np.float32).reshape(shape))
    squeeze = (lambda v: v.reshape(())) if axis is None else (lambda v: v)
    return QdqPlan(
        squeeze(scale_in.astype(np.float32)),
        squeeze(scale_out.astype(np.float32)),
        squeeze(k.astype(np.uint8)),
        None if axis is None else axis - rank,
        clip,
    )


@converts(
    "FakeQuantize",
    (1,),
    inputs=(5, 5),
    attrs={"levels": Int(required=True, minimum=2), **BROADCAST},
)
def fake_quantize(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    levels = layer.attrs["levels"]
    x, in_low, in_high, out_low, out_high = inputs
    ranges = [ctx.value(t) for t in inputs[1:]]
    if all(r is not None for r in ranges):
        if ctx.int8 == "qdq" and ctx.value(x) is None and ctx.type_of(x) == TensorProto.FLOAT:
            plan = qdq_plan(levels, *ranges)
            if isinstance(plan, QdqPlan) and plan.axis is not None:
                _emit_guarded_per_axis_qdq(ctx, layer, x, plan)
                return
            if isinstance(plan, QdqPlan):
                _emit_qdq(ctx, layer, x, plan, ctx.out(layer))
                return
            ctx.notes.append(f"{layer.where()}: kept as float arithmetic: {plan}")
        _float_constant_ranges(ctx, layer, x, levels, *ranges)
        return
    if ctx.int8 == "qdq":
        ctx.notes.append(f"{layer.where()}: kept as float arithmetic: its ranges vary at run time")
    dtype = NUMPY_OF_ONNX[ctx.type_of(x)]
    steps = ctx.const("steps", np.asarray(levels - 1, dtype))
    low = ctx.one("Min", [in_low, in_high])
    high = ctx.one("Max", [in_low, in_high])
    clamped = ctx.one("Min", [ctx.one("Max", [x, low]), high])
    ratio = ctx.one("Div", [ctx.one("Sub", [clamped, in_low]), ctx.one("Sub", [in_high, in_low])])
    quantized = ctx.one("Round", [ctx.one("Mul", [ratio, steps])])
    scaled = ctx.one(
        "Mul", [ctx.one("Div", [quantized, steps]), ctx.one("Sub", [out_high, out_low])]
    )
    ctx.one("Add", [scaled, out_low], ctx.out(layer))


def _emit_guarded_per_axis_qdq(ctx: ConversionContext, layer: Layer, x: str, plan: QdqPlan) -> None:
    """Per-channel ranges (NNCF quantizes a depthwise convolution's input so) as a per-axis
    QuantizeLinear/DequantizeLinear pair, 2 passes instead of the float formula's 7,
    between two ``Max(t, -inf)`` guards that change no value.

    onnxruntime's integer kernels take one scale per activation, yet its QDQ transformer
    (1.31) fuses DQ -> Conv -> per-axis Q, and per-axis DQ -> Conv -> Q, into QLinearConvs
    that then refuse to run ("zero point must be a scalar"). The guards keep the pair out
    of every fusion; the rewrite ``per-axis-quantize-guard`` drops the first one where the
    quantized tensor comes from no op the transformer could fuse."""
    floor = ctx.const("no_lower_bound", np.asarray(-np.inf, np.float32))
    guarded = ctx.one("Max", [x, floor])
    dequantized = _emit_qdq(ctx, layer, guarded, plan, None)
    ctx.one("Max", [dequantized, floor], ctx.out(layer))


def _emit_qdq(
    ctx: ConversionContext, layer: Layer, x: str, plan: QdqPlan, output: str | None
) -> str:
    zero_point = ctx.const("zero_point", plan.zero_point)
    if plan.clip is not None:
        low, high = plan.clip
        # Clip takes scalar bounds only: per-channel bounds clamp with Max/Min instead.
        if low.ndim == 0:
            x = ctx.one("Clip", [x, ctx.const("low", low), ctx.const("high", high)])
        else:
            x = ctx.one(
                "Min", [ctx.one("Max", [x, ctx.const("low", low)]), ctx.const("high", high)]
            )
    axis = {} if plan.axis is None else {"axis": plan.axis}
    scale_in = ctx.const("scale", plan.scale_in)
    q = ctx.one("QuantizeLinear", [x, scale_in, zero_point], **axis)
    scale_out = (
        scale_in
        if np.array_equal(plan.scale_out, plan.scale_in)
        else ctx.const("scale_out", plan.scale_out)
    )
    return ctx.one("DequantizeLinear", [q, scale_out, zero_point], output, **axis)


def _float_constant_ranges(ctx, layer, x, levels, in_low, in_high, out_low, out_high) -> None:
    """The float formula with its coefficients computed once: 6 nodes instead of 11."""
    dtype = NUMPY_OF_ONNX[ctx.type_of(x)]
    steps = dtype(levels - 1)
    in_low, in_high = in_low.astype(dtype), in_high.astype(dtype)
    out_low, out_high = out_low.astype(dtype), out_high.astype(dtype)
    if np.any(in_low >= in_high):
        _spec_branches(ctx, layer, x, steps, in_low, in_high, out_low, out_high)
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        in_scale = (steps / (in_high - in_low)).astype(dtype)
    out_scale = ((out_high - out_low) / steps).astype(dtype)
    clamped = ctx.one(
        "Min",
        [
            ctx.one("Max", [x, ctx.const("low", np.minimum(in_low, in_high))]),
            ctx.const("high", np.maximum(in_low, in_high)),
        ],
    )
    shifted = ctx.one("Sub", [clamped, ctx.const("in_low", in_low)])
    quantized = ctx.one("Round", [ctx.one("Mul", [shifted, ctx.const("in_scale", in_scale)])])
    scaled = ctx.one("Mul", [quantized, ctx.const("out_scale", out_scale)])
    ctx.one("Add", [scaled, ctx.const("out_low", out_low)], ctx.out(layer))


def _spec_branches(ctx, layer, x, steps, in_low, in_high, out_low, out_high) -> None:
    """FakeQuantize's three cases as the specification writes them, for input ranges that
    are empty or inverted somewhere: ``x <= min(in_low, in_high)`` gives out_low, ``x >
    max(...)`` out_high, the formula between. An empty range (``in_low == in_high``) is a
    threshold: binary networks binarize their activations so (levels 2, before a
    BinaryConvolution). The clamped formula would divide by zero there. OpenVINO's CPU
    plugin returns NaN for such a FakeQuantize standing alone (and all zeros for inverted
    ranges) but thresholds where it fuses it into a BinaryConvolution; this follows the
    specification."""
    dtype = in_low.dtype
    span = in_high - in_low
    with np.errstate(divide="ignore", invalid="ignore"):
        in_scale = np.where(span != 0, steps / span, 0).astype(dtype)
    out_scale = ((out_high - out_low) / steps).astype(dtype)
    low = ctx.const("low", np.minimum(in_low, in_high))
    high = ctx.const("high", np.maximum(in_low, in_high))
    shifted = ctx.one("Sub", [x, ctx.const("in_low", in_low)])
    quantized = ctx.one("Round", [ctx.one("Mul", [shifted, ctx.const("in_scale", in_scale)])])
    between = ctx.one(
        "Add",
        [
            ctx.one("Mul", [quantized, ctx.const("out_scale", out_scale)]),
            ctx.const("out_low", out_low),
        ],
    )
    below = ctx.one("LessOrEqual", [x, low])
    above = ctx.one("Greater", [x, high])
    kept = ctx.one("Where", [below, ctx.const("out_low_value", out_low), between])
    ctx.one("Where", [above, ctx.const("out_high_value", out_high), kept], ctx.out(layer))
