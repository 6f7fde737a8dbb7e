"""A quantized grouped Conv of 2, 4 or 8 channels a group on a small map, quantized again ->
the same QDQ Conv with groups merged into 16-channel ones (zero-point weights between them),
for onnxruntime's QLinearConv.

`grouped-conv-integer` writes such layers as ConvInteger, which beats QLinearConv's grouped
path (one small GEMM per group) on large maps. On small maps ConvInteger's own per-group
work dominates, and QLinearConv over merged 16-channel groups (twice to eight times the
multiply-adds, every added product an exact zero) is faster still. Measured from input
bytes to output bytes, 3x3, interleaved medians of 40, AMD EPYC with AVX-512 VNNI:
merged QLinearConv / ConvInteger form, 1 thread (2 threads):

    channels / width   7x7           14x14         20x20         28x28
    128 / 8            0.50 (0.43)   0.78 (0.52)   0.93 (0.24)   1.19
    368 / 8                          0.77 (0.51)
    448 / 8            0.44 (0.53)
    256 / 4            0.47 (0.60)   0.81 (0.85)
    128 / 2            0.49 (0.71)   0.82 (0.84)
    64 / 4                                                       1.28

So maps of up to 400 output positions take this form, larger ones ConvInteger. NNCF's INT8
RegNetX-200MF (random weights): the seven grouped layers of its last stage (46 groups of 8
at 7x7) merge, 0.81x the model's time at 1 thread and 0.89x at 2; its 19 groups at 14x14
cannot (an odd count). RegNetY-400MF: 0.95x and 0.76x.

The integer sums are those of the grouped QLinearConv; the requantization is QLinearConv's,
as for every other quantized Conv here (see `conv-integer`).
"""

from __future__ import annotations

import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import weight_dequantization
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Fired, RewriteReport
from b2s_onnx.rewrites.few_channels_conv_integer import quantized_again_operands
from b2s_onnx.rewrites.grouped_conv_in_blocks import BLOCK, merged_weights, regrouped

#: Input channels a group that merge into whole 16-channel groups.
WIDTHS = (2, 4, 8)
#: The most output positions (height x width) for which the merged QLinearConv measured
#: faster than ConvInteger (module doc).
MAX_POSITIONS = 400


class QuantizedGroupsInBlocks:
    name = "quantized-grouped-conv-in-blocks"
    #: The same integer sums, but the float rounding of the original QDQ graph differs.
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        group = int(index.attribute(node, "group", 1))
        if group == 1:
            return None
        operands = quantized_again_operands(index, node)
        if operands is None:
            return None
        _, weights_dq, weights = operands
        if weights is None or weights.ndim != 4 or weights.shape[1] not in WIDTHS:
            return None
        out_channels, width = weights.shape[:2]
        factor = BLOCK // width
        if group % factor or out_channels % group or (out_channels // group * factor) % BLOCK:
            return None
        shape = index.info(node.output[0]).shape
        if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
            return None
        if shape[2] * shape[3] > MAX_POSITIONS:
            return None
        dequantization = weight_dequantization(index, weights_dq, weights)
        if isinstance(dequantization, str):
            return None
        _, zero = dequantization
        matched = [node, *index.sole_feeders(node, weights_dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        merged = merged_weights(weights, group, factor, fill=zero)
        codes = index.add_initializer(f"{base}/merged_groups", merged)
        dequantized = index.names.fresh(f"{base}/merged_weights")
        new_dq = helper.make_node(
            "DequantizeLinear",
            [codes, *weights_dq.input[1:]],
            [dequantized],
            name=f"{base}/merged_weights",
        )
        new_dq.attribute.extend(weights_dq.attribute)
        conv = regrouped(node, dequantized, group // factor)
        index.replace(matched, [new_dq, conv])
        return Fired(
            self.name,
            node.name,
            f"{group} groups of {width} channels -> {group // factor} of {width * factor} "
            f"at {shape[2]}x{shape[3]}",
        )
