"""Rounding: Round-5 in both modes, for every element type.

ONNX's Round rounds half to even and takes floats only. Integers are already round, so
they pass through. Half away from zero is sign(x) * floor(|x| + 0.5), computed as OpenVINO's
CPU plugin computes it: just below one half (0.49999997) the addition rounds up, so both
give 1.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice

FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


@converts(
    "Round",
    (5,),
    inputs=(1, 1),
    attrs={"mode": Choice(allowed=("half_to_even", "half_away_from_zero"), required=True)},
)
def round_(ctx, layer, inputs):
    data = inputs[0]
    element = ctx.type_of(data)
    if element not in FLOATS:
        ctx.one("Identity", [data], ctx.out(layer))
        return
    if layer.attrs["mode"] == "half_to_even":
        ctx.one("Round", [data], ctx.out(layer))
        return
    dtype = NUMPY_OF_ONNX.get(element, np.float32)
    shifted = ctx.one("Add", [ctx.one("Abs", [data]), ctx.const("half", np.asarray(0.5, dtype))])
    ctx.one("Mul", [ctx.one("Sign", [data]), ctx.one("Floor", [shifted])], ctx.out(layer))
