"""DequantizeLinear -> Reshape/Transpose/Squeeze/Unsqueeze/Flatten/Split/MaxPool -> the op on
the integers, then DequantizeLinear (one per output of a Split).

onnxruntime's QDQ transformer looks for DequantizeLinear right before a MatMul or Conv; a
Reshape between them (a classifier's flatten before its first fully connected layer)
leaves the layer in float. Per-tensor dequantization multiplies every element alike, so
moving data before or after it gives the same bits. MaxPool only selects, and with a
positive scale dequantization keeps the order, so the maximum of the integers dequantizes
to the maximum of the values. Without this, a Conv after a MaxPool (OpenVINO runs it in
INT8: MaxPool keeps precision) gets float weights, which onnxruntime re-quantizes per
tensor for a kernel measured 1.8x slower than the per-channel one.

A DequantizeLinear that other nodes read too stays for them, and the op gets its own after
it: YOLOv5's SPPF pools its input three times in a row and concatenates all four, which
then reach the next Conv as integers (``concat-before-dequantize``).
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

MOVEMENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
#: Movement with several outputs: each gets its own DequantizeLinear.
SPLITTING = frozenset({"Split"})
#: Ops that pick elements by comparing them: they commute with an increasing dequantization.
SELECTION = frozenset({"MaxPool"})


class DequantizeAfterMovement:
    name = "dequantize-after-movement"
    anchors = tuple(sorted(MOVEMENT | SELECTION | SPLITTING))
    #: A chain (three pools in a row) moves one op per pass.
    until_settled = True

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        dequantize = index.producer.get(node.input[0])
        if (
            dequantize is None
            or dequantize.op_type != "DequantizeLinear"
            or dequantize.domain not in ("", "ai.onnx")
        ):
            return None
        # A DequantizeLinear other nodes read too stays for them (YOLOv5's SPPF: the pools'
        # input and each pool's output also feed one Concat).
        shared = index.only_consumer(dequantize.output[0]) is None
        scale = index.constant(dequantize.input[1])
        if scale is None or scale.size != 1:
            return Declined(self.name, node.name, "the dequantization is not per-tensor")
        if node.op_type in SELECTION and (float(scale.reshape(-1)[0]) <= 0 or len(node.output) > 1):
            return Declined(self.name, node.name, "a non-positive scale or MaxPool indices")
        replaced = [node] if shared else [dequantize, node]
        if not index.is_free(replaced):
            return None
        index.claim(replaced)
        moved = onnx.NodeProto()
        moved.CopyFrom(node)
        moved.input[0] = dequantize.input[0]
        nodes = [moved]
        count = len(node.output) if node.op_type in SPLITTING else 1
        for position in range(count):
            if not node.output[position]:
                continue
            moved.output[position] = index.names.fresh(f"{node.output[position]}/quantized")
            late = onnx.NodeProto()
            late.CopyFrom(dequantize)
            late.input[0] = moved.output[position]
            late.output[0] = node.output[position]
            late.name = index.names.fresh(f"{node.name}/dequantize")
            nodes.append(late)
        index.replace(replaced, nodes)
        if not shared:
            report.absorbed[dequantize.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"after {node.op_type}")
