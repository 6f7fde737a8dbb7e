"""A 2-D Conv with few channels whose result leaves onnxruntime's NCHWc layout anyway -> the
same Conv over a unit depth axis (Unsqueeze, 3-D Conv [, its activation], Squeeze).

onnxruntime's NCHWc layout transformer rewrites every 2-D float Conv with constant weights
into its blocked form (16 channels a block with AVX-512), padding the output channels up to
a whole block and adding a ReorderOutput wherever the result leaves the blocked layout. For
a Conv with fewer input channels than a block (it then reads NCHW directly), an output
channel count that is not a multiple of a block, and readers that take NCHW anyway (no op
the layout keeps, or another such Conv), blocking only adds work: 4 -> 1 channels computes
16, then reorders. The transformer only takes 4-D weights; over a unit depth axis the same
Conv runs on onnxruntime's NCHW convolution instead.

text-image-super-resolution-0001 (1 -> 4, 4 -> 36 composed by conv-into-upsampling, 4 -> 1 on
360x640 and 1080x1920), same run, 1 thread, against OpenVINO: 1.62x without this rewrite,
0.89x with it (1.09x when only the two convolutions with <= 8 outputs were lifted).
Lifting road-segmentation-adas-0001's 8 -> 24 convolutions, whose output meets a blocked
Add, measured 1.01x -> 1.13x, hence the rule on readers. Below 65536 output pixels the two
extra nodes cost more than blocking wastes (lenet5's 1 -> 6 on 28x28: 0.05 -> 0.10 ms).

An Add, Sum or Mul the layout does not keep reads NCHW too (onnxruntime blocks one only
when every operand comes blocked; `_blocked_layout.is_blocked` decides): a
super-resolution network's last 8 -> 3 Conv at 1080x1920 plus its bicubic input took 0.74x
the time lifted; with its 8 -> 8 attention Conv, whose gate multiplies a pixel-shuffled
tensor, lifted as well, the whole network 0.95x.

A bias the converter left as a separate per-channel Add (onnxruntime folds that into a 2-D
Conv, not past the Squeeze) becomes the 3-D Conv's bias; without that,
text-image-super-resolution-0001's last 4 -> 1 convolution stayed blocked: 1.48x OpenVINO.

The 3-D kernel adds the same products in another order: float rounding only.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import is_blocked
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: onnxruntime's NCHWc block on AVX-512 (8 on AVX2, which divides it).
BLOCK = 16
#: Below this many output pixels the Unsqueeze/Squeeze cost more than the blocks waste.
MIN_PIXELS = 1 << 16
#: Activations onnxruntime fuses into a Conv: kept next to it, before the Squeeze.
ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Clip")


#: Ops onnxruntime's NCHWc transformer can keep in the blocked layout.
BLOCKED_OPS = (
    "Conv",
    "MaxPool",
    "AveragePool",
    "GlobalMaxPool",
    "GlobalAveragePool",
    "Add",
    "Sum",
    "Mul",
    "Concat",
    "Relu",
    "Sigmoid",
    "Tanh",
    "BatchNormalization",
    "Resize",
    "Upsample",
    "Transpose",
)


def _reads_nchw(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Whether ``node`` takes its data input in NCHW even inside onnxruntime's NCHWc layout:
    it is no op the layout keeps, an Add/Sum/Mul the layout does not keep (one with a graph
    input or a constant, such as a super-resolution network's bicubic skip: the shared
    layout predicate decides), or a Conv with fewer input channels than a block. An Add or
    Mul it keeps counts as blocked even where lifting would leave it NCHW: ppocrv3-det's
    first layer (3 -> 8 channels, before an HSwish onnxruntime folds) took 1.03x lifted."""
    if node.op_type not in BLOCKED_OPS or node.domain not in ("", "ai.onnx"):
        return True
    if node.op_type in ("Add", "Sum", "Mul"):
        return not is_blocked(index, node.output[0])
    if node.op_type != "Conv" or len(node.input) < 2:
        return False
    weights = index.weight(node.input[1])
    return (
        weights is not None
        and weights.ndim == 4
        and weights.shape[1] < BLOCK
        and int(index.attribute(node, "group", 1)) == 1
    )


def _activation(index: GraphIndex, name: str) -> onnx.NodeProto | None:
    """The fusable activation that alone reads ``name`` (its extra inputs constant)."""
    reader = index.only_consumer(name)
    if reader is None or reader.op_type not in ACTIVATIONS or reader.domain not in ("", "ai.onnx"):
        return None
    if reader.input[0] != name or any(
        extra and (index.constant(extra) is None or index.constant(extra).size != 1)
        for extra in reader.input[1:]
    ):
        return None
    return reader


def _bias_add(
    index: GraphIndex, name: str, channels: int
) -> tuple[onnx.NodeProto, np.ndarray] | None:
    """The Add of a per-channel constant that alone reads ``name`` (a Conv's bias, which
    ``conv-bias`` leaves for onnxruntime to fold), with the bias as a [channels] vector."""
    add = index.only_consumer(name)
    if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
        return None
    other = add.input[1] if add.input[0] == name else add.input[0]
    value = index.constant(other)
    vector = None
    if value is not None and value.dtype == np.float32:
        vector = channel_vector(value, channels)
    return None if vector is None else (add, np.ascontiguousarray(vector))


class SmallConvAs3d:
    name = "small-conv-as-3d"
    #: Changes float rounding (see the module doc), so checks compare within tolerance.
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        weights = index.weight(node.input[1])
        if weights is None or weights.ndim != 4 or weights.dtype != np.float32:
            return None
        outputs, inputs = weights.shape[:2]
        if int(index.attribute(node, "group", 1)) != 1 or inputs >= BLOCK or outputs % BLOCK == 0:
            return None
        strides = [int(s) for s in index.attribute(node, "strides", [1, 1])]
        shape = index.info(node.input[0]).shape
        if shape is None or len(shape) != 4 or None in shape[2:]:
            return Declined(self.name, node.name, "the input's size is unknown")
        if shape[2] * shape[3] // (strides[0] * strides[1]) < MIN_PIXELS:
            return Declined(self.name, node.name, "a small output stays in 2-D")
        if index.text(node, "auto_pad", "NOTSET") != "NOTSET":
            return Declined(self.name, node.name, "auto_pad is kept in 2-D")
        bias = node.input[2] if len(node.input) > 2 else ""
        if bias and index.weight(bias) is None:
            return Declined(self.name, node.name, "the bias is computed")
        matched = [node]
        added = None if bias else _bias_add(index, node.output[0], outputs)
        if added is not None:
            matched.append(added[0])
        activation = _activation(index, matched[-1].output[0])
        if activation is not None:
            matched.append(activation)
        result = matched[-1].output[0]
        if not all(_reads_nchw(index, r) for r in index.consumers.get(result, [])):
            return Declined(self.name, node.name, "its output stays in onnxruntime's blocks")
        if not index.is_free(matched):
            return None
        index.claim(matched)
        pads = [int(p) for p in index.attribute(node, "pads", [0, 0, 0, 0])]
        dilations = [int(d) for d in index.attribute(node, "dilations", [1, 1])]
        deep = index.add_initializer(f"{node.name}/weights_3d", weights[:, :, None])
        if added is not None:
            bias = index.add_initializer(f"{node.name}/bias", added[1])
            report.absorbed[node.output[0]] = added[0].output[0]
        axis = index.add_initializer(f"{node.name}/depth_axis", np.asarray([2], np.int64))
        fresh = index.names.fresh
        lifted, convolved = fresh(f"{node.name}/lifted"), fresh(f"{node.name}/conv_3d")
        conv = helper.make_node(
            "Conv",
            [lifted, deep, *([bias] if bias else [])],
            [convolved],
            name=node.name,
            kernel_shape=[1, *weights.shape[2:]],
            pads=[0, pads[0], pads[1], 0, pads[2], pads[3]],
            strides=[1, *strides],
            dilations=[1, *dilations],
        )
        nodes = [helper.make_node("Unsqueeze", [node.input[0], axis], [lifted], name=lifted), conv]
        if activation is not None:
            active = fresh(f"{activation.name}/3d")
            moved = onnx.NodeProto()
            moved.CopyFrom(activation)
            moved.input[0] = convolved
            moved.output[0] = active
            nodes.append(moved)
            convolved = active
            for absorbed in matched[:-1]:
                report.absorbed[absorbed.output[0]] = activation.output[0]
        final = matched[-1].output[0]
        nodes.append(helper.make_node("Squeeze", [convolved, axis], [final], name=f"{final}/2d"))
        index.replace(matched, nodes)
        return Fired(self.name, node.name, f"{inputs} -> {outputs} channels")
