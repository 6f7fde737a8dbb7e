"""Transpose -> element-wise ops with constant operands: the ops first, the Transpose after.

OpenVINO's TensorFlow frontend wraps every convolution of an NHWC graph in Transposes and
applies bias, folded BatchNorm and Relu6 in NHWC, after the Transpose back. Once an atrous
pattern is fused, Conv -> Transpose -> Add -> Multiply -> Add -> Clip remains: onnxruntime
then runs four element-wise passes over the tensor instead of folding them into the Conv
(it folds per-channel Add/Mul and Clip only when they follow the Conv directly). Moving the
Transpose past them restores that, and lets it meet the next layer's Transpose, which
transpose-cleanup then cancels. Every element goes through the same ops with the same
operand values (the constants are transposed with it): bit-exact.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.atrous_convolution import _BINARY, _UNARY


def _sinkable(index: GraphIndex, node: onnx.NodeProto, data: str, rank: int):
    """For an element-wise ``node`` reading ``data``: the other operand (a constant of rank
    at most ``rank``) and its position, (None, 0) for a unary op, or None if it cannot
    swap with a Transpose."""
    if node.domain not in ("", "ai.onnx"):
        return None
    # Not past a Cast: the moved Cast could meet its inverse and change what onnxruntime
    # does with bf16 NaN payloads; and a widening Cast would make the Transpose dearer.
    if node.op_type in _UNARY and node.op_type != "Cast":
        if node.input[0] != data or any(index.constant(n) is None for n in node.input[1:] if n):
            return None
        return None, 0
    if node.op_type not in _BINARY or len(node.input) != 2 or len(node.output) != 1:
        return None
    position = 1 if node.input[0] == data else 0
    if node.input[1 - position] != data:
        return None
    value = index.constant(node.input[position])
    if value is None or value.ndim > rank:
        return None
    return value, position


#: onnxruntime folds per-channel Add/Mul and Clip/Relu that directly follow these (and a
#: MatMul's bias Add into Gemm).
_ABSORBING = ("Conv", "ConvTranspose", "MatMul", "Gemm")
NO_GAIN = (
    "nothing before the Transpose folds the ops and no Transpose after it meets it: their "
    "per-channel constants would only broadcast in the other layout (an NHWC 3-channel "
    "image's Add took 0.81 ms against 0.03 ms)"
)


def _worth_it(index: GraphIndex, node: onnx.NodeProto, chain) -> bool:
    """Moving ``node`` past ``chain`` pays when its producer can absorb the ops or the moved
    Transpose meets another one; unary ops and scalar operands cost the same in either
    layout. A per-channel constant otherwise only changes layout for nothing, and can get
    slower: on an NHWC 3-channel image it broadcasts over a 3-wide innermost axis
    (EfficientNet's input normalization, which OpenVINO had put after the Transpose)."""
    producer = index.producer.get(node.input[0])
    if producer is not None and producer.op_type in _ABSORBING:
        return producer.domain in ("", "ai.onnx")
    reader = index.only_consumer(chain[-1][0].output[0])
    if reader is not None and reader.op_type == "Transpose":
        return True
    return all(value is None or value.size == 1 for _, value, _ in chain)


class TransposeSinking:
    name = "transpose-sinking"
    anchors = ("Transpose",)
    exact = True

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        perm = index.attribute(node, "perm")
        if perm is None:
            return None
        perm = list(perm)
        rank = len(perm)
        inverse = list(np.argsort(perm))
        chain: list[tuple[onnx.NodeProto, np.ndarray | None, int]] = []
        current = node.output[0]
        # Each tensor passed goes away: no subgraph may read it from the outer scope.
        while index.can_rename(current) and (reader := index.only_consumer(current)) is not None:
            found = _sinkable(index, reader, current, rank)
            if found is None:
                break
            chain.append((reader, *found))
            current = reader.output[0]
        if not chain or not index.is_free([node, *(op for op, _, _ in chain)]):
            return None
        if not _worth_it(index, node, chain):
            return Declined(self.name, node.name, NO_GAIN)
        index.claim([node, *(op for op, _, _ in chain)])
        replacements = []
        data = node.input[0]
        for op, value, position in chain:
            moved = onnx.NodeProto()
            moved.CopyFrom(op)
            out = index.names.fresh(f"{op.output[0]}/before_transpose")
            if value is None:
                moved.input[0] = data
            else:
                full = value.reshape((1,) * (rank - value.ndim) + value.shape)
                moved.input[1 - position] = data
                moved.input[position] = index.add_initializer(
                    f"{op.input[position]}/transposed",
                    np.ascontiguousarray(full.transpose(inverse)),
                )
            moved.output[0] = out
            replacements.append(moved)
            data = out
        last = chain[-1][0]
        for op, _, _ in chain[:-1]:
            report.absorbed[op.output[0]] = last.output[0]
        replacements.append(
            helper.make_node("Transpose", [data], [last.output[0]], name=node.name, perm=perm)
        )
        index.replace([node, *(op for op, _, _ in chain)], replacements)
        index.forget_shapes([node.output[0], *(op.output[0] for op, _, _ in chain)])
        report.absorbed[node.output[0]] = last.output[0]
        return Fired(self.name, node.name, f"past {len(chain)} element-wise op(s)")
