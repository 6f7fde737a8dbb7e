"""DequantizeLinear, DequantizeLinear -> Add read by several QuantizeLinear -> one Add per
QuantizeLinear.

A residual Add in an INT8 IR is often read by two FakeQuantizes with different ranges (the
next block's input, and the shortcut of the block after). onnxruntime turns
DequantizeLinear -> Add -> QuantizeLinear into its integer QLinearAdd only when the
QuantizeLinear is the Add's one reader; otherwise both inputs are dequantized, added in
float and quantized twice. An Add costs one pass over its output, so giving each
QuantizeLinear its own copy is cheap and lets every copy become a QLinearAdd on 8-bit data
(measured 1 thread on person-attributes-recognition-crossroad-0230: 9 such Adds). Each
copy computes the same float sum as the shared Add: same bits before onnxruntime's fusion,
whose QLinearAdd then rounds as its other integer kernels do.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")


class AddPerQuantize:
    name = "add-per-quantize"
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        sources = [index.producer.get(name) for name in node.input]
        if not all(s is not None and s.op_type == "DequantizeLinear" for s in sources):
            return None
        readers = index.consumers.get(node.output[0], [])
        quantizers = [r for r in readers if r.op_type == "QuantizeLinear" and r.domain in STANDARD]
        if len(readers) < 2 or not quantizers:
            return None
        if len(quantizers) == 1 and node.output[0] in index.graph_outputs:
            return Declined(self.name, node.name, "the sum is also a graph output")
        if not index.is_free([node, *quantizers]):
            return None
        index.claim([node, *quantizers])
        # Each copy goes where its QuantizeLinear stood, so whatever reads that still
        # comes after it; the shared Add stays only if something else reads it.
        for quantizer in quantizers:
            total = onnx.NodeProto()
            total.CopyFrom(node)
            total.output[0] = index.names.fresh(f"{node.output[0]}/for_{quantizer.name}")
            total.name = index.names.fresh(f"{node.name}/for_{quantizer.name}")
            reader = onnx.NodeProto()
            reader.CopyFrom(quantizer)
            reader.input[0] = total.output[0]
            index.replace([quantizer], [total, reader])
        if len(quantizers) == len(readers) and node.output[0] not in index.graph_outputs:
            index.replace([node], [])
        return Fired(self.name, node.name, f"{len(quantizers)} QuantizeLinear readers")
