"""``Conv(x * s)`` -> ``Conv(x)`` on weights scaled per input channel, and
``Conv(x * s + b)`` -> ``Conv(x + b / s)`` on the same scaled weights.

A network's input normalization (OpenVINO's ``scale_values``, a Keras ``Rescaling``, a
``Divide`` by 255) reaches the converter as a Multiply, often followed by an Add, in front
of the first convolution. onnxruntime fuses neither into a convolution that follows: each
is a full pass over the input image outside the blocked layout (face-detection-0205: its
``image / 255`` 0.46 ms of 39 ms, 1 thread). A convolution is linear in each input channel,
so a per-channel scale of its input is a scale of that channel's weights; zero padding stays
zero either way. With an Add after the Mul, the shift is divided by the scale and kept as
one Add before the convolution (one pass instead of two). A single scale and shift for
every element also commute with a Transpose, so a channels-last input's normalization in
front of its layout Transpose folds the same way (Keras' MobileNetV3 ``Rescaling``).
Measured alone, 1 thread, a 3x3 stride-2 convolution of 3 -> 32 channels: the Multiply
takes 7-16% of the convolution's time, Multiply and Add 24-29%, the Add alone 11-16%
(128x128 to 720x1280 inputs).

Not bit-exact: ``(x s) w`` against ``x (w s)`` rounds differently (each product within an ulp
of the other), and ``x s + b`` against ``(x + b / s) s`` within a few ulp of the operands'
size. Only on a graph input, float32 constants, finite and non-zero scales, and constant float32
weights; every reader of the scaled tensor must be such a convolution (else the Mul stays
anyway).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector, data_and_constant
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Largest weight tensor copied (elements): a first convolution is small; a scaled copy of
#: a large one would sit in the graph beside the original until save.
MAX_WEIGHTS = 1 << 22


def _computed_and_constant(
    index: GraphIndex, node: onnx.NodeProto
) -> tuple[str, np.ndarray] | None:
    """(the computed operand, the float32 constant) of a binary node, else None."""
    found = data_and_constant(index, node)
    return found if found is not None and found[1].dtype == np.float32 else None


def _per_channel(value: np.ndarray, rank: int, count: int | None) -> np.ndarray | None:
    """``value`` as one number per channel of a rank-``rank`` NC... tensor, or None when it
    varies along another axis or would broadcast the tensor to a larger rank."""
    if value.ndim > rank:
        return None
    padded = value.reshape((1,) * (rank - value.ndim) + value.shape)
    if padded.shape[0] != 1 or any(d != 1 for d in padded.shape[2:]):
        return None
    vector = channel_vector(padded.reshape((*padded.shape[:2], 1, 1)), count)
    return None if vector is None else np.ascontiguousarray(vector, np.float32)


def _folding_readers(index: GraphIndex, name: str) -> list[onnx.NodeProto] | None:
    """The Convs reading ``name`` as their data on constant float32 weights, when every
    reader is one (and ``name`` is no graph output), else None."""
    if not index.can_rename(name):
        return None
    readers = index.consumers.get(name, [])
    if not readers:
        return None
    for reader in readers:
        if reader.op_type != "Conv" or reader.domain not in STANDARD:
            return None
        if reader.input[0] != name or name in reader.input[1:]:
            return None
        weights = index.weight(reader.input[1])
        if (
            weights is None
            or weights.dtype != np.float32
            or reader.input[1] not in index.initializers
        ):
            return None
    return readers


class InputScaleIntoConv:
    name = "input-scale-into-conv"
    exact = False
    anchors = ("Mul",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        scaled = _computed_and_constant(index, node)
        if scaled is None:
            return None
        data, scale = scaled
        if data not in index.graph_inputs:
            # Mid-network the pair is another layer's output (a FakeQuantize's dequantizing
            # tail), which per-layer comparison should still see; there onnxruntime's blocked
            # kernels take such constants anyway (scale-shift-as-batchnorm).
            return None
        info = index.info(data)
        if info.elem_type != onnx.TensorProto.FLOAT or info.shape is None or len(info.shape) < 3:
            return None
        # A channels-last input's axis 1 may be a dynamic height: one scale needs no count.
        rank, count = len(info.shape), info.shape[1]
        if not isinstance(count, int):
            if scale.size != 1:
                return None
            count = None
        scale_vector = _per_channel(scale, rank, count)
        if scale_vector is None:
            return None
        add, shift_vector, shift_size, folded = None, None, 1, node.output[0]
        follower = index.only_consumer(node.output[0])
        if follower is not None and follower.op_type == "Add" and follower.domain in STANDARD:
            shifted = _computed_and_constant(index, follower)
            if shifted is not None and shifted[0] == node.output[0]:
                shift_vector = _per_channel(shifted[1], rank, count)
                if shift_vector is not None:
                    add, folded, shift_size = follower, follower.output[0], shifted[1].size
        # One scale and shift for every element commute with a layout Transpose (a
        # channels-last input's Keras Rescaling sits before it).
        uniform = scale.size == 1 and shift_size == 1
        transpose = index.only_consumer(folded)
        if not (
            uniform
            and transpose is not None
            and transpose.op_type == "Transpose"
            and transpose.domain in STANDARD
        ):
            transpose = None
        conv_input = folded if transpose is None else transpose.output[0]
        readers = _folding_readers(index, conv_input)
        if readers is None:
            return None
        if not (np.isfinite(scale_vector).all() and (scale_vector != 0).all()):
            return Declined(self.name, node.name, "a scale is zero or not finite")
        matched = [node, *([add] if add is not None else []), *readers]
        if transpose is not None:
            matched.append(transpose)
        if not index.is_free(matched):
            return None
        scaled_weights = []
        for reader in readers:
            weights = index.weight(reader.input[1])
            if weights.size > MAX_WEIGHTS:
                return Declined(self.name, node.name, "the convolution's weights are too large")
            if uniform:
                factor = scale_vector[:1]
            else:
                group = int(index.attribute(reader, "group", 1))
                per_group = weights.shape[1]
                if weights.ndim != rank or per_group * group != count or weights.shape[0] % group:
                    return None
                # Input channel of weight [o, i]: (o's group) * per_group + i.
                outputs_per_group = weights.shape[0] // group
                channel = (
                    np.arange(weights.shape[0])[:, None] // outputs_per_group * per_group
                    + np.arange(per_group)[None, :]
                )
                factor = scale_vector[channel].reshape(channel.shape + (1,) * (rank - 2))
            scaled_weights.append((weights * factor).astype(np.float32))
        index.claim(matched)
        source = data
        if add is not None:
            quotient = (shift_vector / scale_vector).astype(np.float32)
            shape = (1, count) + (1,) * (rank - 2)
            shift = index.add_initializer(
                f"{add.name}/shift_over_scale",
                quotient[:1].reshape(()) if uniform else quotient.reshape(shape),
            )
            source = index.names.fresh(f"{add.name}/unscaled")
            index.replace(
                [node, add], [helper.make_node("Add", [data, shift], [source], name=source)]
            )
        else:
            index.replace([node], [])
        if transpose is not None:
            moved = onnx.NodeProto()
            moved.CopyFrom(transpose)
            moved.input[0] = source
            index.replace([transpose], [moved])
            source = transpose.output[0]
        # Each convolution stays where it stood (the readers of its output follow it).
        for reader, weights in zip(readers, scaled_weights, strict=True):
            copy = onnx.NodeProto()
            copy.CopyFrom(reader)
            copy.input[0] = source
            copy.input[1] = index.add_initializer(f"{reader.name}/input_scaled_weights", weights)
            index.replace([reader], [copy])
        for absorbed in (node.output[0], folded):
            report.absorbed[absorbed] = readers[0].name
        if transpose is not None:
            report.absorbed[conv_input] = readers[0].name
        return Fired(
            self.name,
            node.name,
            f"into {len(readers)} convolution(s)" + (", shift kept as one Add" if add else ""),
        )
