"""DequantizeLinear(u8 x), DequantizeLinear(int8 weights) -> Conv whose output is not
quantized again -> ConvInteger(u8, u8) -> DequantizeLinear(int32 sums, scale_x * scale_w)
-> Add(bias).

onnxruntime runs a Conv on an integer kernel (QLinearConv) only when a QuantizeLinear is
its one reader; a network's last conv, a residual branch before its float Add, or a conv
read by two nodes stays a float Conv on dequantized values. OpenVINO runs these in INT8 and
dequantizes the int32 sums: ``acc * (scale_x * scale_w) + bias``, which is what this form
computes, step for step. onnxruntime 1.31's ConvInteger is fast only with uint8 weights
(measured 1 thread, 32-128 channels: u8 weights 0.8x the float Conv's time, int8 weights
10-13x), so int8 weights with one zero point are shifted by 128 to uint8, the zero point
with them: ``(w + 128) - (zp + 128) == w - zp``, the same integers. Its weight zero point
must be a scalar, so weights quantized with per-channel zero points are declined; per-channel
scales are fine, they are applied after the sum.

Against the float Conv it replaces the outputs differ by float rounding only (the products
of dequantized values rounded one by one there, the exact integer sum scaled once here).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Conv attributes ConvInteger takes under the same names and meanings.
SHARED_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


DEPTHWISE_REASON = "onnxruntime's ConvInteger is no faster than a float depthwise Conv"


def is_depthwise(node: onnx.NodeProto, weights_shape: tuple[int, ...]) -> bool:
    """One input channel per group: measured 1 thread, ConvInteger took 0.96-1.28x the
    time of the float depthwise Conv (32-128 channels), against 0.65-0.71x for 4-8 groups."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return group > 1 and weights_shape[1] == 1


class ConvIntegerUnquantizedOutput:
    name = "conv-integer"
    #: Changes float rounding (see the module doc), so checks compare within tolerance.
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        data_dq = index.producer.get(node.input[0])
        weights_dq = index.producer.get(node.input[1])
        if not all(
            dq is not None and dq.op_type == "DequantizeLinear" and dq.domain in STANDARD
            for dq in (data_dq, weights_dq)
        ):
            return None
        if quantized_again(index, node):
            return None
        return conv_integer_form(self.name, index, node, data_dq, weights_dq)


def quantized_again(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Whether one QuantizeLinear alone reads ``node``'s output: onnxruntime fuses such a
    Conv into a QLinearConv, so this rewrite leaves it alone (and `max-pool-in-float`
    leaves the 8-bit pools before it to onnxruntime's NHWC kernels)."""
    reader = index.only_consumer(node.output[0])
    return reader is not None and reader.op_type == "QuantizeLinear"


def conv_integer_form(
    rule: str,
    index: GraphIndex,
    node: onnx.NodeProto,
    data_dq: onnx.NodeProto,
    weights_dq: onnx.NodeProto,
) -> Fired | Declined | None:
    """``node`` (a Conv on two DequantizeLinears) as ConvInteger -> DequantizeLinear ->
    Add(bias), whoever reads its output; ``rule`` names the rewrite in the report."""
    data = _dequantization(index, data_dq)
    weights = _dequantization(index, weights_dq)
    if isinstance(data, str) or isinstance(weights, str):
        return Declined(rule, node.name, data if isinstance(data, str) else weights)
    data_q, data_scale, data_zero = data
    weights_q, weights_scale, weights_zero = weights
    if index.constant(data_q) is not None or data_zero.dtype != np.uint8:
        return Declined(rule, node.name, "the input is not a run-time uint8 tensor")
    if data_scale.size != 1 or data_zero.size != 1:
        return Declined(rule, node.name, "the input is quantized per channel")
    q = index.constant(weights_q)
    if q is None or q.ndim not in (3, 4, 5):
        return Declined(
            rule, node.name, "the weights are not the integer constant of a 1-, 2- or 3-D Conv"
        )
    channels = q.shape[0]
    if is_depthwise(node, q.shape):
        return Declined(rule, node.name, DEPTHWISE_REASON)
    if weights_zero.size > 1 and np.any(weights_zero != weights_zero.reshape(-1)[0]):
        return Declined(rule, node.name, "the weights' zero points differ by channel")
    if weights_scale.size not in (1, channels) or (
        weights_scale.size > 1 and int(index.attribute(weights_dq, "axis", 1)) % q.ndim != 0
    ):
        return Declined(rule, node.name, "the weights' scales are not per output channel")
    bias = index.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if len(node.input) > 2 and node.input[2] and bias is None:
        return Declined(rule, node.name, "the bias is computed")
    matched = [node, *index.sole_feeders(node, data_dq, weights_dq)]
    if not index.is_free(matched):
        return None
    index.claim(matched)
    zero = int(weights_zero.reshape(-1)[0])
    if q.dtype == np.int8:
        q = (q.astype(np.int16) + 128).astype(np.uint8)
        zero += 128
    base = node.name or node.output[0]
    q_name = index.add_initializer(f"{base}/weights_u8", np.ascontiguousarray(q))
    zero_name = index.add_initializer(f"{base}/weights_zero_point", np.asarray(zero, np.uint8))
    scale = (
        np.float32(data_scale.reshape(())) * weights_scale.astype(np.float32).reshape(-1)
    ).astype(np.float32)
    scale_vector = np.broadcast_to(scale, (channels,)).astype(np.float32)
    scale_name = index.add_initializer(f"{base}/scale", np.ascontiguousarray(scale_vector))
    summed = index.names.fresh(f"{base}/sum")
    attributes = [a for a in node.attribute if a.name in SHARED_ATTRIBUTES]
    integer = helper.make_node(
        "ConvInteger", [data_q, q_name, data_dq.input[2], zero_name], [summed], name=base
    )
    integer.attribute.extend(attributes)
    # DequantizeLinear of the int32 sums is float(sum) * scale: Cast and Mul in one pass.
    scaled = node.output[0] if bias is None else index.names.fresh(f"{base}/scaled")
    nodes = [
        integer,
        helper.make_node("DequantizeLinear", [summed, scale_name], [scaled], axis=1),
    ]
    if bias is not None:
        bias_name = index.add_initializer(
            f"{base}/bias", _per_channel(bias.astype(np.float32), channels, q.ndim)
        )
        nodes.append(helper.make_node("Add", [scaled, bias_name], [node.output[0]]))
    index.replace(matched, nodes)
    return Fired(rule, node.name, f"{channels} channels, weight zero point {zero}")


def _dequantization(
    index: GraphIndex, dq: onnx.NodeProto
) -> tuple[str, np.ndarray, np.ndarray] | str:
    """The quantized input, scale and zero point of ``dq``, or why they are not constants."""
    if len(dq.input) < 3 or not dq.input[2]:
        return f"'{dq.name}' has no zero point"
    scale, zero = index.constant(dq.input[1]), index.constant(dq.input[2])
    if scale is None or zero is None:
        return f"'{dq.name}' has a computed scale or zero point"
    if zero.dtype not in (np.uint8, np.int8) or scale.dtype != np.float32:
        return f"'{dq.name}' is not an 8-bit to float32 dequantization"
    return dq.input[0], scale, zero


def _per_channel(values: np.ndarray, channels: int, rank: int = 4) -> np.ndarray:
    """``values`` as one per channel, shaped to broadcast over a rank-``rank`` output."""
    return np.ascontiguousarray(np.broadcast_to(values.reshape(-1), (channels,))).reshape(
        1, channels, *([1] * (rank - 2))
    )
