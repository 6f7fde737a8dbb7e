"""``x + x * s`` with ``s`` in [0, 1] (a gate: HardSigmoid or Sigmoid) -> ``x * (1 + s)``.

PaddleOCR's residual squeeze-excitation (RSE) blocks scale a feature map by a per-channel
gate and add the map back. onnxruntime keeps neither the broadcast Mul nor the Add in its
blocked layout, so both are full passes over the map in NCHW; adding one to the small gate
first leaves one. Both forms broadcast ``x`` against ``s`` alike, whatever the shapes.
ppocrv3-det-paddle-user, 1 thread: its 8 such blocks' Adds took 7.5 ms of
69 (the [1,96,160,160] one 4.3 ms).

Not bit-exact: ``x * round(1 + s)`` against ``round(x + round(x * s))``. With ``s`` in
[0, 1], ``1 + s`` lies in [1, 2], so both are within 1.5 ulp of the exact ``x (1 + s)``
and of each other by at most 3 ulp (relative 3.6e-7).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Ops whose output lies in [0, 1] whatever their input (NaN aside).
GATES = ("HardSigmoid", "Sigmoid")


def _is_gate(index: GraphIndex, name: str) -> bool:
    node = index.producer.get(name)
    if node is None or node.op_type not in GATES or node.domain not in STANDARD:
        return False
    if node.op_type == "HardSigmoid":
        alpha = float(index.attribute(node, "alpha", 0.2))
        beta = float(index.attribute(node, "beta", 0.5))
        return np.isfinite(alpha) and np.isfinite(beta)
    return True


class ResidualScale:
    name = "residual-scale"
    exact = False
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        for data, product in (node.input, node.input[::-1]):
            mul = index.produced_by(product, "Mul")
            if mul is None or data not in mul.input or index.only_consumer(product) is not node:
                continue
            gate = mul.input[1] if mul.input[0] == data else mul.input[0]
            if gate == data or not _is_gate(index, gate):
                continue
            info = index.info(data)
            if info.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                return None
            if not index.is_free([mul, node]):
                return None
            index.claim([mul, node])
            dtype = np.float32 if info.elem_type == onnx.TensorProto.FLOAT else np.float16
            one = index.add_initializer(f"{node.name}/one", np.asarray(1, dtype))
            widened = index.names.fresh(f"{node.name}/one_plus_gate")
            index.replace(
                [mul, node],
                [
                    helper.make_node("Add", [gate, one], [widened], name=widened),
                    helper.make_node("Mul", [data, widened], [node.output[0]], name=node.name),
                ],
            )
            report.absorbed[product] = node.output[0]
            return Fired(self.name, node.name, "one pass over the map instead of two")
        return None
