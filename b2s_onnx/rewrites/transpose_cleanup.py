"""Transpose -> Transpose: one Transpose with the composed permutation, or none at all.

NHWC graphs converted by OpenVINO wrap layout-sensitive ops in Transposes; once an atrous
pattern is fused (or an op between two Transposes is lowered away) such pairs meet, and
each is a full pass over the tensor. Pure data movement: bit-exact.
"""

from __future__ import annotations

import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


def _perm(index: GraphIndex, node: onnx.NodeProto, rank: int | None) -> list[int] | None:
    perm = index.attribute(node, "perm")
    if perm is not None:
        return list(perm)
    return None if rank is None else list(range(rank))[::-1]


class TransposeCleanup:
    name = "transpose-cleanup"
    exact = True
    anchors = ("Transpose",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        first = index.producer.get(node.input[0])
        if first is None or first.op_type != "Transpose" or first.domain not in ("", "ai.onnx"):
            return None
        if index.only_consumer(first.output[0]) is None:
            return None
        outer = _perm(index, node, None)
        inner = _perm(index, first, None if outer is None else len(outer))
        if outer is None:
            outer = None if inner is None else list(range(len(inner)))[::-1]
        if inner is None or outer is None or len(inner) != len(outer):
            return Declined(self.name, node.name, "the rank is unknown")
        if not index.is_free([first, node]):
            return None
        index.claim([first, node])
        composed = [inner[p] for p in outer]
        report.absorbed[first.output[0]] = node.output[0]
        if composed == list(range(len(composed))) and index.can_rename(node.output[0]):
            # The pair cancels: later readers of the output read the original tensor.
            index.replace([first, node], [])
            index.rename_later(node.output[0], first.input[0])
            report.absorbed[node.output[0]] = first.input[0]
            return Fired(self.name, node.name, "cancelled")
        merged = helper.make_node(
            "Transpose", [first.input[0]], [node.output[0]], name=node.name, perm=composed
        )
        index.replace([first, node], [merged])
        return Fired(self.name, node.name, f"merged into perm {composed}")
