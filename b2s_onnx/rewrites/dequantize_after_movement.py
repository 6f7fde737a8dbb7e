"""DequantizeLinear -> Reshape/Transpose/Squeeze/Unsqueeze/Flatten -> the movement on the
integers, then DequantizeLinear.

onnxruntime's QDQ transformer looks for DequantizeLinear right before a MatMul or Conv; a
Reshape between them (a classifier's flatten before its first fully connected layer)
leaves the layer in float. Per-tensor dequantization multiplies every element alike, so
moving data before or after it gives the same bits.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

MOVEMENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


class DequantizeAfterMovement:
    name = "dequantize-after-movement"
    anchors = tuple(sorted(MOVEMENT))

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        dequantize = index.producer.get(node.input[0])
        if (
            dequantize is None
            or dequantize.op_type != "DequantizeLinear"
            or dequantize.domain not in ("", "ai.onnx")
            or index.only_consumer(dequantize.output[0]) is None
        ):
            return None
        scale = index.constant(dequantize.input[1])
        if scale is None or scale.size != 1:
            return Declined(self.name, node.name, "the dequantization is not per-tensor")
        if not index.is_free([dequantize, node]):
            return None
        index.claim([dequantize, node])
        moved = onnx.NodeProto()
        moved.CopyFrom(node)
        moved.input[0] = dequantize.input[0]
        moved.output[0] = index.names.fresh(f"{node.output[0]}/quantized")
        late = onnx.NodeProto()
        late.CopyFrom(dequantize)
        late.input[0] = moved.output[0]
        late.output[0] = node.output[0]
        late.name = index.names.fresh(f"{node.name}/dequantize")
        index.replace([dequantize, node], [moved, late])
        report.absorbed[dequantize.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"after {node.op_type}")
