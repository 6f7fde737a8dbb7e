"""A Conv on a Concat of branches quantized with different scales -> one Conv per branch on
its own bytes, the results summed.

`concat-before-dequantize` joins the branches' bytes and dequantizes them per channel, each
branch with its own scale and zero point. No integer kernel of onnxruntime takes one input
scale per channel, so the Conv reading that stayed a float Conv, although OpenVINO runs it
in INT8 (person-attributes-recognition: 4 of its 58 INT8 layers). A convolution is a sum
over its input channels, so it splits by branch: ``Conv(concat(x_i), W) = sum_i Conv(x_i,
W[:, channels of i])``. Each branch's Conv reads a per-tensor DequantizeLinear of its own
bytes and the int8 weights of its channels, so `conv-integer` runs it as a ConvInteger
(exact int32 sums, scaled once); a Sum adds the branches and an Add the bias.

Float rounding only: the branches' scaled sums are added in float where the float Conv
accumulated every product (``exact = False``).

Matches a Conv (group 1, int8 weights dequantized per output channel) whose data is a
per-channel DequantizeLinear, possibly behind the guard `concat-before-dequantize` puts
after it, of a Concat along the channels of run-time bytes, each branch's scale and zero
point constant over its channels.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import weight_dequantization
from b2s_onnx.rewrites._fusion_guard import is_guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Names the per-branch Convs end with, ``/branch0`` first: how coverage counts them as one
#: layer.
BRANCH = "/branch"


class ConvOnBranches:
    name = "conv-on-branches"
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        feeder = index.producer.get(node.input[0])
        guard = feeder if feeder is not None and is_guard(index, feeder) else None
        dequantize = index.producer.get(guard.input[0]) if guard is not None else feeder
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            return None
        concat = index.produced_by(dequantize.input[0], "Concat")
        scale = index.constant(dequantize.input[1])
        zero = index.constant(dequantize.input[2]) if len(dequantize.input) > 2 else None
        if concat is None or scale is None or zero is None or scale.size < 2:
            return None
        if zero.dtype != np.uint8:
            # conv-integer takes uint8 data only; split float Convs would only be slower.
            return Declined(self.name, node.name, "the branches are not uint8")
        if int(index.attribute(concat, "axis", 0)) % 4 != 1:
            return None
        if int(index.attribute(node, "group", 1)) != 1:
            return Declined(self.name, node.name, "a grouped Conv")
        weights_dq = index.produced_by(node.input[1], "DequantizeLinear")
        q = index.constant(weights_dq.input[0]) if weights_dq is not None else None
        if q is None or q.ndim != 4 or q.dtype != np.int8:
            return Declined(self.name, node.name, "the weights are not a 4-D int8 constant")
        # What conv-integer needs of them, checked before splitting: otherwise the branches
        # would stay float Convs, slower than the one they replace.
        fit = weight_dequantization(index, weights_dq, q)
        if isinstance(fit, str):
            return Declined(self.name, node.name, fit)
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = index.constant(node.input[2])
            if bias is None:
                return Declined(self.name, node.name, "the bias is computed")
        branches = []
        start = 0
        for part in concat.input:
            shape = index.info(part).shape
            if not shape or len(shape) != 4 or not isinstance(shape[1], int):
                return Declined(self.name, node.name, f"branch {part} has no known channels")
            end = start + shape[1]
            scales, zeros = scale.reshape(-1)[start:end], zero.reshape(-1)[start:end]
            if scales.size != shape[1] or np.any(scales != scales[0]) or np.any(zeros != zeros[0]):
                return Declined(
                    self.name, node.name, f"branch {part} is not quantized with one scale"
                )
            branches.append((part, start, end, scales[0], zeros[0]))
            start = end
        if start != q.shape[1] or start != scale.size:
            return Declined(self.name, node.name, "the branches do not cover the channels")
        # What only this Conv read goes with it: the guard, the per-channel dequantization,
        # the Concat of the bytes, the weights' dequantization.
        matched = [node]
        chain = [c for c in (guard, dequantize, concat) if c is not None]
        reader = node
        for producer in chain:
            if index.only_consumer(producer.output[0]) is not reader:
                break
            matched.append(producer)
            reader = producer
        if index.only_consumer(weights_dq.output[0]) is node:
            matched.append(weights_dq)
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        fresh = index.names.fresh
        nodes: list[onnx.NodeProto] = []
        sums = []
        for i, (part, first, last, part_scale, part_zero) in enumerate(branches):
            data = fresh(f"{base}/branch{i}_data")
            nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    [
                        part,
                        index.add_initializer(f"{base}/branch{i}_scale", np.asarray(part_scale)),
                        index.add_initializer(f"{base}/branch{i}_zero", np.asarray(part_zero)),
                    ],
                    [data],
                    name=data,
                )
            )
            weights = fresh(f"{base}/branch{i}_weights")
            nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    [
                        index.add_initializer(
                            f"{base}/branch{i}_w", np.ascontiguousarray(q[:, first:last])
                        ),
                        *weights_dq.input[1:],
                    ],
                    [weights],
                    name=weights,
                    **index.attributes(weights_dq),
                )
            )
            branch = onnx.NodeProto()
            branch.CopyFrom(node)
            branch.name = fresh(f"{base}{BRANCH}{i}")
            del branch.input[:]
            branch.input.extend([data, weights])
            branch.output[0] = fresh(f"{base}/branch{i}_sum")
            nodes.append(branch)
            sums.append(branch.output[0])
        total = node.output[0] if bias is None else fresh(f"{base}/branches")
        nodes.append(helper.make_node("Sum", sums, [total], name=fresh(f"{base}/sum")))
        if bias is not None:
            shaped = bias.astype(np.float32).reshape(1, -1, 1, 1)
            nodes.append(
                helper.make_node(
                    "Add",
                    [total, index.add_initializer(f"{base}/bias", shaped)],
                    [node.output[0]],
                    name=fresh(f"{base}/bias_add"),
                )
            )
        index.replace(matched, nodes)
        return Fired(self.name, node.name, f"{len(branches)} branches")
