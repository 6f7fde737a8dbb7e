"""DequantizeLinear -> AveragePool -> QuantizeLinear: the pool kept in float.

onnxruntime's QDQ transformer turns this pattern into QLinearAveragePool, whose kernel is
far slower than the float pool between the two conversions (1 thread, u8, measured side
by side: 2x2/2 on [1,16,126,126] 0.50 ms vs 0.17 ms; 3x3/1 padded on [1,32,56,56]
0.81 ms vs 0.11 ms; [1,128,14,14] 0.22 ms vs 0.03 ms). It is also what OpenVINO does: it
averages in float and quantizes the result (both forms gave the same levels here). A
``Max`` with minus infinity after the pool keeps the transformer from matching the
pattern; it changes no value (a dequantized tensor holds no NaN) and costs one pass over
the pooled tensor. GlobalAveragePool is left alone: QLinearGlobalAveragePool was the
faster one (0.008 ms vs 0.023 ms on [1,64,32,32]).
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._fusion_guard import guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")


class AveragePoolInFloat:
    name = "average-pool-in-float"
    exact = True
    anchors = ("AveragePool",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        source = index.producer.get(node.input[0])
        if source is None or source.op_type != "DequantizeLinear" or source.domain not in STANDARD:
            return None
        reader = index.only_consumer(node.output[0])
        if reader is None or reader.op_type != "QuantizeLinear" or reader.domain not in STANDARD:
            return None
        if not index.is_free([node]):
            return None
        index.claim([node])
        pooled = onnx.NodeProto()
        pooled.CopyFrom(node)
        pooled.output[0] = index.names.fresh(f"{node.output[0]}/float")
        kept = guard(index, pooled.output[0], node.output[0], f"{node.name}/kept_in_float")
        index.replace([node], [pooled, kept])
        return Fired(self.name, node.name, "the pool stays in float")
