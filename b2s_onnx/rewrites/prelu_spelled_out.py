"""``Relu(x) + c * Relu(-x)`` (how TensorFlow graphs spell PReLU, OpenVINO keeps it) ->
the fast exact PRelu form: LeakyRelu for one slope, Max(x, x * slope) per channel.

The spelled form costs five element-wise passes and blocks onnxruntime's Conv+activation
fusion. For x > 0 both give ``x + (+-0) = x``; for x < 0, ``c * (-x)`` equals
``(-c) * x`` exactly, which is what LeakyRelu/Max compute with slope ``-c``.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.prelu_as_leaky_relu import leaky_relu_or_max


class PReluSpelledOut:
    name = "prelu-spelled-out"
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        for relu_in, mul_in in (node.input, node.input[::-1]):
            relu = index.produced_by(relu_in, "Relu")
            mul = index.produced_by(mul_in, "Mul")
            if relu is None or mul is None:
                continue
            for const_in, neg_relu_in in (mul.input, mul.input[::-1]):
                scale = index.constant(const_in)
                neg_relu = index.produced_by(neg_relu_in, "Relu")
                if scale is None or neg_relu is None:
                    continue
                neg = index.produced_by(neg_relu.input[0], "Neg")
                if neg is None or neg.input[0] != relu.input[0]:
                    continue
                matched = [relu, neg, neg_relu, mul, node]
                inner = [relu.output[0], neg.output[0], neg_relu.output[0], mul.output[0]]
                if any(index.only_consumer(t) is None for t in inner):
                    return Declined(self.name, node.name, "a part of the pattern is read elsewhere")
                if scale.ndim > 1 and sum(d != 1 for d in scale.shape) > 1:
                    return Declined(self.name, node.name, "the slope varies along several axes")
                if not index.is_free(matched):
                    return None
                form = leaky_relu_or_max(
                    index, relu.input[0], (-scale).astype(scale.dtype), node.output[0], node.name
                )
                if isinstance(form, str):
                    return Declined(self.name, node.name, form)
                index.claim(matched)
                nodes, detail = form
                index.replace(matched, nodes)
                for tensor in inner:
                    report.absorbed[tensor] = node.output[0]
                return Fired(self.name, node.name, detail)
        return None
