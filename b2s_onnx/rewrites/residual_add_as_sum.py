"""Add of two computed tensors read by a LayerNormalization -> the same sum as Sum.

A transformer's residual connection (``LayerNorm(x + sublayer(x))``, OpenVINO's MVN after
an Add once ``mvn-as-normalization`` or ``layer-norm-spelled-out`` has made it a
LayerNormalization) is what
onnxruntime's optimizer fuses into its SkipLayerNormalization kernel. On the CPU that
kernel is several times slower than the two ops it replaces. Measured 1 thread, medians
of 200 interleaved runs, Add + LayerNormalization (fused) against Sum + LayerNormalization
(not fused): [1,128,256] 152 -> 23 us, [1,128,768] 470 -> 64 us, [1,384,768] 1408 -> 293 us,
[4,128,768] 1867 -> 395 us; at 2 threads 0.21-0.42x the time. On an encoder of two
layers (hidden 256, sequence 128) its five normalizations took 0.88 ms of 5.1 ms.

The fusion matches an Add only; a two-input Sum is the same addition with the same
broadcasting, so the bits do not change. Adds with a constant input (a bias) are left
alone: onnxruntime does not make them SkipLayerNormalization, and its MatMul + Add fusion
into Gemm needs the Add. So are sums read elsewhere too (a pre-norm transformer's
residual stream), which onnxruntime 1.31 does not fuse either.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Element types onnxruntime's CPU Sum kernel takes (it has none for bfloat16).
SUMMABLE = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


class ResidualAddAsSum:
    name = "residual-add-as-sum"
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        reader = index.only_consumer(node.output[0])
        if (
            reader is None
            or reader.op_type != "LayerNormalization"
            or reader.domain not in STANDARD
        ):
            return None
        if any(index.constant(name) is not None for name in node.input):
            return None
        elem_type = index.info(node.output[0]).elem_type
        if elem_type not in SUMMABLE:
            reason = "the element type is unknown" if not elem_type else "no CPU Sum kernel"
            return Declined(self.name, node.name, f"{reason}: the Add stays")
        if not index.retype(node, "Sum"):
            return None
        return Fired(self.name, node.name, "not fused into SkipLayerNormalization")
