"""``Max(x, -inf) -> per-axis QuantizeLinear``: the guard dropped where nothing could fuse.

The converter writes per-channel FakeQuantize as a per-axis QuantizeLinear/DequantizeLinear
pair between two ``Max(t, -inf)`` guards (see ``ir.converters.quantize``): onnxruntime
1.31 fuses a per-axis QuantizeLinear after a DQ -> Conv (or MatMul, Gemm, Add ...) group
into an integer kernel that refuses to run. The guard before the QuantizeLinear is only
needed where ``x`` comes from such a group; it costs a pass over the tensor otherwise. It
is dropped where ``x`` comes, through Relu/Clip/Min/Max, from arithmetic with a constant
operand (a bias after ConvInteger -> DequantizeLinear: NNCF's depthwise inputs) or from a
layer whose data input is not dequantized: the transformer's groups all start at a
DequantizeLinear on every data input. ``Max(x, -inf)`` is ``x``, so this is exact.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._fusion_guard import is_guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Element-wise ops onnxruntime's QDQ transformer could absorb between a group and its Q.
_PASS_THROUGH = ("Relu", "Clip", "Min", "Max")
#: Layers its QDQ groups are built around, when their data input is dequantized.
_LAYERS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def _unfusable(index: GraphIndex, name: str, depth: int = 4) -> bool:
    """Whether no QDQ group of onnxruntime's could end at ``name``."""
    node = index.producer.get(name)
    if node is None or node.domain not in STANDARD or depth == 0:
        return node is None  # a graph input starts no group
    if node.op_type in _PASS_THROUGH:
        return _unfusable(index, node.input[0], depth - 1)
    if node.op_type in ("Add", "Sub", "Mul", "Div"):
        return any(index.constant(i) is not None for i in node.input)
    if node.op_type in _LAYERS:
        return index.produced_by(node.input[0], "DequantizeLinear") is None
    return False


class PerAxisQuantizeGuard:
    name = "per-axis-quantize-guard"
    exact = True
    anchors = ("QuantizeLinear",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        scale = index.constant(node.input[1])
        if scale is None or scale.size < 2:
            return None
        guard = index.producer.get(node.input[0])
        if guard is None or not is_guard(index, guard):
            return None
        if index.only_consumer(guard.output[0]) is None or not index.can_rename(guard.output[0]):
            return None
        if not _unfusable(index, guard.input[0]) or not index.is_free([guard]):
            return None
        index.claim([guard])
        index.replace([guard], [])
        index.rename_later(guard.output[0], guard.input[0])
        report.absorbed[guard.output[0]] = guard.input[0]
        return Fired(self.name, node.name, "no fusable group before it")
