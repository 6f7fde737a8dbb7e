"""ReduceMax / ReduceMin over a stack -> one element-wise Max / Min.

PyTorch exports (mmdetection's FCOS/ATSS box decoders among them: ``torch.stack`` then
``max``) and OpenVINO's ONNX frontend after them write ``max(a, b)`` as
``Unsqueeze(a), Unsqueeze(b) -> Concat -> ReduceMax`` over the new axis, often with ``b`` a
constant broadcast to ``a``'s shape. face-detection-0205 clamps its box corners that way 41
times. Each one is three to five nodes on a few thousand values, so onnxruntime's per-node
dispatch, not arithmetic, is its cost; ``Max(a, b)`` is one node.

Matches a ReduceMax/ReduceMin over one axis whose input is a Concat along that axis, read by
nothing else, where every part has size 1 on the axis: an Unsqueeze at that axis (its input is
used), a constant (squeezed; a scalar when all its values are equal) or, with ``keepdims=1``,
any tensor (used as it is). At least one part must be computed.

What changes: the same operand is picked everywhere but where two candidates are equal
without being identical (-0 and +0) or one is NaN. onnxruntime's ReduceMax takes the first of
equal values and skips NaN; its Max takes the last of equal values and propagates NaN;
OpenVINO's ReduceMax and Maximum both take the second operand in either case, so the Max
agrees with OpenVINO on every -0/+0 tie and on a NaN in the second operand, where the
ReduceMax did not (``tests/test_rewrites_reduce_of_stack.py``). Hence ``exact = False``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

ELEMENTWISE = {"ReduceMax": "Max", "ReduceMin": "Min"}
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


class ReduceOfStack:
    name = "reduce-of-stack-as-elementwise"
    #: The same operands are picked but for -0/+0 ties and NaN (see the module docstring).
    exact = False
    anchors = tuple(ELEMENTWISE)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        concat = index.produced_by(node.input[0], "Concat")
        axes = index.reduction_axes(node)
        rank = len(index.info(node.input[0]).shape or ())
        if concat is None or axes is None or len(axes) != 1 or rank == 0:
            return None
        axis = axes[0] % rank
        if int(index.attribute(concat, "axis", 0)) % rank != axis:
            return None
        if index.only_consumer(concat.output[0]) is not node:
            return Declined(self.name, node.name, "the stacked tensor is read elsewhere too")
        keep = bool(index.attribute(node, "keepdims", 1))
        if index.opset() < 12 and index.info(node.input[0]).elem_type not in FLOATS:
            return Declined(self.name, node.name, "Max/Min take integers from opset 12 only")
        parts: list[str | np.ndarray] = []
        gone = [concat, node]
        base = node.name or node.output[0]
        for part in concat.input:
            value = index.constant(part)
            if value is not None:
                if value.ndim != rank or value.shape[axis] != 1:
                    return Declined(
                        self.name, node.name, f"constant part {part} is not of size 1 on the axis"
                    )
                parts.append(_scalar(value if keep else np.squeeze(value, axis)))
                continue
            if keep:
                size = (index.info(part).shape or [None] * rank)[axis]
                if size != 1:
                    return Declined(
                        self.name, node.name, f"part {part} has no known size 1 on the axis"
                    )
                parts.append(part)
                continue
            unsqueeze = index.produced_by(part, "Unsqueeze")
            inserted = index.reduction_axes(unsqueeze) if unsqueeze is not None else None
            if inserted is None or sorted(a % rank for a in inserted) != [axis]:
                return Declined(
                    self.name, node.name, f"part {part} is not an Unsqueeze at the reduced axis"
                )
            parts.append(unsqueeze.input[0])
            if index.only_consumer(part) is concat:
                gone.append(unsqueeze)
        if all(isinstance(p, np.ndarray) or index.constant(p) is not None for p in parts):
            return Declined(self.name, node.name, "every part is constant (left to folding)")
        if not index.is_free(gone):
            return None
        index.claim(gone)
        op = ELEMENTWISE[node.op_type]
        names = [
            index.add_initializer(f"{base}/part{i}", p) if isinstance(p, np.ndarray) else p
            for i, p in enumerate(parts)
        ]
        index.replace(gone, [helper.make_node(op, names, [node.output[0]], name=base)])
        for dropped in gone:
            if dropped is not node:
                report.absorbed[dropped.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"{op} of {len(parts)}")


def _scalar(value: np.ndarray) -> np.ndarray:
    """``value`` as a scalar when every element has the same bits (so -0 and +0, which
    compare equal, stay apart), which broadcasts; else as it is."""
    flat = value.reshape(-1)
    if flat.size and flat.tobytes() == np.repeat(flat[:1], flat.size).tobytes():
        return np.asarray(flat[0], value.dtype)
    return value
