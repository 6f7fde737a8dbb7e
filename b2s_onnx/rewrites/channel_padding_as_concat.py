"""``Add(Pad(x, zero channels at the end), Conv(...))`` -> ``Concat(Add(x, Conv_a), Conv_b)``.

BlazeFace-style residual blocks (MediaPipe's palm and face detectors) widen the shortcut
by padding it with zero channels. onnxruntime has no blocked-layout Pad, so the shortcut
leaves its blocked layout there and every block after it pays reorder passes both ways
(and the PReLUs after it cannot take the blocked form, see ``prelu_as_leaky_relu``). Split
the convolution by output channels instead: the first part's channels meet the shortcut,
the rest meet zeros, which adding leaves alone. Each part computes the same per-channel
sums as the whole, and adding zeros changes nothing but the sign of a -0: bit-exact as a
graph (the tests compare with onnxruntime's optimizations off). With them on, onnxruntime
may run the parts in its blocked kernels and fold the Add into the first one, which sum in
another order (palm-detection, with the PReLU rewrites: 1.2e-3 on outputs near 900).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import BLOCK, channels, is_blocked
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


def _channel_padding(index: GraphIndex, pad: onnx.NodeProto) -> int | None:
    """How many zero channels ``pad`` appends to a 4-D tensor, else None."""
    if index.text(pad, "mode", "constant") != "constant":
        return None
    if len(pad.input) > 3 and pad.input[3]:
        return None  # explicit axes: rare, not worth matching
    pads = index.constant(pad.input[1]) if len(pad.input) > 1 else None
    if pads is None or pads.shape != (8,):
        return None
    if len(pad.input) > 2 and pad.input[2]:
        value = index.constant(pad.input[2])
        if value is None or value.size != 1 or value.reshape(-1)[0] != 0:
            return None
    if any(int(p) != 0 for i, p in enumerate(pads) if i != 5) or int(pads[5]) <= 0:
        return None
    return int(pads[5])


def _conv_with_bias(
    index: GraphIndex, name: str
) -> tuple[onnx.NodeProto, onnx.NodeProto | None, np.ndarray | None] | None:
    """The Conv producing ``name`` (directly, or through an Add of a per-channel constant
    that is its bias) when ``name`` is its only use: (conv, that Add, the bias values)."""
    add = index.produced_by(name, "Add")
    if add is not None:
        for data, other in (add.input, add.input[::-1]):
            conv = index.produced_by(data, "Conv")
            bias = index.constant(other)
            if conv is None or bias is None or index.only_consumer(data) is None:
                continue
            vector = channel_vector(bias)
            return None if vector is None else (conv, add, vector)
        return None
    conv = index.produced_by(name, "Conv")
    return None if conv is None else (conv, None, None)


class ChannelPaddingAsConcat:
    name = "channel-padding-as-concat"
    anchors = ("Add",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        for padded, other in (node.input, node.input[::-1]):
            pad = index.produced_by(padded, "Pad")
            if pad is None or index.only_consumer(padded) is None:
                continue
            extra = _channel_padding(index, pad)
            found = _conv_with_bias(index, other)
            if extra is None or found is None or index.only_consumer(other) is None:
                continue
            conv, bias_add, added_bias = found
            shortcut = pad.input[0]
            kept = channels(index, shortcut)
            if kept is None or channels(index, node.output[0]) != kept + extra:
                return None
            if kept % BLOCK or extra % BLOCK or not is_blocked(index, shortcut):
                return Declined(
                    self.name, node.name, "the shortcut is not in onnxruntime's blocked layout"
                )
            weights = index.weight(conv.input[1])
            bias = index.weight(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
            if weights is None or (len(conv.input) > 2 and conv.input[2] and bias is None):
                return Declined(self.name, node.name, "the convolution's weights are computed")
            if weights.dtype != np.float32 or weights.ndim < 3 or weights.shape[0] != kept + extra:
                return None
            if bias is not None and bias.size != weights.shape[0]:
                return None
            if int(index.attribute(conv, "group", 1)) != 1:
                return Declined(self.name, node.name, "a grouped convolution is not split")
            if bias is not None and added_bias is not None:
                return Declined(self.name, node.name, "the convolution has two biases")
            if added_bias is not None:
                if added_bias.size not in (1, weights.shape[0]):
                    return None
                bias = np.broadcast_to(added_bias, (weights.shape[0],))
            matched = [pad, conv, node] + ([bias_add] if bias_add is not None else [])
            if not index.is_free(matched):
                return None
            index.claim(matched)
            index.replace(matched, self._split(index, conv, weights, bias, kept, shortcut, node))
            for tensor in (padded, conv.output[0]):
                report.absorbed[tensor] = node.output[0]
            if bias_add is not None:
                report.absorbed[bias_add.output[0]] = node.output[0]
            return Fired(self.name, node.name, f"{kept} + {extra} zero channels")
        return None

    @staticmethod
    def _split(
        index: GraphIndex,
        conv: onnx.NodeProto,
        weights: np.ndarray,
        bias: np.ndarray | None,
        kept: int,
        shortcut: str,
        node: onnx.NodeProto,
    ) -> list[onnx.NodeProto]:
        """Two convolutions over the output channels, the shortcut added to the first."""
        total = weights.shape[0]
        fresh = index.names.fresh
        nodes, parts = [], []
        for part, rows in (("shortcut", slice(0, kept)), ("new", slice(kept, total))):
            inputs = [
                conv.input[0],
                index.add_initializer(
                    f"{conv.name}/{part}/weights", np.ascontiguousarray(weights[rows])
                ),
            ]
            if bias is not None:
                inputs.append(
                    index.add_initializer(
                        f"{conv.name}/{part}/bias", np.ascontiguousarray(bias[rows], np.float32)
                    )
                )
            output = fresh(f"{conv.name}/{part}")
            split = helper.make_node("Conv", inputs, [output], name=output)
            split.attribute.extend(conv.attribute)
            nodes.append(split)
            parts.append(output)
        joined = fresh(f"{node.name}/shortcut")
        nodes.append(helper.make_node("Add", [shortcut, parts[0]], [joined], name=joined))
        nodes.append(
            helper.make_node("Concat", [joined, parts[1]], [node.output[0]], name=node.name, axis=1)
        )
        return nodes
