"""ConvTranspose with stride 1 -> Conv with the kernel flipped and its in/out axes swapped.

With stride 1 a transposed convolution is an ordinary one: output ``y[o, Y, X]`` sums
``x[c, Y + p - i, X + p - j] * W[c, o, i, j]``; substituting ``i' = k - 1 - i`` makes it the
cross-correlation of ``x`` with ``W'[o, c, i', j'] = W[c, o, k-1-i', k-1-j']``, padded by
``d (k - 1) - p`` on each side (``d`` the dilation). onnxruntime runs ConvTranspose as a
GEMM plus col2im outside its blocked layout; the Conv runs blocked, with its activation
fused. Measured 1 thread: a decoder's 32 -> 16, 3x3 ConvTranspose at 128x128 took 1.04 ms
of its 3.25; with this rewrite the decoder took 0.88x the time (its stride-2 ConvTranspose,
1.87 ms, stays: a phase decomposition like `conv-after-upsampling`'s would take it).

Grouped ones map group by group. Declined: strides other than 1, output padding or an
output shape (they do not arise at stride 1 in a well-formed model), auto_pad, padding
larger than the dilated kernel (the Conv would need negative pads). The same sums in
another order: float rounding only.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_into_upsampling import _ints


def conv_weights(weights: np.ndarray, group: int) -> np.ndarray:
    """ConvTranspose weights [C_in, C_out/g, *k] as Conv weights [C_out, C_in/g, *k]
    (each group's in/out axes swapped, the kernel flipped along every spatial axis)."""
    c_in, out_per_group = weights.shape[:2]
    in_per_group = c_in // group
    spatial = weights.shape[2:]
    grouped = weights.reshape(group, in_per_group, out_per_group, *spatial)
    swapped = np.swapaxes(grouped, 1, 2)  # [g, out/g, in/g, *k]
    flipped = np.flip(swapped, axis=tuple(range(3, 3 + len(spatial))))
    return np.ascontiguousarray(flipped.reshape(group * out_per_group, in_per_group, *spatial))


class StrideOneConvTranspose:
    name = "stride-one-conv-transpose"
    #: The same sums in another order.
    exact = False
    anchors = ("ConvTranspose",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        weights = index.weight(node.input[1])
        if weights is None or weights.dtype != np.float32 or weights.ndim < 3:
            return None
        spatial = weights.ndim - 2
        kernel = list(weights.shape[2:])

        if _ints(index, node, "strides", [1] * spatial) != [1] * spatial:
            return None
        if (
            any(_ints(index, node, "output_padding", [0] * spatial))
            or index.attribute(node, "output_shape") is not None
        ):
            return Declined(self.name, node.name, "the ConvTranspose sets its output size")
        if index.text(node, "auto_pad", "NOTSET") != "NOTSET":
            return Declined(self.name, node.name, "the ConvTranspose uses auto_pad")
        dilations = _ints(index, node, "dilations", [1] * spatial)
        pads = _ints(index, node, "pads", [0] * 2 * spatial)
        extents = [d * (k - 1) for d, k in zip(dilations, kernel, strict=True)]
        conv_pads = [extents[a % spatial] - p for a, p in enumerate(pads)]
        if min(conv_pads) < 0:
            return Declined(self.name, node.name, "the padding is larger than the kernel")
        group = int(index.attribute(node, "group", 1))
        if weights.shape[0] % group:
            return None
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is not None and index.weight(bias) is None:
            return Declined(self.name, node.name, "the bias is computed")
        if not index.is_free([node]):
            return None
        index.claim([node])
        base = node.name or node.output[0]
        name = index.add_initializer(f"{base}/conv_weights", conv_weights(weights, group))
        conv = helper.make_node(
            "Conv",
            [node.input[0], name, *([bias] if bias else [])],
            [node.output[0]],
            name=base,
            kernel_shape=kernel,
            pads=conv_pads,
            dilations=dilations,
            group=group,
        )
        index.replace([node], [conv])
        return Fired(self.name, node.name, f"kernel {kernel}, Conv pads {conv_pads}")
