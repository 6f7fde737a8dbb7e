"""A grouped Conv of 2, 4 or 8 channels a group -> the same Conv with groups merged to 16
(and of 24 channels, pairs merged to 48).

onnxruntime runs a grouped (not depthwise) Conv in its blocked layout only when every
group holds whole channel blocks (16 channels with AVX-512); RegNet's and ResNeXt's
narrow groups (8 or 4 channels) fall back to one small im2col GEMM per group, with a
reorder out of the blocked layout before it and back after. Merging ``m`` neighbouring
groups into one whose weights are block-diagonal (zero where an output channel would
read a channel of another original group) gives 16-channel groups, which run blocked:
``m`` times the multiply-adds, and still less time. Measured at 1 thread, a block of a
1x1 Conv, the grouped 3x3 Conv and another 1x1 Conv (interleaved medians, AMD EPYC with
AVX-512; OpenVINO's time in brackets as the yardstick):

| channels, group width, size | as written | merged to 16 | OpenVINO |
|---|---:|---:|---:|
| 128, 8, 28x28 | 0.48 ms | 0.39 ms | 0.42 ms |
| 128, 8, 56x56 stride 2 | 0.96 ms | 0.71 ms | 0.83 ms |
| 64, 4, 56x56 | 0.62 ms | 0.54 ms | 0.65 ms |
| 256, 4, 28x28 | 1.31 ms | 1.22 ms | 1.30 ms |
| 96, 2, 56x56 | 1.17 ms | 1.03 ms | 1.51 ms |

and at 2 threads 0.80, 0.75, 0.87, 0.93, 0.92x the time. Pairs of 24-channel groups
(RegNet's other common width) merged to 48 took 0.83-0.98x at 1 thread and 0.84-0.96x at 2
(RegNet stage shapes from 48 channels at 56x56 to 1008 at 7x7). Other widths measured
slower merged (12 -> 48: 1.10x; 6 -> 48: 1.3x; 40 -> 80 and 56 -> 112: 1.06-1.16x), so only
widths 2, 4, 8 (to 16) and 24 (to 48) are merged, on input and output alike. With AVX2
onnxruntime's block is 8 channels, so 8-wide groups already run blocked there and merging
them doubles their work for nothing; the converter writes for AVX-512, like
`pad-channels-to-block`.

Whole networks, 1 thread (2 threads), against the same conversion without this rewrite and
`pad-channels-to-block`'s grouped regions: RegNetX-200MF (groups of 8, most of them in odd
numbers, padded first) 0.78x (0.69x) the time, 1.28x -> 1.00x OpenVINO; RegNetY-400MF
0.80x (0.38x); RegNetX-600MF (groups of 24) 0.88x (0.44x); a ResNeXt-style stage of groups
of 4 0.76x (0.39x). At 2 threads onnxruntime's per-group GEMMs run slower than at one.

The zero weights add exact zeros to each sum, but the blocked kernel sums in another
order: float rounding. A non-finite input value reaches the output channels of the groups
merged with its own as NaN (``0 * inf``), where the grouped Conv kept them finite.
"""

from __future__ import annotations

import numpy as np
import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Fired, RewriteReport

#: The channel block of onnxruntime's blocked layout with AVX-512.
BLOCK = 16
#: Group widths (input channels a group) worth merging, and how many groups to merge.
FACTORS = {2: 8, 4: 4, 8: 2, 24: 2}


def merged_weights(
    weights: np.ndarray, group: int, factor: int, fill: np.ndarray | None = None
) -> np.ndarray:
    """Conv weights ``[C_out, C_in/g, *k]`` of ``group`` groups as those of ``group /
    factor`` groups: each output channel keeps its taps at its old group's place among the
    ``factor`` groups merged, zeros elsewhere (or ``fill``, one value per output channel:
    quantized weights' zero points, which dequantize to zero)."""
    out_channels, in_per_group = weights.shape[:2]
    out_per_group = out_channels // group
    shape = (out_channels, in_per_group * factor, *weights.shape[2:])
    if fill is None:
        merged = np.zeros(shape, weights.dtype)
    else:
        rows = np.broadcast_to(np.asarray(fill, weights.dtype).reshape(-1), (out_channels,))
        merged = np.empty(shape, weights.dtype)
        merged[...] = rows.reshape(-1, *[1] * (len(shape) - 1))
    for old in range(group):
        place = old % factor
        rows = slice(old * out_per_group, (old + 1) * out_per_group)
        merged[rows, place * in_per_group : (place + 1) * in_per_group] = weights[rows]
    return merged


def regrouped(node: onnx.NodeProto, weights: str, group: int) -> onnx.NodeProto:
    """``node`` (a Conv) reading ``weights`` in ``group`` groups, all else as it was."""
    conv = onnx.helper.make_node(
        "Conv", [node.input[0], weights, *node.input[2:]], list(node.output), name=node.name
    )
    conv.attribute.extend(a for a in node.attribute if a.name != "group")
    conv.attribute.append(onnx.helper.make_attribute("group", group))
    return conv


class GroupedConvInBlocks:
    name = "grouped-conv-in-blocks"
    #: The same products plus exact zeros, summed in another order.
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        group = int(index.attribute(node, "group", 1))
        if group < 2 or len(node.input) < 2:
            return None
        # Weights read straight from an initializer: a DequantizeLinear's output is a
        # quantized layer's (QLinearConv or ConvInteger), which has its own forms.
        if node.input[1] not in index.initializers:
            return None
        weights = index.weight(node.input[1])
        if weights is None or weights.dtype != np.float32 or weights.ndim != 4:
            return None
        if index.produced_by(node.input[0], "DequantizeLinear") is not None:
            return None
        out_channels, in_per_group = weights.shape[:2]
        if out_channels % group:
            return None
        out_per_group = out_channels // group
        factor = FACTORS.get(in_per_group)
        if factor is None:
            return None
        if group % factor or (out_per_group * factor) % BLOCK:
            return None
        if not index.is_free([node]):
            return None
        index.claim([node])
        base = node.name or node.output[0]
        name = index.add_initializer(
            f"{base}/merged_groups", merged_weights(weights, group, factor)
        )
        conv = regrouped(node, name, group // factor)
        index.replace([node], [conv])
        return Fired(
            self.name,
            node.name,
            f"{group} groups of {in_per_group} channels -> {group // factor} of "
            f"{in_per_group * factor}",
        )
