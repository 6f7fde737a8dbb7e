"""``Conv(Concat(a, b, ...))`` over channels -> ``Conv_a(a) + Conv_b(b) + ...``.

A convolution is linear in its input channels, so the convolution of a channel Concat is
the sum of convolutions of its parts, each with its slice of the weights. SqueezeNet's fire
modules, SSD heads on them, YOLO's CSP blocks and SPPF all concatenate branches only to
convolve the result. OpenVINO writes the branches into one buffer and never copies; in
onnxruntime the Concat is a pass that reads and writes the whole tensor. Split instead,
onnxruntime folds each Add into the convolution after it (its blocked kernels accumulate
into their output) and the Concat is gone. Measured 1 thread, onnxruntime 1.31, medians of
300 interleaved runs: face-detection-retail-0004 0.92x the time (its 10 Concats took 0.94
of 11.3 ms), SqueezeNet 1.1 0.97x, yolov5n 0.99x. Parts outside the blocked layout (a
branch ending in element-wise ops without blocked kernels, such as Mish) pay too: their
Concat ran in the plain layout and was reordered as a whole for the convolution, while
each part is now reordered for its own; a blocked part, which had to leave the blocked
layout for that Concat, no longer does. Measured: a blocked ReLU branch and a Mish branch
of 64 channels at 104x104, 0.93x at 1 and 2 threads; the CSPDarknet stem's two Concats of
Mish branches 0.97-0.98x. Each part must fill whole channel blocks: a convolution over a
partial block takes onnxruntime's plain-layout input path.

Where the convolution's only reader adds a bias (a per-channel constant) it becomes the
first part's bias; where it adds a residual tensor of the same shape that is blocked too,
the chain of sums starts from it, so onnxruntime folds that Add as well.

Not bit-exact: the channels' products are summed in another order (within float rounding
of the original sum).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import BLOCK, channels, is_blocked
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")


class _Plan:
    """One reading Conv: the nodes it replaces, its weights, bias and residual."""

    def __init__(self, conv: onnx.NodeProto, weights: np.ndarray) -> None:
        self.conv = conv
        self.weights = weights
        self.bias: np.ndarray | None = None
        self.residual: str | None = None
        self.matched = [conv]
        self.output = conv.output[0]


class ConcatAsConvSum:
    name = "concat-as-conv-sum"
    anchors = ("Concat",)
    exact = False

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if len(node.input) < 2 or int(index.attribute(node, "axis", 0)) not in (1, -3):
            return None
        readers = index.consumers.get(node.output[0], [])
        if not any(r.op_type == "Conv" and r.domain in STANDARD for r in readers):
            return None
        if node.output[0] in index.graph_outputs:
            return Declined(self.name, node.name, "the Concat is a graph output")
        plans = []
        for reader in readers:
            plan = self._plan(index, node, reader)
            if isinstance(plan, str):
                return Declined(self.name, node.name, plan)
            plans.append(plan)
        widths = [channels(index, name) for name in node.input]
        if None in widths:
            return Declined(self.name, node.name, "the parts' channel counts are unknown")
        if any(plan.weights.shape[1] != sum(widths) for plan in plans):
            return None  # weights that do not fit the Concat: not a graph to rewrite
        if any(w % BLOCK for w in widths):
            return Declined(self.name, node.name, "a part does not fill whole channel blocks")
        taken = {id(plan.conv) for plan in plans}
        for plan in plans:
            self._take_bias_or_residual(index, plan, taken)
        matched = [node] + [n for plan in plans for n in plan.matched]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        for plan in plans:
            index.replace(plan.matched, self._sum_of_parts(index, node, widths, plan))
            for gone in plan.matched[:-1]:
                report.absorbed[gone.output[0]] = plan.output
        index.replace([node], [])
        report.absorbed[node.output[0]] = plans[0].output
        return Fired(
            self.name,
            node.name,
            f"{len(widths)} parts into {len(plans)} convolution(s)",
        )

    @staticmethod
    def _plan(index: GraphIndex, concat: onnx.NodeProto, reader: onnx.NodeProto) -> _Plan | str:
        """The reader as a Conv to split, or why it cannot be."""
        if reader.op_type != "Conv" or reader.domain not in STANDARD:
            return f"the Concat is also read by a {reader.op_type}"
        if reader.input[0] != concat.output[0] or concat.output[0] in reader.input[1:]:
            return "the Concat is a convolution's weights or bias"
        if int(index.attribute(reader, "group", 1)) != 1:
            return "a grouped convolution reads the Concat"
        weights = index.weight(reader.input[1])
        if weights is None or weights.dtype != np.float32 or weights.ndim != 4:
            return "a reading convolution's weights are not a float constant"
        plan = _Plan(reader, weights)
        if len(reader.input) > 2 and reader.input[2]:
            bias = index.weight(reader.input[2])
            if bias is None or bias.dtype != np.float32:
                return "a reading convolution's bias is computed"
            plan.bias = bias
        return plan

    @staticmethod
    def _take_bias_or_residual(index: GraphIndex, plan: _Plan, taken: set[int]) -> None:
        """Absorbs the Add after the Conv when it adds a per-channel bias (and the Conv has
        none) or a blocked residual of the Conv's own shape; ``taken`` (ids of the nodes the
        plans replace) keeps an Add of two reading Convs from being absorbed twice."""
        add = index.only_consumer(plan.output)
        if add is None or add.op_type != "Add" or add.domain not in STANDARD:
            return
        if id(add) in taken:
            return
        taken.add(id(add))
        other = add.input[1] if add.input[0] == plan.output else add.input[0]
        if other == plan.output:
            return
        out_channels = plan.weights.shape[0]
        value = index.constant(other)
        if value is not None:
            vector = channel_vector(value, out_channels)
            if plan.bias is None and vector is not None and value.dtype == np.float32:
                plan.bias = np.ascontiguousarray(vector)
                plan.matched.append(add)
                plan.output = add.output[0]
            return
        shape = index.info(plan.output).shape
        if (
            shape is not None
            and None not in shape
            and index.info(other).shape == shape
            and is_blocked(index, other)
        ):
            plan.residual = other
            plan.matched.append(add)
            plan.output = add.output[0]

    @staticmethod
    def _sum_of_parts(
        index: GraphIndex, concat: onnx.NodeProto, widths: list[int], plan: _Plan
    ) -> list[onnx.NodeProto]:
        conv, fresh = plan.conv, index.names.fresh
        nodes: list[onnx.NodeProto] = []
        total = plan.residual
        start = 0
        for k, (part, width) in enumerate(zip(concat.input, widths, strict=True)):
            inputs = [
                part,
                index.add_initializer(
                    f"{conv.name}/part{k}/weights",
                    np.ascontiguousarray(plan.weights[:, start : start + width]),
                ),
            ]
            start += width
            if k == 0 and plan.bias is not None:
                inputs.append(
                    index.add_initializer(
                        f"{conv.name}/part{k}/bias", np.ascontiguousarray(plan.bias, np.float32)
                    )
                )
            last = k == len(widths) - 1
            output = plan.output if last and total is None else fresh(f"{conv.name}/part{k}")
            piece = helper.make_node("Conv", inputs, [output], name=fresh(f"{conv.name}/part{k}"))
            piece.attribute.extend(conv.attribute)
            nodes.append(piece)
            if total is None:
                total = output
                continue
            summed = plan.output if last else fresh(f"{conv.name}/sum{k}")
            nodes.append(helper.make_node("Add", [total, output], [summed], name=summed))
            total = summed
        return nodes
