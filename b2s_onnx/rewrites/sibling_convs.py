"""Float Convs that read the same tensor with the same geometry and whose output channels
fill fewer blocks of onnxruntime's blocked layout together than apart (an SSD head's box
and class layers, a detector's 1-channel maps) -> one Conv on the stacked weights and
biases, and a Split back into the layers' outputs.

onnxruntime runs 2-D convolutions in a blocked layout, 16 output channels per block with
AVX-512, computing whole blocks: a layer with 18 output channels costs two blocks, one with
a single channel a whole block. Layers reading the same input, stacked, share the blocks:
36 + 18 channels take 4 blocks instead of 5, 1 + 1 take one instead of two. Measured 1
thread, medians of 300 interleaved runs, the whole model with against without:
face-detection-retail-0004 0.96x (its two 3x3 head layers on the last fire module, 36 + 18
channels, stacked), face-detection-0205 0.99x (five pairs of 1-channel 3x3 maps).

Not done, because measured slower: layers whose channels fill whole blocks apart (32 + 32:
nothing to share, and the Split is one more copy; face-detection-0205 1.03x with them),
1x1 kernels (palm-detection's 1x1 heads: 1.00x, its 32 + 32 1x1 pairs 1.17x), and layers
whose only reader is an activation onnxruntime folds into the convolution (stacked, the
Split stands between them).

Not bit-exact: with another channel count onnxruntime may pick another convolution kernel,
which sums the same products in another order (within float rounding).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Output channels per block of onnxruntime's blocked layout with AVX-512 (8 with AVX2,
#: where stacking saves at least as many blocks).
BLOCK = 16
#: Activations onnxruntime folds into the convolution before them.
FOLDED_ACTIVATIONS = frozenset({"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "Tanh"})


def _blocks(channels: int) -> int:
    return -(-channels // BLOCK)


class SiblingConvs:
    name = "sibling-convs"
    #: Another kernel may sum in another order (module doc).
    exact = False
    anchors = ("Conv",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if not _candidate(index, node):
            return None
        siblings = [
            reader
            for reader in index.consumers.get(node.input[0], [])
            if reader.op_type == "Conv"
            and reader.input[0] == node.input[0]
            and _candidate(index, reader)
            and _same_geometry(index, node, reader)
        ]
        if len(siblings) < 2 or siblings[0] is not node:
            return None
        counts = [index.constant(s.input[1]).shape[0] for s in siblings]
        if _blocks(sum(counts)) >= sum(_blocks(c) for c in counts):
            return None
        if not index.is_free(siblings):
            return None
        index.claim(siblings)
        return _stack(self.name, index, siblings, counts)


def _candidate(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """A float 2-D Conv, group 1, with a spatial kernel and constant weights and bias, whose
    output no folded activation alone reads."""
    if node.domain not in STANDARD or len(node.input) < 2:
        return False
    weights = index.constant(node.input[1])
    if weights is None or weights.dtype != np.float32 or weights.ndim != 4:
        return False
    if weights.shape[2] * weights.shape[3] == 1 or int(index.attribute(node, "group", 1)) != 1:
        return False
    if len(node.input) > 2 and node.input[2] and index.constant(node.input[2]) is None:
        return False
    reader = index.only_consumer(node.output[0])
    return reader is None or reader.op_type not in FOLDED_ACTIVATIONS


def _same_geometry(index: GraphIndex, a: onnx.NodeProto, b: onnx.NodeProto) -> bool:
    if index.attributes(a) != index.attributes(b):
        return False
    return index.constant(a.input[1]).shape[1:] == index.constant(b.input[1]).shape[1:]


def _bias(index: GraphIndex, node: onnx.NodeProto, channels: int) -> np.ndarray:
    if len(node.input) > 2 and node.input[2]:
        return index.constant(node.input[2]).astype(np.float32).reshape(channels)
    return np.zeros(channels, np.float32)


def _stack(rule: str, index: GraphIndex, convs: list[onnx.NodeProto], counts: list[int]) -> Fired:
    first = convs[0]
    base = first.name or first.output[0]
    weights = np.concatenate([index.constant(c.input[1]) for c in convs])
    bias = np.concatenate([_bias(index, c, n) for c, n in zip(convs, counts, strict=True)])
    weights_name = index.add_initializer(f"{base}/stacked_weights", weights)
    bias_name = index.add_initializer(f"{base}/stacked_bias", bias)
    split = index.add_initializer(f"{base}/stacked_split", np.asarray(counts, np.int64))
    stacked = index.names.fresh(f"{base}/stacked")
    conv = helper.make_node(
        "Conv", [first.input[0], weights_name, bias_name], [stacked], name=f"{base}/stacked"
    )
    conv.attribute.extend(first.attribute)
    nodes = [
        conv,
        helper.make_node("Split", [stacked, split], [c.output[0] for c in convs], axis=1),
    ]
    index.replace_stacked([[layer] for layer in convs], nodes)
    names = ", ".join(c.name or c.output[0] for c in convs)
    return Fired(rule, base, f"{len(convs)} layers ({names}), {counts} output channels")
