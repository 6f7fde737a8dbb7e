"""Depthwise Conv on a per-channel quantized input, requantized after -> the input's
per-channel scales folded into the weights' scales, so onnxruntime runs a QLinearConv.

NNCF quantizes a depthwise convolution's input per channel, and OpenVINO runs such a layer
on its int8 depthwise kernel. onnxruntime's integer convolutions take one input scale, so
the converter's form ``per-axis DQ -> Conv`` stays a float Conv (and a per-axis DQ feeding
a fused group fails at run time, hence the ``Max(t, -inf)`` guard after it). A depthwise
output channel reads one input channel only, so its input scale can travel to its weights:

    y[o] = sum((q[c] - z) * s_x[c] * (w[o] - z_w) * s_w[o]),  c = o // multiplier
         = sum((q[c] - z) * 1.0 * (w[o] - z_w) * (s_w[o] * s_x[c]))

``DQ(q, 1.0, z) -> Conv(DQ(w, s_w * s_x)) -> Q`` is a per-tensor input with per-channel
weights, the group onnxruntime's QDQ transformer turns into QLinearConv. It needs one zero
point for all channels (NNCF's symmetric activations: 0 after a ReLU, 128 otherwise) and
a QuantizeLinear reading the Conv (else no QLinearConv forms, and a depthwise ConvInteger
is slower than the float Conv: see ``conv_integer``). The integer sums are the same; the
product ``s_w * s_x`` is rounded to float32 once, the requantization's scale is the same
product, so outputs agree to float rounding (measured bit-identical on NNCF's networks
apart from values on a rounding boundary).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._dequantized import dequantized_operands, weight_dequantization
from b2s_onnx.rewrites._fusion_guard import is_guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_integer import is_depthwise

STANDARD = ("", "ai.onnx")
READ_IN_FLOAT = (
    "its output is read in float: no QLinearConv forms, and a depthwise ConvInteger is "
    "slower than the float Conv"
)


class PerChannelInputIntoWeights:
    name = "per-channel-input-into-weights"
    #: The weights' scales change by one float32 rounding of a product.
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        guard = index.producer.get(node.input[0])
        data = guard.input[0] if guard is not None and is_guard(index, guard) else node.input[0]
        operands = dequantized_operands(index, data, node.input[1])
        if operands is None or len(operands[0].input) < 3:
            return None
        data_dq, weights_dq, q = operands
        scale, zero = index.constant(data_dq.input[1]), index.constant(data_dq.input[2])
        if scale is None or zero is None or scale.size < 2:
            return None  # per tensor already (or computed): nothing to fold
        if q is None or q.ndim < 3 or not is_depthwise(node, q.shape):
            return Declined(self.name, node.name, "not a depthwise Conv on constant weights")
        reader = index.only_consumer(node.output[0])
        if reader is None or reader.op_type != "QuantizeLinear" or reader.domain not in STANDARD:
            return Declined(self.name, node.name, READ_IN_FLOAT)
        reader_scale = index.constant(reader.input[1])
        if reader_scale is None or reader_scale.size != 1:
            return Declined(self.name, node.name, "the output is requantized per channel")
        channels = scale.size
        if int(index.attribute(data_dq, "axis", 1)) % q.ndim != 1:
            return Declined(self.name, node.name, "the input's scales are not per channel")
        if int(index.attribute(node, "group", 1)) != channels or q.shape[0] % channels:
            return Declined(self.name, node.name, "the groups do not match the input's scales")
        flat_zero = zero.reshape(-1)
        if np.any(flat_zero != flat_zero[0]):
            return Declined(self.name, node.name, "the input's zero points differ by channel")
        weights = weight_dequantization(index, weights_dq, q)
        if isinstance(weights, str):
            return Declined(self.name, node.name, weights)
        weights_scale, weights_zero = weights
        removable = _dead_after(index, node, guard, data_dq, data)
        matched = [node, *removable, *index.sole_feeders(node, weights_dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        multiplier = q.shape[0] // channels
        folded = (
            weights_scale * np.repeat(scale.astype(np.float32).reshape(-1), multiplier)
        ).astype(np.float32)
        unit = index.add_initializer(f"{base}/input_scale", np.asarray(1.0, np.float32))
        input_zero = index.add_initializer(f"{base}/input_zero_point", flat_zero[:1].reshape(()))
        dequantized = index.names.fresh(f"{base}/input")
        folded_name = index.add_initializer(f"{base}/weights_scale", folded)
        zero_name = index.add_initializer(f"{base}/weights_zero_point", weights_zero)
        weights_name = index.names.fresh(f"{base}/weights")
        conv = onnx.NodeProto()
        conv.CopyFrom(node)
        conv.input[0], conv.input[1] = dequantized, weights_name
        replacements = [
            helper.make_node(
                "DequantizeLinear", [data_dq.input[0], unit, input_zero], [dequantized]
            ),
            helper.make_node(
                "DequantizeLinear",
                [weights_dq.input[0], folded_name, zero_name],
                [weights_name],
                axis=0,
            ),
            conv,
        ]
        index.replace(matched, replacements)
        for gone in removable:
            report.absorbed[gone.output[0]] = node.output[0]
        return Fired(self.name, node.name, f"{channels} input scales folded into the weights")


def _dead_after(
    index: GraphIndex,
    conv: onnx.NodeProto,
    guard: onnx.NodeProto | None,
    data_dq: onnx.NodeProto,
    data: str,
) -> list[onnx.NodeProto]:
    """The guard and per-channel DequantizeLinear that nothing reads once the Conv reads
    the integers directly (either may have other readers: then it stays)."""
    removable: list[onnx.NodeProto] = []
    if data != conv.input[0]:
        if index.only_consumer(guard.output[0]) is not conv or not index.can_rename(
            guard.output[0]
        ):
            return removable
        removable.append(guard)
        last_reader = guard
    else:
        last_reader = conv
    if index.only_consumer(data_dq.output[0]) is last_reader:
        removable.append(data_dq)
    return removable
