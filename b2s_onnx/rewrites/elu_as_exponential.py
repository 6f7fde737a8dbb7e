"""Elu with ``0 < alpha <= 1`` -> ``Max(x, alpha * (Exp(Min(x, 0)) - 1))``.

onnxruntime's Elu kernel is not vectorised: 1.44 ns per element on a tensor in cache,
against 0.26-0.30 ns for an Exp, Min, Sub or Max pass. The four passes (five with an alpha
other than 1) compute the same function: for ``x >= 0`` the exponential term is 0 and the
Max gives ``x``; for ``x < 0``, ``alpha (e^x - 1) >= x`` whenever ``alpha <= 1`` (the
difference is 0 at 0 and falls as x rises), so the Max gives the Elu branch. A 64-channel
3x3 conv stack on [1,32,56,56] with Elu after every layer (Lightweight OpenPose's refinement
stages use it) took 0.89x the time at 1 thread and 0.99x at 2 (docs/performance.md).

Float rounding only: ``e^x - 1`` is rounded as onnxruntime's Elu rounds it (8.6e-7 apart at
most in that conv stack); ``-inf`` gives ``-alpha``, NaN stays NaN. An alpha above 1 makes
``alpha (e^x - 1)`` fall below ``x`` just under 0, so such an Elu is declined.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class EluAsExponential:
    name = "elu-as-exponential"
    #: The same function in other passes: float rounding may differ.
    exact = False
    anchors = ("Elu",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        alpha = float(index.attribute(node, "alpha", 1.0))
        if not 0.0 < alpha <= 1.0:
            return Declined(
                self.name, node.name, f"alpha {alpha:g} is outside (0, 1], where the Max holds"
            )
        if index.info(node.input[0]).elem_type != onnx.TensorProto.FLOAT:
            return Declined(self.name, node.name, "only float32 is rewritten")
        if not index.is_free([node]):
            return None
        index.claim([node])
        base = node.name or node.output[0]
        fresh = index.names.fresh
        zero = index.add_initializer(f"{base}/zero", np.asarray(0.0, np.float32))
        one = index.add_initializer(f"{base}/one", np.asarray(1.0, np.float32))
        negative, exp, minus_one = (fresh(f"{base}/{part}") for part in ("min0", "exp", "expm1"))
        nodes = [
            helper.make_node("Min", [node.input[0], zero], [negative], name=negative),
            helper.make_node("Exp", [negative], [exp], name=exp),
            helper.make_node("Sub", [exp, one], [minus_one], name=minus_one),
        ]
        branch = minus_one
        if alpha != 1.0:
            scale = index.add_initializer(f"{base}/alpha", np.asarray(alpha, np.float32))
            branch = fresh(f"{base}/scaled")
            nodes.append(helper.make_node("Mul", [minus_one, scale], [branch], name=branch))
        nodes.append(helper.make_node("Max", [node.input[0], branch], [node.output[0]], name=base))
        index.replace([node], nodes)
        return Fired(self.name, node.name, f"alpha {alpha:g}")
