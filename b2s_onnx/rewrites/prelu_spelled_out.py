"""``Relu(x) + c * Relu(-x)`` (how TensorFlow graphs spell PReLU, OpenVINO keeps it) ->
the fast PReLU form that ``prelu_as_leaky_relu`` chooses for slope ``-c``.

The spelled form costs five element-wise passes and blocks onnxruntime's Conv+activation
fusion. For x > 0 both give ``x + (+-0) = x``; for x < 0, ``c * (-x)`` equals
``(-c) * x`` exactly, which is what LeakyRelu and ``Max(x, x * s)`` compute with slope
``-c``; the blocked-layout form is within rounding of it (see that module).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.prelu_as_leaky_relu import fast_prelu_form


@dataclass(frozen=True)
class SpelledPRelu:
    """One match of the spelled form ending in an Add."""

    data: str
    scale: np.ndarray
    #: Relu, Neg, Relu, Mul and the Add, in that order.
    nodes: tuple[onnx.NodeProto, ...]

    @property
    def inner(self) -> list[str]:
        return [node.output[0] for node in self.nodes[:-1]]


def match_spelled_prelu(index: GraphIndex, node: onnx.NodeProto) -> SpelledPRelu | None:
    """The spelled PReLU that ends in the Add ``node``, else None."""
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
            return SpelledPRelu(relu.input[0], scale, (relu, neg, neg_relu, mul, node))
    return None


class PReluSpelledOut:
    name = "prelu-spelled-out"
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        found = match_spelled_prelu(index, node)
        if found is None:
            return None
        if any(index.only_consumer(t) is None for t in found.inner):
            return Declined(self.name, node.name, "a part of the pattern is read elsewhere")
        scale = found.scale
        if scale.ndim > 1 and sum(d != 1 for d in scale.shape) > 1:
            return Declined(self.name, node.name, "the slope varies along several axes")
        matched = list(found.nodes)
        if not index.is_free(matched):
            return None
        form = fast_prelu_form(
            index, found.data, (-scale).astype(scale.dtype), node.output[0], node.name
        )
        if isinstance(form, str):
            return Declined(self.name, node.name, form)
        index.claim(matched)
        nodes, detail, exact = form
        index.replace(matched, nodes)
        for tensor in found.inner:
            report.absorbed[tensor] = node.output[0]
        return Fired(self.name, node.name, detail, exact=exact)
