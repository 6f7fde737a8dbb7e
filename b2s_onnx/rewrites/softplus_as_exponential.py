"""Softplus (OpenVINO's SoftPlus-4) -> ``Where(x > 20, x, Log(Exp(x) + 1))``.

onnxruntime's Softplus is a scalar loop: 5.5 ms on a [1, 32, 115, 155] float tensor at one
thread, where an Exp pass takes 0.08 ms; the five passes here take 1.6 ms (``Log(Exp(Min(x,
20)) + 1) + Relu(x - 20)``, seven passes without a Where, 1.4 ms, but an ulp off ``x`` above
the threshold). `mish-as-exponentials` runs first and takes the Softplus of a Mish; this
one takes a Softplus standing alone.

OpenVINO defines SoftPlus-4 as ``ln(1 + e^x)`` up to a threshold, 20 for f32, and ``x``
above it, which is this form (above it the Exp may overflow to inf in the branch not
taken). Against float64 ``log1p(exp(x))`` on normal values of scale 8 the largest error is
1.9e-6 absolute
(onnxruntime's Softplus: 4.8e-7), from ``Log(1 + e^x)`` near 1 for negative x, where
OpenVINO's own kernel is further off (-1.9e-6 at x = -20, 5.7e-7 at x = -10). ``-inf``
gives 0, ``+inf`` stays, NaN stays NaN.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: OpenVINO's SoftPlus-4 threshold for f32, above which it returns x.
THRESHOLD = 20.0


class SoftplusAsExponential:
    name = "softplus-as-exponential"
    #: The same function in other passes: float rounding differs.
    exact = False
    anchors = ("Softplus",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if index.info(node.input[0]).elem_type != onnx.TensorProto.FLOAT:
            return Declined(self.name, node.name, "only float32 is rewritten")
        if not index.is_free([node]):
            return None
        index.claim([node])
        base = node.name or node.output[0]
        fresh = index.names.fresh
        threshold = index.add_initializer(f"{base}/threshold", np.asarray(THRESHOLD, np.float32))
        one = index.add_initializer(f"{base}/one", np.asarray(1.0, np.float32))
        exp, plus_one, log, large = (
            fresh(f"{base}/{part}") for part in ("exp", "plus_one", "log", "large")
        )
        data = node.input[0]
        nodes = [
            helper.make_node("Exp", [data], [exp], name=exp),
            helper.make_node("Add", [exp, one], [plus_one], name=plus_one),
            helper.make_node("Log", [plus_one], [log], name=log),
            helper.make_node("Greater", [data, threshold], [large], name=large),
            helper.make_node("Where", [large, data, log], [node.output[0]], name=base),
        ]
        index.replace([node], nodes)
        return Fired(self.name, node.name, f"threshold {THRESHOLD:g}")
