"""Conv -> ConvTranspose with kernel == stride (nothing between) -> one Conv + DepthToSpace.

A ConvTranspose whose kernel equals its stride writes every output pixel from exactly one
input pixel: output ``(o, s*y + i, s*x + j)`` is ``sum_c Wt[c, o, i, j] * v[c, y, x]``
plus the bias. When ``v`` comes straight from a Conv, both are linear, so they compose into
one Conv with ``O * s * s`` output channels, weights ``sum_c Wt[c, o, i, j] * Wc[c, ...]``
and bias ``Wt . bc + bt``, whose channels DepthToSpace (CRD) puts in place. The Conv's wide
output (36 channels on text-image-super-resolution-0001's [360, 640]) is never written, and
the ConvTranspose, which onnxruntime runs as a GEMM plus col2im outside its NCHWc layout,
disappears. On that model, same run, 1 thread: 316 ms -> 276 ms with onnxruntime's default
optimizations, 186 ms -> 147 ms with its NCHWc layout off (OpenVINO: 171 ms).

An element-wise activation right after the ConvTranspose moves before the DepthToSpace (it
commutes with moving data, bit for bit), where onnxruntime fuses it into the Conv: the
upsampled map is written once instead of twice (text-image-super-resolution-0001, same
run, 1 thread: 1.00x -> 0.86x OpenVINO with small-conv-as-3d also on).

It fires only when the composed Conv does fewer multiply-adds than the pair. The weights are
summed in float64 and rounded once; the result differs from the pair by the summation order
only (7.2e-7 on outputs up to 1.19 on that model, the pair's own distance to OpenVINO).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._depth_to_space import depth_to_space_in_stages
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Element-wise activations onnxruntime fuses into a Conv.
ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Clip")


def _ints(index: GraphIndex, node: onnx.NodeProto, name: str, default: list[int]) -> list[int]:
    return [int(v) for v in index.attribute(node, name, default)]


def plain_upsampling(index: GraphIndex, deconv: onnx.NodeProto, kernel: list[int]) -> str | None:
    """Why ``deconv`` is not a non-overlapping upsampling (None when it is)."""
    spatial = len(kernel)
    if int(index.attribute(deconv, "group", 1)) != 1:
        return "the ConvTranspose is grouped"
    if _ints(index, deconv, "strides", [1] * spatial) != kernel:
        return "the ConvTranspose's stride differs from its kernel"
    if set(_ints(index, deconv, "dilations", [1] * spatial)) != {1}:
        return "the ConvTranspose is dilated"
    if any(_ints(index, deconv, "pads", [0] * 2 * spatial)):
        return "the ConvTranspose crops its output"
    if any(_ints(index, deconv, "output_padding", [0] * spatial)):
        return "the ConvTranspose pads its output"
    if index.attribute(deconv, "output_shape") is not None:
        return "the ConvTranspose sets its output shape"
    if index.text(deconv, "auto_pad", "NOTSET") != "NOTSET":
        return "the ConvTranspose uses auto_pad"
    return None


def _activation(index: GraphIndex, name: str) -> onnx.NodeProto | None:
    """An element-wise activation that alone reads ``name`` (extra inputs scalar constants):
    it commutes with DepthToSpace, so it moves before it, next to the Conv that fuses it."""
    reader = index.only_consumer(name)
    if reader is None or reader.op_type not in ACTIVATIONS or reader.domain not in ("", "ai.onnx"):
        return None
    for extra in reader.input[1:]:
        value = index.constant(extra) if extra else None
        if extra and (value is None or value.size != 1):
            return None
    return reader if reader.input[0] == name else None


def _conv_with_bias_add(
    index: GraphIndex, name: str
) -> tuple[onnx.NodeProto | None, onnx.NodeProto | None]:
    """The Conv that computes ``name``, directly or through an Add (its bias, as an IR's
    Convolution + Add converts: conv-bias leaves that Add for onnxruntime to fold)."""
    source = index.producer.get(name)
    if source is None or source.domain not in ("", "ai.onnx"):
        return None, None
    if source.op_type == "Conv":
        return source, None
    if source.op_type != "Add":
        return None, None
    for operand in source.input:
        conv = index.producer.get(operand)
        if conv is not None and conv.op_type == "Conv" and conv.domain in ("", "ai.onnx"):
            return conv, source
    return None, None


def _per_channel(
    index: GraphIndex, add: onnx.NodeProto, conv_output: str, channels: int
) -> np.ndarray | None:
    """The Add's other operand as one value per channel (a [C] vector would broadcast
    along the width, not the channels)."""
    other = add.input[1] if add.input[0] == conv_output else add.input[0]
    value = index.weight(other)
    if value is None or value.dtype != np.float32:
        return None
    vector = channel_vector(value, channels)
    return None if vector is None else vector.astype(np.float64)


#: From this many output elements on, two Transposes beat onnxruntime's DepthToSpace.
TWO_STAGE_ELEMENTS = 1 << 20


def _depth_to_space(
    index: GraphIndex, wide: str, final: str, node: onnx.NodeProto, block: int
) -> list[onnx.NodeProto]:
    """DepthToSpace (CRD) of ``wide`` into ``final``; on a large static output as two
    Transposes, the interleave of the width first, then whole rows. onnxruntime's
    DepthToSpace runs a rank-6 transpose that moves the innermost axis: on
    text-image-super-resolution-0001's [1,36,360,640] -> [1,4,1080,1920], 1 thread, 18.9 ms
    against 16.0 ms for the two stages (a plain copy of the tensor: 5.0 ms). Same bits."""
    shape = index.info(node.output[0]).shape
    if shape is None or len(shape) != 4 or None in shape or math.prod(shape) < TWO_STAGE_ELEMENTS:
        return [
            helper.make_node(
                "DepthToSpace", [wide], [final], name=node.name, blocksize=block, mode="CRD"
            )
        ]
    return depth_to_space_in_stages(index, wide, final, node.name, "CRD", block, tuple(shape))


class ConvIntoUpsampling:
    name = "conv-into-upsampling"
    #: Changes float rounding (see the module doc), so checks compare within tolerance.
    exact = False
    anchors = ("ConvTranspose",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        conv, added = _conv_with_bias_add(index, node.input[0])
        if conv is None:
            return None
        if index.only_consumer(conv.output[0]) is not (added or node):
            return Declined(self.name, node.name, "the Conv's output is read elsewhere")
        if added is not None and index.only_consumer(added.output[0]) is not node:
            return Declined(self.name, node.name, "the biased Conv's output is read elsewhere")
        wt = index.weight(node.input[1])
        wc = index.weight(conv.input[1])
        if wt is None or wc is None:
            return Declined(self.name, node.name, "a weight is computed")
        if wt.dtype != np.float32 or wc.dtype != np.float32 or wt.ndim != 4 or wc.ndim != 4:
            return Declined(self.name, node.name, "only 2-D float32 convolutions are composed")
        kernel = list(wt.shape[2:])
        if kernel[0] != kernel[1]:
            return Declined(self.name, node.name, "DepthToSpace needs one block size")
        reason = plain_upsampling(index, node, kernel)
        if reason is not None:
            return Declined(self.name, node.name, reason)
        if int(index.attribute(conv, "group", 1)) != 1:
            return Declined(self.name, node.name, "the Conv is grouped")
        if wc.shape[0] != wt.shape[0]:
            return Declined(self.name, node.name, "the weights' channel counts disagree")
        biases = []
        for owner, width in ((conv, wc.shape[0]), (node, wt.shape[1])):
            bias = index.weight(owner.input[2]) if len(owner.input) > 2 and owner.input[2] else None
            if len(owner.input) > 2 and owner.input[2] and bias is None:
                return Declined(self.name, node.name, "a bias is computed")
            biases.append(np.zeros(width) if bias is None else bias.astype(np.float64).reshape(-1))
        if added is not None:
            extra = _per_channel(index, added, conv.output[0], wc.shape[0])
            if extra is None:
                return Declined(self.name, node.name, "the Add after the Conv is not a bias")
            biases[0] = biases[0] + extra
        middle, block = wc.shape[0], kernel[0]
        outputs = wt.shape[1]
        taps = wc.shape[1] * wc.shape[2] * wc.shape[3]
        composed_cost = outputs * block * block * taps
        pair_cost = middle * taps + middle * outputs * block * block
        if composed_cost > pair_cost:
            return Declined(self.name, node.name, "the composed Conv would do more work")
        activation = _activation(index, node.output[0])
        matched = [conv, *([added] if added else []), node, *([activation] if activation else [])]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        wide_t = wt.astype(np.float64)
        weights = np.einsum("coij,cdyx->oijdyx", wide_t, wc.astype(np.float64))
        weights = weights.reshape(outputs * block * block, *wc.shape[1:]).astype(np.float32)
        bias = np.einsum("coij,c->oij", wide_t, biases[0]) + biases[1][:, None, None]
        bias = bias.reshape(-1).astype(np.float32)
        weight_name = index.add_initializer(f"{conv.name}/composed_weights", weights)
        bias_name = index.add_initializer(f"{conv.name}/composed_bias", bias)
        wide = index.names.fresh(f"{node.name}/blocks")
        fused = helper.make_node(
            "Conv", [conv.input[0], weight_name, bias_name], [wide], name=conv.name
        )
        fused.attribute.extend(conv.attribute)
        nodes = [fused]
        if activation is not None:
            active = index.names.fresh(f"{activation.name}/blocks")
            moved = onnx.NodeProto()
            moved.CopyFrom(activation)
            moved.input[0], moved.output[0] = wide, active
            nodes.append(moved)
            wide = active
            report.absorbed[node.output[0]] = activation.output[0]
        final = matched[-1].output[0]
        nodes += _depth_to_space(index, wide, final, node, block)
        index.replace(matched, nodes)
        report.absorbed[conv.output[0]] = final
        if added is not None:
            report.absorbed[added.output[0]] = final
        return Fired(
            self.name, node.name, f"Conv to {outputs * block * block} channels, block {block}"
        )
