"""``Max(t, -inf)``: a node that changes no value and keeps onnxruntime's QDQ transformer
from fusing across it.

Rewrites (and the FakeQuantize converter) put one where onnxruntime would otherwise fuse a
pattern into a slower kernel (QLinearAveragePool) or one that refuses to run (per-axis
QuantizeLinear/DequantizeLinear around a Conv). A dequantized tensor holds no NaN, so the
maximum with minus infinity is the tensor itself.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex

STANDARD = ("", "ai.onnx")


def is_guard(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Whether ``node`` is ``Max(t, -inf)``."""
    if node.op_type != "Max" or node.domain not in STANDARD or len(node.input) != 2:
        return False
    floor = index.constant(node.input[1])
    return floor is not None and floor.size == 1 and bool(np.isneginf(floor.reshape(-1)[0]))


def guard(index: GraphIndex, data: str, output: str, hint: str, dtype=np.float32) -> onnx.NodeProto:
    """``output = Max(data, -inf)`` of ``dtype``, named after ``hint``."""
    floor = index.add_initializer(f"{hint}/no_lower_bound", np.asarray(-np.inf, dtype))
    return helper.make_node("Max", [data, floor], [output], name=index.names.fresh(hint))
