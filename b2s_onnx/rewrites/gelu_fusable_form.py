"""Gelu spelled with ``Erf`` (as OpenVINO's Gelu is converted at opset < 20, or as
TensorFlow's ``0.5 x erfc(-x / sqrt 2)`` arrives: ``1 - erf(x * -(1/sqrt 2))``) -> the
spelling onnxruntime's Gelu fusion recognises: ``Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x ->
Mul 0.5``.

The converter writes ``(x * 0.5) * (1 + erf(x * (1/sqrt 2)))``, which onnxruntime runs as
five element-wise kernels, each forcing its NCHWc convolutions to reorder to NCHW and back.
In the recognised spelling it becomes one fused Gelu kernel, and the convolutions stay
blocked: after a 4-layer 64-channel 3x3 conv stack on [1,32,56,56] the optimized graph goes
from 4 Conv + 16 element-wise + 8 reorder nodes to 4 Conv + 4 Gelu + 2 reorders, 21.3 ms ->
17.8 ms (1 thread). Halving is exact, so the only difference is ``x / sqrt 2`` against
``x * (1 / sqrt 2)`` (at most one float32 ulp in erf's argument); measured through
onnxruntime, the fused kernel's outputs were bit-identical to the five-op form. erf is odd
and negating is exact, so ``1 - erf(-y)`` is ``1 + erf(y)``: the erfc spelling has the same
bound.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

_RSQRT2 = np.float32(1 / math.sqrt(2))


def _op(index: GraphIndex, name: str, op_type: str) -> onnx.NodeProto | None:
    node = index.producer.get(name)
    if node is None or node.op_type != op_type or node.domain not in ("", "ai.onnx"):
        return None
    return node


def _other(node: onnx.NodeProto, name: str) -> str | None:
    """The input of a binary ``node`` that is not ``name`` (None if ``name`` is not one)."""
    if node.input[0] == name:
        return node.input[1]
    if node.input[1] == name:
        return node.input[0]
    return None


def _is_scalar(index: GraphIndex, name: str | None, value: np.float32) -> bool:
    if name is None:
        return False
    found = index.constant(name)
    return (
        found is not None
        and found.dtype == np.float32
        and found.size == 1
        and found.reshape(-1)[0] == value
    )


class GeluFusableForm:
    name = "gelu-fusable-form"
    #: Changes float rounding (see the module doc), so checks compare within tolerance.
    exact = False
    anchors = ("Erf",)

    def _match(self, index: GraphIndex, erf: onnx.NodeProto):
        """(x, matched nodes in order, inner tensors, output) or None."""
        scaled = _op(index, erf.input[0], "Mul")
        if scaled is None:
            return None
        for data in scaled.input:
            factor = _other(scaled, data)
            if _is_scalar(index, factor, _RSQRT2):
                complement = "Add"  # 1 + erf(x / sqrt 2)
                break
            if _is_scalar(index, factor, -_RSQRT2):
                complement = "Sub"  # TensorFlow's erfc(-x / sqrt 2) = 1 - erf(-x / sqrt 2)
                break
        else:
            return None
        add = index.only_consumer(erf.output[0])
        if add is None or add.op_type != complement or add.domain not in ("", "ai.onnx"):
            return None
        if complement == "Sub":  # 1 - erf(...), not erf(...) - 1
            one = add.input[0] if add.input[1] == erf.output[0] else None
        else:
            one = _other(add, erf.output[0])
        if not _is_scalar(index, one, np.float32(1.0)):
            return None
        final = index.only_consumer(add.output[0])
        if final is None or final.op_type != "Mul" or final.domain not in ("", "ai.onnx"):
            return None
        halved = _op(index, _other(final, add.output[0]) or "", "Mul")
        if halved is None or data not in halved.input:
            return None
        if not _is_scalar(index, _other(halved, data), np.float32(0.5)):
            return None
        matched = [scaled, erf, add, halved, final]
        inner = [scaled.output[0], erf.output[0], add.output[0], halved.output[0]]
        return data, matched, inner, final.output[0]

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        found = self._match(index, node)
        if found is None:
            return None
        data, matched, inner, output = found
        if any(index.only_consumer(t) is None for t in inner):
            return Declined(self.name, node.name, "a part of the pattern is read elsewhere")
        if not index.is_free(matched):
            return None
        index.claim(matched)
        root2 = index.add_initializer(f"{node.name}/sqrt2", np.asarray(math.sqrt(2), np.float32))
        one = index.add_initializer(f"{node.name}/one", np.asarray(1.0, np.float32))
        half = index.add_initializer(f"{node.name}/half", np.asarray(0.5, np.float32))
        fresh = index.names.fresh
        divided, erf, plus, product = (
            fresh(f"{node.name}/{part}") for part in ("div", "erf", "plus_one", "times_x")
        )
        nodes = [
            helper.make_node("Div", [data, root2], [divided], name=divided),
            helper.make_node("Erf", [divided], [erf], name=erf),
            helper.make_node("Add", [erf, one], [plus], name=plus),
            helper.make_node("Mul", [data, plus], [product], name=product),
            helper.make_node("Mul", [product, half], [output], name=matched[-1].name),
        ]
        index.replace(matched, nodes)
        for tensor in inner:
            report.absorbed[tensor] = output
        return Fired(self.name, node.name, "Div/Erf/Add/Mul/Mul")
