"""ConvTranspose followed by Add of a per-channel constant -> ConvTranspose with a bias.

onnxruntime folds such an Add into Conv itself, but not into ConvTranspose, where it stays
a full pass over the (upsampled, so large) output: on text-image-super-resolution-0001's
[1,4,1080,1920] output the folded form is 16% faster, with the same bits (onnxruntime adds
a ConvTranspose bias after accumulating, as the separate Add did).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class ConvTransposeBias:
    name = "conv-transpose-bias"
    anchors = ("ConvTranspose",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if len([name for name in node.input if name]) != 2:
            return None
        add = index.only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            return None
        other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
        bias = index.constant(other)
        weights = index.constant(node.input[1])
        if bias is None or weights is None:
            return Declined(self.name, node.name, "the weights or the added value vary")
        if bias.dtype != weights.dtype:
            return Declined(self.name, node.name, "the added value's type differs")
        channels = weights.shape[1] * int(index.attribute(node, "group", 1))
        rank = weights.ndim
        if bias.ndim > rank:
            return Declined(self.name, node.name, "the Add broadcasts to a higher rank")
        padded = (1,) * (rank - bias.ndim) + tuple(bias.shape)
        if padded[0] != 1 or padded[1] not in (1, channels) or any(d != 1 for d in padded[2:]):
            return Declined(
                self.name, node.name, f"the added value {list(bias.shape)} is not per-channel"
            )
        if not index.is_free([node, add]):
            return None
        index.claim([node, add])
        values = np.broadcast_to(bias.reshape(-1), (channels,)).astype(bias.dtype)
        bias_name = index.add_initializer(f"{node.name}/bias", np.ascontiguousarray(values))
        fused = helper.make_node(
            "ConvTranspose",
            [node.input[0], node.input[1], bias_name],
            [add.output[0]],
            name=node.name,
        )
        fused.attribute.extend(node.attribute)
        index.replace([node, add], [fused])
        report.absorbed[node.output[0]] = add.output[0]
        return Fired(self.name, node.name, f"bias of {channels} channels")
