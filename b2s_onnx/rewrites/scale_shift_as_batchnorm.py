"""``Add(Mul(x, s), b)`` with per-channel constants ``s`` and ``b`` -> one
``BatchNormalization(x, s, b, mean 0, var 1, epsilon 0)``.

OpenVINO's ScaleShift (a BatchNorm after a ReLU, input normalization) reaches the converter
as a Multiply and an Add. onnxruntime runs the Mul as a blocked depthwise 1x1 convolution
but not the Add after it, which leaves the blocked layout: an Add pass with a reorder out
and back. A BatchNormalization is one blocked depthwise convolution with the shift as its
bias. Measured on gaze-estimation-adas-0002 (8 after its convolutions), 1 thread: 0.84x
the time, the same outputs to the bit.

Only where the input is in the blocked layout (input normalizations are not: there the
BatchNormalization measured 1.01-1.02x slower); a Mul right after a Conv with constant
weights is left alone too: onnxruntime folds both into the convolution already.

With ``var = 1`` and ``epsilon = 0`` the normalization divides by ``sqrt(1) = 1`` and
subtracts ``0 * s``, so it is ``x * s + b``; onnxruntime may evaluate
that with one rounding (a fused multiply-add) where the pair had two: within an ulp, hence
not marked exact. A non-finite scale would make ``0 * s`` a NaN, so those are left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import channels, is_blocked
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector, data_and_constant
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class ScaleShiftAsBatchNorm:
    name = "scale-shift-as-batchnorm"
    #: x * s + b may be rounded once instead of twice (see the module doc).
    exact = False
    anchors = ("Mul",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if index.opset() < 9:
            return None  # older BatchNormalizations have other attributes
        add = index.only_consumer(node.output[0])
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            return None
        scaled = data_and_constant(index, node)
        shifted = data_and_constant(index, add)
        if scaled is None or shifted is None or shifted[0] != node.output[0]:
            return None
        data, scale = scaled
        count = channels(index, data)
        if not isinstance(count, int):
            return None
        if index.info(add.output[0]).shape != index.info(data).shape:
            return None  # the constants would broadcast x to a larger shape
        scale_vector = channel_vector(scale, count)
        shift_vector = channel_vector(shifted[1], count)
        if scale_vector is None or shift_vector is None:
            return None
        if scale.dtype != np.float32 or shifted[1].dtype != np.float32:
            return None
        producer = index.produced_by(data, "Conv")
        if producer is not None and producer.input[1] in index.initializers:
            return None  # onnxruntime folds the pair into that convolution's weights
        if not is_blocked(index, data):
            # The plain-layout kernels gain nothing: palm-detection's input normalization
            # took 1.01-1.02x as long as a BatchNormalization.
            return None
        if not np.isfinite(scale_vector).all():
            return Declined(self.name, node.name, "a scale is not finite")
        if not index.is_free([node, add]):
            return None
        index.claim([node, add])
        parameters = [
            index.add_initializer(f"{node.name}/{part}", np.ascontiguousarray(value, np.float32))
            for part, value in (
                ("scale", scale_vector),
                ("shift", shift_vector),
                ("mean", np.zeros(count)),
                ("var", np.ones(count)),
            )
        ]
        normalization = helper.make_node(
            "BatchNormalization",
            [data, *parameters],
            [add.output[0]],
            name=add.name,
            epsilon=0.0,
        )
        index.replace([node, add], [normalization])
        report.absorbed[node.output[0]] = add.output[0]
        return Fired(self.name, node.name, f"{count} channels")
