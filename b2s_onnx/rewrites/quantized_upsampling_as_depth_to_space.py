"""A quantized ConvTranspose with kernel == stride, requantized after -> a 1x1 Conv to
``O * s * s`` channels, requantized, then DepthToSpace (CRD) on the bytes.

A ConvTranspose whose kernel equals its stride writes each output pixel from one input
pixel: output ``(o, s*y + i, s*x + j)`` is ``sum_c W[c, o, i, j] * v[c, y, x]`` plus the
bias of ``o``, which is channel ``o*s*s + i*s + j`` of a 1x1 Conv with weights
``W'[o*s*s + i*s + j, c] = W[c, o, i, j]`` put in place by DepthToSpace (CRD). onnxruntime
has no integer ConvTranspose: ``DQ -> ConvTranspose -> Q`` stays a float GEMM plus col2im on
the dequantized input, where ``DQ -> Conv -> Q`` is a QLinearConv. Quantization is per
tensor, so it commutes with DepthToSpace (moving bytes), which then runs on uint8.
text-image-super-resolution-0001 quantized by NNCF (36 -> 4 channels, 3x3 stride 3, from
[360, 640]): the ConvTranspose took 34.5 ms of the model's 55 (1 thread).

The 1x1 Conv takes the ConvTranspose's int8 weights rearranged, their scales repeated per
position, the bias repeated likewise. The integer sums are the same; QLinearConv requantizes
them in its own arithmetic instead of the float ConvTranspose's sum, so a value on a rounding
boundary may land one level away (``conv-integer`` and ``conv-into-upsampling`` describe the
same kind of difference).

``conv-into-upsampling`` composes a float Conv into such a ConvTranspose instead; here the
two are separated by a quantization, which OpenVINO applies, so they cannot compose.
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
from b2s_onnx.rewrites.conv_into_upsampling import plain_upsampling

STANDARD = ("", "ai.onnx")
_QUANTIZE = {("QuantizeLinear", domain) for domain in STANDARD}


class QuantizedUpsamplingAsDepthToSpace:
    name = "quantized-upsampling-as-depth-to-space"
    exact = False
    anchors = ("ConvTranspose",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        operands = dequantized_operands(index, node.input[0], node.input[1])
        if operands is None:
            return None
        data_dq, weights_dq, q = operands
        if q is None or q.ndim != 4 or q.dtype not in (np.int8, np.uint8):
            return None
        kernel = [int(k) for k in q.shape[2:]]
        reason = plain_upsampling(index, node, kernel)
        if reason is None and kernel[0] != kernel[1]:
            reason = "the kernel is not square (DepthToSpace takes one block size)"
        if reason is not None:
            return Declined(self.name, node.name, reason)
        quantize = index.only_consumer(node.output[0])
        if (
            quantize is None
            or quantize.op_type != "QuantizeLinear"
            or quantize.domain not in STANDARD
        ):
            return Declined(self.name, node.name, "its output is not requantized")
        output_scale = index.constant(quantize.input[1])
        if output_scale is None or output_scale.size != 1:
            return Declined(self.name, node.name, "the output is requantized per channel")
        data = per_tensor_bytes(index, data_dq)
        if isinstance(data, str):
            return Declined(self.name, node.name, data)
        weights = weight_dequantization(index, weights_dq, q, channel_axis=1)
        if isinstance(weights, str):
            return Declined(self.name, node.name, weights)
        scale, zero = weights
        channels_in, channels_out = q.shape[:2]
        bias = None
        if len(node.input) > 2 and node.input[2]:
            bias = index.constant(node.input[2])
            if bias is None or bias.size != channels_out:
                return Declined(self.name, node.name, "the bias is not a constant vector")
        matched = [node, quantize, *index.sole_feeders(node, weights_dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        block = kernel[0] * kernel[1]
        # W[c, o, i, j] -> W'[o * s * s + i * s + j, c, 1, 1]
        rearranged = np.ascontiguousarray(
            q.transpose(1, 2, 3, 0).reshape(channels_out * block, channels_in, 1, 1)
        )
        fresh = index.names.fresh
        weights_name = fresh(f"{base}/weights_1x1")
        conv_out = fresh(f"{base}/channels")
        quantized = fresh(f"{base}/channels_q")
        inputs = [data_dq.output[0], weights_name]
        if bias is not None:
            inputs.append(
                index.add_initializer(
                    f"{base}/bias_1x1", np.repeat(bias.reshape(-1).astype(np.float32), block)
                )
            )
        requantized = onnx.NodeProto()
        requantized.CopyFrom(quantize)
        requantized.input[0], requantized.output[0] = conv_out, quantized
        replacements = [
            helper.make_node(
                "DequantizeLinear",
                [
                    index.add_initializer(f"{base}/weights_1x1_q", rearranged),
                    index.add_initializer(f"{base}/weights_1x1_scale", np.repeat(scale, block)),
                    index.add_initializer(f"{base}/weights_1x1_zero", np.repeat(zero, block)),
                ],
                [weights_name],
                axis=0,
            ),
            helper.make_node("Conv", inputs, [conv_out], name=base),
            requantized,
            helper.make_node(
                "DepthToSpace",
                [quantized],
                list(quantize.output),
                name=fresh(f"{base}/depth_to_space"),
                blocksize=kernel[0],
                mode="CRD",
            ),
        ]
        index.replace(matched, replacements)
        report.absorbed[node.output[0]] = quantize.output[0]
        return Fired(
            self.name,
            node.name,
            f"{channels_in} -> {channels_out} x{kernel[0]} as a 1x1 Conv to "
            f"{channels_out * block} channels",
        )
