"""ReduceMean over both spatial axes of a blocked 4-D tensor -> GlobalAveragePool.

onnxruntime keeps GlobalAveragePool in its blocked channel layout but not ReduceMean, so a
squeeze-and-excitation block (MobileNetV3, EfficientNet) that averages a blocked tensor
with ReduceMean first reorders the whole tensor back to NCHW. As GlobalAveragePool the
average reads the blocked tensor in place; `channel-gate-in-blocks` keeps the gate's
product there too. ReduceMean without keepdims followed by a Reshape to [N, C, 1, 1] (how
the Keras frontend writes it) becomes the pool alone; without such a Reshape, the pool and
a Reshape to [N, C]. Measured together with `channel-gate-in-blocks`, 1 thread:
MobileNetV3-Small 0.94x the time, EfficientNet-B0 0.93x (the gate alone: 0.99x).

A quantized mean (``DequantizeLinear -> ReduceMean -> QuantizeLinear``, both per tensor:
how an INT8 IR's squeeze-and-excitation average arrives) becomes the pool too, in any
layout: onnxruntime's QDQ transformer fuses ``DQ -> GlobalAveragePool -> Q`` into its
integer QLinearGlobalAveragePool but leaves the ReduceMean in float, which its layout
transformation then runs over NHWC data as a strided reduction. An NNCF-quantized
PaddleOCR detector's 8 attention averages: 17.5 -> 0.33 ms, the whole model 0.74x its time
(1 thread). The fused kernel adds the integers exactly and requantizes once.

The mean adds the same values in another order: float rounding only.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import is_blocked
from b2s_onnx.rewrites._dequantized import per_tensor_bytes
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Fired, RewriteReport


class SpatialMeanAsPool:
    name = "spatial-mean-as-pool"
    #: The sum runs in another order (see the module doc).
    exact = False
    anchors = ("ReduceMean",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        data = node.input[0]
        shape = index.info(data).shape
        if shape is None or len(shape) != 4 or None in shape[:2]:
            return None
        axes = index.reduction_axes(node)
        if axes is None or sorted(a % 4 for a in axes) != [2, 3]:
            return None
        quantized = _dequantized_per_tensor(index, data)
        if not quantized and not is_blocked(index, data):
            return None  # read in NCHW either way: nothing to gain
        keep = int(index.attribute(node, "keepdims", 1))
        matched, output, squeeze = [node], node.output[0], False
        if not keep:
            reshape = index.only_consumer(node.output[0])
            target = None if reshape is None else index.info(reshape.output[0]).shape
            if (
                reshape is not None
                and reshape.op_type == "Reshape"
                and target == (shape[0], shape[1], 1, 1)
            ):
                matched.append(reshape)
                output = reshape.output[0]
            else:
                squeeze = True
        if quantized and not is_blocked(index, data):
            reader = index.only_consumer(output)
            if squeeze or reader is None or not _quantizes_per_tensor(index, reader):
                return None  # no integer pool forms: a float pool, in NCHW either way
        if not index.is_free(matched):
            return None
        index.claim(matched)
        if len(matched) > 1:
            report.absorbed[node.output[0]] = output  # the [N, C] mean is gone
        pooled = index.names.fresh(f"{node.name}/pooled") if squeeze else output
        nodes = [helper.make_node("GlobalAveragePool", [data], [pooled], name=node.name)]
        if squeeze:
            flat = index.add_initializer(f"{node.name}/flat_shape", np.asarray(shape[:2], np.int64))
            nodes.append(
                helper.make_node("Reshape", [pooled, flat], [output], name=f"{node.name}/flat")
            )
        index.replace(matched, nodes)
        return Fired(self.name, node.name, f"over {list(shape)}")


def _dequantized_per_tensor(index: GraphIndex, name: str) -> bool:
    """Whether ``name`` is run-time bytes dequantized with one scale and zero point."""
    dq = index.produced_by(name, "DequantizeLinear")
    return dq is not None and not isinstance(per_tensor_bytes(index, dq), str)


def _quantizes_per_tensor(index: GraphIndex, node: onnx.NodeProto) -> bool:
    if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx"):
        return False
    scale = index.constant(node.input[1])
    zero = index.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return scale is not None and scale.size == 1 and (zero is None or zero.size == 1)
