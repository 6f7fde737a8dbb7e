"""A quantized grouped Conv of 2, 4 or 8 channels a group on a small map, quantized again ->
the same QDQ Conv with groups merged into 16-channel ones (zero-point weights between them),
or a few groups into one dense Conv, for onnxruntime's QLinearConv; pairs of 24-channel
groups into 48-channel ones on any map.

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

So maps of up to 400 output positions take this form, larger ones ConvInteger.

Groups of 24 channels do not take ConvInteger (`grouped-conv-integer` stops at 8): they run
as QLinearConv's grouped path, and pairs of them merged into 48-channel groups took 0.61-0.88x
its time at 1 thread and 0.71-0.96x at 2, from 48 channels at 56x56 to 1008 at 7x7 (RegNet
stage shapes), so they merge on maps of any size.

A group count that 16 / width does not divide (RegNet's odd counts of 8-channel groups) has
no 16-channel merge; up to 7 groups merge into one dense QLinearConv instead (up to 7x the
multiply-adds), from 16 channels on, on maps of up to 784 positions. Dense QLinearConv /
ConvInteger form, 1 thread (2 threads):

    channels / width (groups)   14x14         28x28         56x56
    24 / 8 (3)                                0.61 (0.52)   0.78
    40 / 8 (5)                                0.65 (0.48)   0.90
    56 / 8 (7)                  0.57 (0.44)   0.77 (0.76)   1.04
    24 / 4 (6)                  0.59          0.64 (0.51)
    28 / 4 (7)                                0.64 (0.71)
    104 / 8 (13)                0.78 (0.60)   1.16
    152 / 8 (19)                1.02          1.54
    12 / 2 (6)                                1.14

NNCF's INT8 RegNetX-200MF (random weights): the seven grouped layers of its last stage (46
groups of 8 at 7x7) merge into 16-channel groups and its 7 groups at 28x28 into one dense
Conv, 0.72x the model's time at 1 thread and 0.61x at 2 (the 16-channel merge alone: 0.81x,
0.89x); its 19 groups at 14x14 and 3 at 56x56 stay ConvInteger. RegNetY-400MF: 0.96x and
0.78x.

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
from b2s_onnx.rewrites.grouped_conv_in_blocks import BLOCK, FACTORS, merged_weights, regrouped

#: Input channels a group that merge into whole 16-channel groups (which would otherwise
#: run as ConvInteger), and 24, whose pairs merge into 48-channel groups (which would
#: otherwise run as a grouped QLinearConv).
WIDTHS = (2, 4, 8, 24)
#: The most output positions (height x width) for which the merged QLinearConv measured
#: faster than ConvInteger (module doc).
MAX_POSITIONS = 400
#: Odd group counts: the most groups merged into one dense QLinearConv, the most output
#: positions, and the fewest channels for which that measured faster (module doc).
MAX_DENSE_GROUPS = 7
MAX_DENSE_POSITIONS = 784
MIN_DENSE_CHANNELS = 16
#: The wide group width whose pairs merge on maps of any size.
WIDE = 24


def _factor(group: int, width: int, out_per_group: int, positions: int) -> int | None:
    """How many groups to merge: into 16-channel groups on small maps, all of a few groups
    into one dense Conv where 16 / width does not divide their count; None to leave it."""
    factor = FACTORS[width]
    if group % factor == 0 and (out_per_group * factor) % BLOCK == 0:
        # The alternative for 24-wide groups is QLinearConv's own grouped path, slower on
        # every map measured; for the narrow ones ConvInteger, faster on large maps.
        return factor if width == WIDE or positions <= MAX_POSITIONS else None
    if width == WIDE:
        return None
    if (
        group <= MAX_DENSE_GROUPS
        and positions <= MAX_DENSE_POSITIONS
        and group * width >= MIN_DENSE_CHANNELS
    ):
        return group
    return None


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
        if out_channels % group:
            return None
        shape = index.info(node.output[0]).shape
        if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
            return None
        factor = _factor(group, width, out_channels // group, shape[2] * shape[3])
        if factor is None:
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
