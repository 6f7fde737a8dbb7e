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
    scale_in: float
    scale_out: float
    zero_point: int
    #: (low, high) for a Clip before QuantizeLinear when levels < 256, else None.
    clip: tuple[float, float] | None


def qdq_plan(levels: int, in_low, in_high, out_low, out_high) -> QdqPlan | str:
    """The exact QDQ form of a FakeQuantize with constant ranges, or why there is none."""
    if not 2 <= levels <= 256:
        return f"levels={levels} does not fit 8 bits"
    values = [np.asarray(v, np.float64).reshape(-1) for v in (in_low, in_high, out_low, out_high)]
    if any(v.size == 0 for v in values):
        return "empty ranges"
    if any(not np.all(v == v[0]) for v in values):
        return (
            "per-channel ranges on a run-time tensor (onnxruntime's integer kernels want one scale)"
        )
    il, ih, ol, oh = (float(v[0]) for v in values)
    steps = levels - 1
    scale_in, scale_out = (ih - il) / steps, (oh - ol) / steps
    if not (scale_in > 0 and scale_out > 0 and np.isfinite(scale_in) and np.isfinite(scale_out)):
        return "an empty or inverted range"
    k_in, k_out = -il / scale_in, -ol / scale_out
    k = round(k_in)
    if abs(k_in - k) > ZERO_POINT_SLACK or abs(k_out - k) > ZERO_POINT_SLACK:
        return f"zero is not one of the levels (zero point {k_in:.3f} is no integer)"
    if not 0 <= k <= 255:
        return "the zero point does not fit uint8 (zero lies outside the range)"
    clip = None if levels == 256 else (min(il, ih), max(il, ih))
    return QdqPlan(scale_in, scale_out, k, clip)


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
            if isinstance(plan, QdqPlan):
                _emit_qdq(ctx, layer, x, plan)
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


def _emit_qdq(ctx: ConversionContext, layer: Layer, x: str, plan: QdqPlan) -> None:
    zero_point = ctx.const("zero_point", np.asarray(plan.zero_point, np.uint8))
    if plan.clip is not None:
        low, high = (np.asarray(v, np.float32) for v in plan.clip)
        x = ctx.one("Clip", [x, ctx.const("low", low), ctx.const("high", high)])
    scale_in = ctx.const("scale", np.asarray(plan.scale_in, np.float32))
    q = ctx.one("QuantizeLinear", [x, scale_in, zero_point])
    scale_out = (
        scale_in
        if plan.scale_out == plan.scale_in
        else ctx.const("scale_out", np.asarray(plan.scale_out, np.float32))
    )
    ctx.one("DequantizeLinear", [q, scale_out, zero_point], ctx.out(layer))


def _float_constant_ranges(ctx, layer, x, levels, in_low, in_high, out_low, out_high) -> None:
    """The float formula with its coefficients computed once: 6 nodes instead of 11."""
    dtype = NUMPY_OF_ONNX[ctx.type_of(x)]
    steps = dtype(levels - 1)
    in_low, in_high = in_low.astype(dtype), in_high.astype(dtype)
    out_low, out_high = out_low.astype(dtype), out_high.astype(dtype)
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
