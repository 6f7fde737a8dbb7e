"""ConvTranspose with stride s >= 2 and kernel k a multiple of s, k > s (a decoder's
4x4/2 upsampling) -> s*s Convs of (k/s)x(k/s) on its input, one per output phase, + Concat
+ the interleave of `conv-after-upsampling`.

Output row ``s q + r`` of a transposed convolution only receives the kernel taps
``t = t0 + s m`` with ``t0 = (r + pad_begin) mod s``, from input rows ``q + e - m``
(``e = (r + pad_begin - t0) / s``): for each phase r that is an ordinary cross-correlation
with the M = k / s taps reversed, padded by ``M - 1 - e`` before. The s*s phases (rows and
columns) are Convs onnxruntime runs in its blocked layout, their activation fused, where it
runs ConvTranspose as a GEMM plus col2im outside it.

Taken when every phase has the same length (the output size a multiple of s) and needs no
negative padding; group 1, no dilation, no output padding or output shape, static input
shape. Float rounding only (the same products, summed in another order).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_after_upsampling import activated, interleave_phases, static_nhw
from b2s_onnx.rewrites.conv_into_upsampling import _activation, _ints


def phase_geometry(
    size: int, kernel: int, stride: int, pad_begin: int, pad_end: int
) -> list[tuple[int, int, int]] | None:
    """Per output phase r: (first tap t0, Conv pad before, Conv pad after), or None when
    the phases differ in length or one would need a negative pad."""
    out = (size - 1) * stride - pad_begin - pad_end + kernel
    if out <= 0 or out % stride:
        return None
    taps, length = kernel // stride, out // stride
    phases = []
    for r in range(stride):
        t0 = (r + pad_begin) % stride
        e = (r + pad_begin - t0) // stride
        before = taps - 1 - e
        after = length - size - before + taps - 1
        if before < 0 or after < 0:
            return None
        phases.append((t0, before, after))
    return phases


class StridedConvTransposeAsPhases:
    name = "strided-conv-transpose-as-phases"
    #: The same products summed in another order.
    exact = False
    anchors = ("ConvTranspose",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        weights = index.weight(node.input[1])
        if weights is None or weights.dtype != np.float32 or weights.ndim != 4:
            return None

        strides = _ints(index, node, "strides", [1, 1])
        kernel = list(weights.shape[2:])
        if strides[0] != strides[1] or strides[0] < 2:
            return None
        stride = strides[0]
        if any(k % stride or k <= stride for k in kernel):
            return Declined(
                self.name, node.name, "the kernel is not a multiple of the stride above it"
            )
        if (
            int(index.attribute(node, "group", 1)) != 1
            or _ints(index, node, "dilations", [1, 1]) != [1, 1]
            or any(_ints(index, node, "output_padding", [0, 0]))
            or index.attribute(node, "output_shape") is not None
            or index.text(node, "auto_pad", "NOTSET") != "NOTSET"
        ):
            return Declined(self.name, node.name, "grouped, dilated, auto-padded or output-sized")
        small = static_nhw(index, node.input[0])
        if small is None:
            return Declined(self.name, node.name, "the input's shape is not static")
        n, height, width = small
        pads = _ints(index, node, "pads", [0, 0, 0, 0])
        rows = phase_geometry(height, kernel[0], stride, pads[0], pads[2])
        columns = phase_geometry(width, kernel[1], stride, pads[1], pads[3])
        if rows is None or columns is None:
            return Declined(self.name, node.name, "the phases differ in size or need cropping")
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if bias is not None and index.weight(bias) is None:
            return Declined(self.name, node.name, "the bias is computed")
        activation = _activation(index, node.output[0])
        matched = [node, *([activation] if activation else [])]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        outputs = weights.shape[1]
        base = node.name or node.output[0]
        fresh = index.names.fresh
        taps = [k // stride for k in kernel]
        nodes, phases = [], []
        for r, (t0_r, before_r, after_r) in enumerate(rows):
            for c, (t0_c, before_c, after_c) in enumerate(columns):
                picked = weights[:, :, t0_r::stride, t0_c::stride][:, :, ::-1, ::-1]
                phase_weights = np.ascontiguousarray(np.swapaxes(picked, 0, 1))
                weight_name = index.add_initializer(f"{base}/phase{r}{c}", phase_weights)
                phase = fresh(f"{base}/phase{r}{c}")
                nodes.append(
                    helper.make_node(
                        "Conv",
                        [node.input[0], weight_name, *([bias] if bias else [])],
                        [phase],
                        name=phase,
                        kernel_shape=taps,
                        pads=[before_r, before_c, after_r, after_c],
                    )
                )
                tail, phase = activated(index, activation, phase, f"phase{r}{c}")
                nodes += tail
                phases.append(phase)
        joined = fresh(f"{base}/phases")
        final = matched[-1].output[0]
        nodes.append(helper.make_node("Concat", phases, [joined], name=joined, axis=1))
        length = (
            height + rows[0][1] + rows[0][2] - taps[0] + 1,
            width + columns[0][1] + columns[0][2] - taps[1] + 1,
        )
        nodes += interleave_phases(index, joined, final, base, outputs, (n, *length), block=stride)
        index.replace(matched, nodes)
        if activation is not None:
            report.absorbed[node.output[0]] = final
        return Fired(self.name, node.name, f"{stride * stride} phases of {taps[0]}x{taps[1]}")
