"""Conv quantized per output channel -> the output scales divided into the weights' scales
and the bias, so the QuantizeLinear after it is per tensor (scale 1) and onnxruntime runs
the layer as a QLinearConv.

NNCF quantizes a depthwise convolution's input per channel, so the layer before it (the
1x1 expansion of every MobileNetV2/V3 block) ends in a per-channel FakeQuantize, written
as ``DQ -> Conv -> [Relu | Clip] -> Max(t, -inf) -> per-axis QuantizeLinear``. onnxruntime
1.31 fuses a Conv group ending in a per-axis QuantizeLinear into a QLinearConv that fails
at run time, hence the guard; the layer then runs as ConvInteger, and its int32 sums are
dequantized, clamped and quantized again in float, four passes over the block's widest
tensor. Quantizing per channel is dividing each channel by its own scale, and a channel of
a Conv's output is made by that channel's weights and bias alone:

    rint(conv(x, w * s_w)[o] + b[o]) / s_y[o])  ==  rint(conv(x, w * (s_w[o] / s_y[o]))[o]
                                                        + b[o] / s_y[o])

so ``DQ(w, s_w / s_y) -> Conv(bias b / s_y) -> QuantizeLinear(scale 1, zero point z)``
gives the same integers (up to the float rounding of the changed order), per tensor: the
group onnxruntime fuses into a QLinearConv. The per-axis DequantizeLinear after it is
untouched, so every reader sees the same values; the depthwise layer reading them takes its
per-channel scales into its weights (``per-channel-input-into-weights``) and the block runs
as two chained QLinearConvs. A Relu or Clip between the Conv and the QuantizeLinear must be
one the QuantizeLinear makes redundant (``clamp-before-quantize``'s test): a per-channel
scale does not carry a clamp's bounds.

It needs one zero point for all channels (NNCF's symmetric activations), constant 8-bit
weights quantized per output channel, and an input onnxruntime's integer convolution takes
(per tensor, or per channel into a depthwise layer's weights).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import dequantized_operands, weight_dequantization
from b2s_onnx.rewrites._fusion_guard import is_guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.clamp_before_quantize import why_clamp_matters
from b2s_onnx.rewrites.conv_integer import is_depthwise

STANDARD = ("", "ai.onnx")


class PerChannelOutputIntoWeights:
    name = "per-channel-output-into-weights"
    #: The weights' scales and the bias change by one float32 rounding of a quotient.
    exact = False
    anchors = ("QuantizeLinear",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        scale = index.constant(node.input[1])
        if scale is None or scale.size < 2 or len(node.input) < 3:
            return None
        chain = _chain(index, node.input[0])
        if chain is None:
            return None
        conv, between = chain
        if conv.op_type != "Conv" or conv.domain not in STANDARD:
            return None
        operands = dequantized_operands(index, conv.input[0], conv.input[1])
        if operands is None:
            return None
        data_dq, weights_dq, q = operands
        if q is None or q.ndim < 3:
            return Declined(self.name, node.name, "the weights are not a constant")
        why = _why_not(index, node, conv, data_dq, q, scale)
        if why is None:
            why = next(
                (
                    reason
                    for c in between
                    if c.op_type in ("Relu", "Clip")
                    and (reason := why_clamp_matters(index, c, node)) is not None
                ),
                None,
            )
        weights = weight_dequantization(index, weights_dq, q)
        if why is None and isinstance(weights, str):
            why = weights
        if why is not None:
            return Declined(self.name, node.name, why)
        bias = index.constant(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        if len(conv.input) > 2 and conv.input[2] and bias is None:
            return Declined(self.name, node.name, "the bias is computed")
        matched = [node, conv, *between]
        if index.only_consumer(weights_dq.output[0]) is conv:
            matched.append(weights_dq)
        if not index.is_free(matched):
            return None
        index.claim(matched)
        weights_scale, weights_zero = weights
        channels = q.shape[0]
        output_scale = scale.astype(np.float32).reshape(-1)
        base = conv.name or conv.output[0]
        folded = index.add_initializer(
            f"{base}/weights_scale", (weights_scale / output_scale).astype(np.float32)
        )
        zero_name = index.add_initializer(f"{base}/weights_zero_point", weights_zero)
        weights_name = index.names.fresh(f"{base}/weights")
        summed = index.names.fresh(f"{base}/scaled")
        new_conv = onnx.NodeProto()
        new_conv.CopyFrom(conv)
        new_conv.input[1] = weights_name
        new_conv.output[0] = summed
        if bias is not None:
            scaled_bias = (
                np.broadcast_to(bias.astype(np.float32).reshape(-1), (channels,)) / output_scale
            ).astype(np.float32)
            new_conv.input[2] = index.add_initializer(f"{base}/bias", scaled_bias)
        zero = index.constant(node.input[2]).reshape(-1)[:1].reshape(())
        unit = index.add_initializer(f"{base}/output_scale", np.asarray(1.0, np.float32))
        zero_point = index.add_initializer(f"{base}/output_zero_point", zero)
        replacements = [
            helper.make_node(
                "DequantizeLinear",
                [weights_dq.input[0], folded, zero_name],
                [weights_name],
                axis=0,
            ),
            new_conv,
            helper.make_node(
                "QuantizeLinear", [summed, unit, zero_point], [node.output[0]], name=node.name
            ),
        ]
        index.replace(matched, replacements)
        for gone in between:
            report.absorbed[gone.output[0]] = node.output[0]
        report.absorbed[conv.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"{channels} output scales folded into the weights")


def _chain(index: GraphIndex, name: str) -> tuple[onnx.NodeProto, list[onnx.NodeProto]] | None:
    """The layer behind ``name`` and the guard/clamp nodes between (each read once)."""
    between: list[onnx.NodeProto] = []
    node = index.producer.get(name)
    while node is not None and len(between) < 2:
        kind = "guard" if is_guard(index, node) else node.op_type
        if kind not in ("guard", "Relu", "Clip") or node.domain not in STANDARD:
            break
        if any(("guard" if is_guard(index, b) else b.op_type) == kind for b in between):
            return None
        between.append(node)
        node = index.producer.get(node.input[0])
    if node is None:
        return None
    for reader in [*between, node]:
        if index.only_consumer(reader.output[0]) is None:
            return None
    return node, between


def _why_not(
    index: GraphIndex,
    quantize: onnx.NodeProto,
    conv: onnx.NodeProto,
    data_dq: onnx.NodeProto,
    q: np.ndarray,
    scale: np.ndarray,
) -> str | None:
    """Why the per-axis QuantizeLinear cannot become per tensor, or None."""
    zero = index.constant(quantize.input[2])
    if zero is None or zero.dtype not in (np.uint8, np.int8):
        return "the zero point is not a uint8/int8 constant"
    if np.any(zero.reshape(-1) != zero.reshape(-1)[0]):
        return "the output's zero points differ by channel"
    if scale.dtype != np.float32 or not np.all(scale > 0):
        return "the output's scale is not a positive float32 constant"
    if int(index.attribute(quantize, "axis", 1)) % q.ndim != 1 or scale.size != q.shape[0]:
        return "the output is not quantized per channel"
    data_scale = index.constant(data_dq.input[1])
    if data_scale is None:
        return "the input's scale is computed"
    if data_scale.size > 1 and not is_depthwise(conv, q.shape):
        return "the input is quantized per channel: no integer convolution takes it"
    return None
