"""Conv or ConvTranspose followed by Add of a per-channel constant -> the op with a bias.

onnxruntime folds such an Add into a Conv whose weights are an initializer, but not into
ConvTranspose, where it stays a full pass over the (upsampled, so large) output: on
text-image-super-resolution-0001's [1,4,1080,1920] output the folded form is 16% faster;
nor into a Conv whose weights come through DequantizeLinear, where the Add between Conv and
QuantizeLinear keeps onnxruntime from running QLinearConv. Same bits: onnxruntime adds a
bias after accumulating, as the separate Add did.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class ConvBias:
    name = "conv-bias"
    anchors = ("Conv", "ConvTranspose")

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if len([name for name in node.input if name]) != 2:
            return None
        add = index.only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            return None
        other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
        if node.op_type == "Conv" and node.input[1] in index.initializers:
            return None  # onnxruntime folds this Add itself (ConvAddFusion)
        bias = index.constant(other)
        if bias is None:
            return Declined(self.name, node.name, "the added value is computed")
        weights = index.info(node.input[1])
        if weights.shape is None or None in weights.shape[:2]:
            return Declined(self.name, node.name, "the weights' shape is unknown")
        if weights.elem_type != onnx.helper.np_dtype_to_tensor_dtype(bias.dtype):
            return Declined(self.name, node.name, "the added value's type differs")
        if node.op_type == "Conv":
            channels = weights.shape[0]
        else:
            channels = weights.shape[1] * int(index.attribute(node, "group", 1))
        rank = len(weights.shape)
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
            node.op_type,
            [node.input[0], node.input[1], bias_name],
            [add.output[0]],
            name=node.name,
        )
        fused.attribute.extend(node.attribute)
        index.replace([node, add], [fused])
        report.absorbed[node.output[0]] = add.output[0]
        return Fired(self.name, node.name, f"bias of {channels} channels")
