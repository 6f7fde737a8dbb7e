"""A quantized 1x1 Conv on a 1x1 map, read in float -> Flatten -> DQ -> MatMul on the int8
weights transposed -> Sum(bias) -> Unsqueeze, which onnxruntime runs as MatMulIntegerToFloat.

After a global pooling, a network's head and its squeeze-excite blocks apply 1x1
convolutions to ``[N, C, 1, 1]`` tensors: matrix-vector products. onnxruntime runs such a
Conv read in float as ConvInteger (``conv-integer``), whose im2col and GEMM setup dominate
at one pixel. Measured 1 thread, median of 300 interleaved runs, ``Q -> ConvInteger -> DQ
-> Add`` against ``Q -> Flatten -> DQ -> MatMul -> Sum -> Unsqueeze``:

    input -> output channels    ConvInteger    MatMulIntegerToFloat
    576 -> 1024 (MobileNetV3)   0.122 ms       0.018 ms
    144 -> 576                  0.024 ms       0.010 ms
    1024 -> 10                  0.013 ms       0.007 ms
    64 -> 240                   0.010 ms       0.008 ms

The integer products are the same; OpenVINO's formula ``sum * (s_x * s_w[o]) + b[o]`` is
what MatMulIntegerToFloat computes, so the outputs agree to float rounding. The bias is
added by a Sum: onnxruntime's level-1 optimizer would fuse an Add into a float Gemm before
its QDQ pass (see ``matmul_bias_as_sum``). A Conv read by a lone QuantizeLinear is left to
QLinearConv.
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

STANDARD = ("", "ai.onnx")


class PointwiseConvOnAPoint:
    name = "pointwise-conv-on-a-point"
    #: The products are summed in another order (float rounding of the scaled sum).
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        operands = dequantized_operands(index, node.input[0], node.input[1])
        if operands is None:
            return None
        data_dq, weights_dq, q = operands
        if q is None or q.ndim != 4 or q.shape[2:] != (1, 1):
            return None
        shape = index.info(node.input[0]).shape
        if shape is None or len(shape) != 4 or tuple(shape[2:]) != (1, 1):
            return None
        reader = index.only_consumer(node.output[0])
        if reader is not None and reader.op_type == "QuantizeLinear":
            return None  # QLinearConv forms
        if int(index.attribute(node, "group", 1)) != 1:
            return Declined(self.name, node.name, "a grouped convolution")
        # SAME padding of a 1x1 kernel over a 1x1 map is none, at any stride.
        if any(index.attribute(node, "pads", [0]) or [0]):
            return Declined(self.name, node.name, "a padded convolution grows the map")
        data = per_tensor_bytes(index, data_dq)
        if isinstance(data, str):
            return Declined(self.name, node.name, data)
        weights = weight_dequantization(index, weights_dq, q)
        if isinstance(weights, str):
            return Declined(self.name, node.name, weights)
        bias = index.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if len(node.input) > 2 and node.input[2] and bias is None:
            return Declined(self.name, node.name, "the bias is computed")
        matched = [node, *index.sole_feeders(node, data_dq, weights_dq)]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        weights_scale, weights_zero = weights
        outputs = q.shape[0]
        base = node.name or node.output[0]
        matrix = index.add_initializer(
            f"{base}/weights_t", np.ascontiguousarray(q.reshape(outputs, -1).T)
        )
        scale_name = index.add_initializer(f"{base}/weights_scale", weights_scale)
        zero_name = index.add_initializer(f"{base}/weights_zero_point", weights_zero)
        axes = index.add_initializer(f"{base}/spatial_axes", np.asarray([2, 3], np.int64))
        flat, flat_dq, weights_name, product = (
            index.names.fresh(f"{base}/{suffix}") for suffix in ("flat_q", "flat", "w", "mm")
        )
        nodes = [
            helper.make_node("Flatten", [data_dq.input[0]], [flat], axis=1),
            helper.make_node("DequantizeLinear", [flat, *data_dq.input[1:3]], [flat_dq]),
            helper.make_node(
                "DequantizeLinear", [matrix, scale_name, zero_name], [weights_name], axis=1
            ),
            helper.make_node("MatMul", [flat_dq, weights_name], [product]),
        ]
        if bias is not None:
            summed = index.names.fresh(f"{base}/biased")
            bias_name = index.add_initializer(
                f"{base}/bias",
                np.ascontiguousarray(
                    np.broadcast_to(bias.astype(np.float32).reshape(-1), (outputs,))
                ),
            )
            nodes.append(helper.make_node("Sum", [product, bias_name], [summed]))
            product = summed
        nodes.append(helper.make_node("Unsqueeze", [product, axes], [node.output[0]]))
        index.replace(matched, nodes)
        return Fired(self.name, node.name, f"{q.shape[1]} -> {outputs} channels")
