"""A quantized stride-2 Conv with a large kernel on 1 to 3 channels (an image's first layer:
7x7/2, 5x5/2) -> the same sums as a stride-1 Conv on the bytes rearranged by SpaceToDepth.

onnxruntime's QLinearConv runs in NHWC and gathers each output pixel's taps channel run by
channel run; with 3 channels (4 after ``quantized-input-channels-to-four``) a 7x7 kernel is
49 runs of 3-4 bytes. SpaceToDepth with block 2 turns a stride-2 KxK Conv on C channels into
a stride-1 ceil(K/2) x ceil(K/2) Conv on 4C channels: 16 runs of 12 bytes for 7x7. Measured
1 thread, median of 40 interleaved runs, the whole ``Q -> ... -> Q`` group, against the
faster of the plain and the 4-channel QLinearConv:

    input -> output channels, size, kernel/stride    space-to-depth / best before
    3 -> 32, 300, 7/2 (face-detection-retail-0004)   0.71
    3 -> 64, 224, 7/2 (ResNet's stem)                0.73
    3 -> 16, 224, 7/2                                0.70
    3 -> 32, 256, 5/2                                0.76
    3 -> 16, 128, 5/2                                0.78
    3 -> 32, 300, 3/2                                1.02 (not rewritten)

The weights of block position (dy, dx), channel c, tap (ky, kx) are the original's at
(2ky + dy, 2kx + dx); taps past the kernel's edge get the output channel's weight zero
point, so they add ``(x - z_x) * 0``. The input is padded with its zero point (the
original's padding, and one more row or column where the padded size is odd). Every
integer sum is the original's: bit-exact. Only where a QLinearConv forms (a QuantizeLinear
is the Conv's one reader) and the input is quantized per tensor; runs before
``quantized-input-channels-to-four``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import (
    dequantized_operands,
    per_tensor_bytes,
    weight_dequantization,
)
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.quantized_input_channels_to_four import BEHIND_TRANSPOSE, behind_transpose

STANDARD = ("", "ai.onnx")
#: The block of the rearrangement: the stride it takes away.
BLOCK = 2
#: The smallest kernel side it pays for (3x3/2: a tie).
MIN_KERNEL = 5
#: Input channels it is for: an image's (4C must stay small for one gather to pay).
MAX_CHANNELS = 3


class StridedInputConvAsSpaceToDepth:
    name = "strided-input-conv-as-space-to-depth"
    exact = True
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        operands = dequantized_operands(index, node.input[0], node.input[1])
        if operands is None:
            return None
        data_dq, weights_dq, q = operands
        if q is None or q.ndim != 4 or not 1 <= q.shape[1] <= MAX_CHANNELS:
            return None
        kernel = q.shape[2:]
        strides = list(index.attribute(node, "strides", [1, 1]))
        if strides != [BLOCK, BLOCK] or min(kernel) < MIN_KERNEL:
            return None
        if int(index.attribute(node, "group", 1)) != 1:
            return None
        if any(d != 1 for d in index.attribute(node, "dilations", [1, 1])):
            return None
        if index.text(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return Declined(self.name, node.name, "auto_pad SAME: the padding is not spelled")
        reader = index.only_consumer(node.output[0])
        if reader is None or reader.op_type != "QuantizeLinear" or reader.domain not in STANDARD:
            return None  # no QLinearConv forms: nothing to gain
        shape = index.info(node.input[0]).shape
        if shape is None or len(shape) != 4 or any(d is None for d in shape[2:]):
            return Declined(self.name, node.name, "the input's height or width is unknown")
        data = per_tensor_bytes(index, data_dq)
        if isinstance(data, str):
            return Declined(self.name, node.name, data)
        weights = weight_dequantization(index, weights_dq, q)
        if isinstance(weights, str):
            return Declined(self.name, node.name, weights)
        if behind_transpose(index, data_dq.input[0]):
            return Declined(self.name, node.name, BEHIND_TRANSPOSE)
        pads = list(index.attribute(node, "pads", [0, 0, 0, 0]))
        before = pads[:2]
        after = []
        for axis in range(2):
            padded = shape[2 + axis] + pads[axis] + pads[axis + 2]
            out = (padded - kernel[axis]) // BLOCK + 1
            taps = -(-kernel[axis] // BLOCK)
            # Rows the stride-1 Conv reads: (out + taps - 1) blocks of BLOCK.
            after.append(BLOCK * (out + taps - 1) - shape[2 + axis] - before[axis])
        if min(after) < 0:
            return Declined(self.name, node.name, "the Conv drops trailing rows or columns")
        matched = [node, *index.sole_feeders(node, weights_dq, data_dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        rearranged = _rearranged(q, weights[1])
        zero = data[1]
        fresh = index.names.fresh
        pad_amounts = index.add_initializer(
            f"{base}/block_pads", np.asarray([0, 0, *before, 0, 0, *after], np.int64)
        )
        fill = index.add_initializer(f"{base}/input_zero_point", zero.reshape(()))
        padded = fresh(f"{base}/input_padded_q")
        blocks = fresh(f"{base}/input_blocks_q")
        dequantized = fresh(f"{base}/input_blocks")
        weights_name = fresh(f"{base}/weights_blocks_dq")
        conv = onnx.NodeProto()
        conv.CopyFrom(node)
        conv.input[0], conv.input[1] = dequantized, weights_name
        del conv.attribute[:]
        conv.attribute.extend(
            a
            for a in node.attribute
            if a.name not in ("pads", "strides", "kernel_shape", "auto_pad")
        )
        conv.attribute.append(helper.make_attribute("strides", [1, 1]))
        weights_attributes = {"axis": int(index.attribute(weights_dq, "axis", 1))}
        block_weights = index.add_initializer(f"{base}/weights_blocks", rearranged)
        replacements = [
            helper.make_node(
                "Pad", [data_dq.input[0], pad_amounts, fill], [padded], mode="constant"
            ),
            helper.make_node("SpaceToDepth", [padded], [blocks], blocksize=BLOCK),
            helper.make_node("DequantizeLinear", [blocks, *data_dq.input[1:3]], [dequantized]),
            helper.make_node(
                "DequantizeLinear",
                [block_weights, *weights_dq.input[1:]],
                [weights_name],
                **weights_attributes,
            ),
            conv,
        ]
        index.replace(matched, replacements)
        side = "x".join(str(k) for k in kernel)
        detail = f"{side}/2 on {q.shape[1]} channels as {list(rearranged.shape[1:])}"
        return Fired(self.name, node.name, detail)


def _rearranged(q: np.ndarray, weights_zero: np.ndarray) -> np.ndarray:
    """``q`` [O, C, KH, KW] as the weights of the stride-1 Conv on SpaceToDepth's output:
    [O, BLOCK^2 C, ceil(KH/2), ceil(KW/2)], channel ``(dy * BLOCK + dx) * C + c`` (ONNX's
    SpaceToDepth order), taps past the kernel at the weight zero point."""
    out, channels, height, width = q.shape
    taps = (-(-height // BLOCK), -(-width // BLOCK))
    padded = np.empty((out, channels, BLOCK * taps[0], BLOCK * taps[1]), q.dtype)
    padded[...] = weights_zero.reshape(-1, 1, 1, 1)
    padded[:, :, :height, :width] = q
    # [O, C, ty, dy, tx, dx] -> [O, dy, dx, C, ty, tx]
    split = padded.reshape(out, channels, taps[0], BLOCK, taps[1], BLOCK)
    moved = split.transpose(0, 3, 5, 1, 2, 4)
    return np.ascontiguousarray(moved.reshape(out, BLOCK * BLOCK * channels, *taps))
