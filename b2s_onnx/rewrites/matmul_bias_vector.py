"""MatMul -> Add of a [1, ..., 1, N] constant -> the same Add of an [N] vector.

onnxruntime's QDQ transformer fuses DequantizeLinear -> MatMul -> Add -> QuantizeLinear
into an integer QGemm only when the added bias is 1-D; OpenVINO writes it as [1, N]. For a
MatMul output of at least the constant's rank, both broadcast identically.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class MatMulBiasVector:
    name = "matmul-bias-vector"
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        for product, other in (node.input, node.input[::-1]):
            matmul = index.producer.get(product)
            bias = index.constant(other)
            if matmul is None or matmul.op_type != "MatMul" or bias is None:
                continue
            if bias.ndim < 2 or any(d != 1 for d in bias.shape[:-1]):
                return None
            shape = index.info(product).shape
            if shape is None or len(shape) < bias.ndim:
                return Declined(self.name, node.name, "the product's rank is unknown or lower")
            if not index.is_free([node]):
                return None
            index.claim([node])
            vector = index.add_initializer(f"{other}/vector", bias.reshape(-1))
            add = onnx.NodeProto()
            add.CopyFrom(node)
            add.input[list(node.input).index(other)] = vector
            index.replace([node], [add])
            return Fired(self.name, node.name, f"bias {list(bias.shape)} as [{bias.shape[-1]}]")
        return None
