"""PRelu with a constant slope -> the fastest form onnxruntime has for it.

onnxruntime has no fused or vectorised PRelu path after a convolution: measured on a
4-layer 64-channel 3x3 conv stack, 1 thread, PRelu costs 1.67x a Relu there. In order of
preference, bit-exact (``_same_bits`` in the tests) but where said:

- one slope: LeakyRelu (1.00x; onnxruntime fuses it into the Conv, also after a residual
  Add), which computes ``x < 0 ? alpha * x : x`` like PRelu;
- per-channel slopes on a tensor onnxruntime keeps in its blocked layout
  (``_blocked_layout``), any channel count (onnxruntime pads the last block of the
  BatchNormalizations as of its Convs; measured on 10 and 24 channels, no reorder between
  them): ``x + BN(Relu(BN(x, -1)), 1 - s)``, two
  BatchNormalizations with mean 0, variance 1 and epsilon 0, which onnxruntime runs as
  depthwise 1x1 convolutions in the blocked layout with the Relu and the Add folded in, so
  no reorder pass and no separate kernel surrounds it. ``BN(x, -1)`` is ``-x``, so the sum is
  ``x`` for ``x >= 0`` and ``x - (1 - s) x`` below. Any finite slope works. Not bit-exact:
  three roundings (``1 - s``, the product, the sum) against the one of ``s x`` keep it
  within ``2^-23 (|1 - s| + |s|) |x|`` of it (an ulp or two of ``|x|`` for slopes in
  [0, 1]); ``-inf`` becomes NaN (``-inf + inf``). The exact spelling
  ``Relu(x) + BN(Relu(BN(x, -1)), -s)`` needs a Relu kernel of its own, since ``x`` has
  two readers: palm-detection (26 such PReLUs) takes 0.95x the time in this form, 1
  thread, medians of 300 interleaved runs;
- per-channel slopes in (0, 1]: ``Max(x, x * s)`` (1.18x), which picks ``x`` when x >= 0 and
  ``s * x`` when x < 0 (a zero slope would turn ``+inf`` into ``max(inf, 0 * inf) = NaN``);
- any other constant slopes (learned PReLUs have negative ones and ones above 1: MTCNN's
  range from -1.3 to 1.3), on any layout: ``x * Where(x < 0, s, 1)``, every bit of PRelu's
  ``x < 0 ? s * x : x`` (``x * 1`` is ``x``, signed zeros and NaNs included). The factor is
  a tensor, so onnxruntime's blocked layout does not take the Mul (a Mul by the constant
  slope became a blocked depthwise Conv between two reorders; ``Where(x < 0, x * s, x)``
  also loses the sign of ``0 * x``). onnxruntime's PRelu with a per-channel
  slope runs a generic broadcasting loop: measured 1 thread on [1, 32, 115, 155], 2.27 ms
  against 0.29 ms for this form (0.05 ms for a Relu); 0.81 against 0.11 ms on
  [1, 64, 56, 56]; below 32768 elements PRelu stays (``WHERE_FORM_MIN_SIZE``). The INT8
  path meets it after every convolution an INT8 IR runs as ConvInteger (a PReLU between
  the convolution and its FakeQuantize). MTCNN's P-Net (240x320, slopes -1.3 to 1.3),
  1 thread against OpenVINO: float 2.32x -> 1.07x, INT8 (NNCF) 3.54x -> 1.81x.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import channels, is_blocked
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Below this many elements a PRelu stays. onnxruntime's PRelu takes one branch per
#: element; on values of random sign it stayed near 0.5 ns an element up to ~30,000 of them
#: and then took ~4 ns (mispredicted branches, measured), while the Where form costs two
#: more kernel launches. Measured 1 thread, Where form / PRelu: 1.18-1.27x at 128-4096
#: elements, 1.10x at 13552, 0.81x at 32768, 0.27x at 36864, 0.13x at 570,000.
WHERE_FORM_MIN_SIZE = 32768


def _scaling(index: GraphIndex, data: str, scale: np.ndarray, output: str) -> onnx.NodeProto:
    """``data * scale`` per channel as a BatchNormalization that onnxruntime runs blocked."""
    count = scale.size
    shared = index.memo.setdefault("prelu-normalization", {})
    if count not in shared:
        shared[count] = (
            index.add_initializer("prelu/zeros", np.zeros(count, np.float32)),
            index.add_initializer("prelu/ones", np.ones(count, np.float32)),
        )
    zeros, ones = shared[count]
    name = index.add_initializer(f"{output}/scale", scale)
    return helper.make_node(
        "BatchNormalization", [data, name, zeros, zeros, ones], [output], name=output, epsilon=0.0
    )


def _blocked_form(
    index: GraphIndex, data: str, slope: np.ndarray, output: str, name: str
) -> list[onnx.NodeProto]:
    fresh = index.names.fresh
    negated, negative, scaled = (
        fresh(f"{name}/{part}") for part in ("negated", "negative", "scaled")
    )
    return [
        _scaling(index, data, np.full(slope.size, -1.0, np.float32), negated),
        helper.make_node("Relu", [negated], [negative], name=negative),
        _scaling(index, negative, (1 - slope).astype(np.float32), scaled),
        helper.make_node("Add", [data, scaled], [output], name=name),
    ]


def fast_prelu_form(
    index: GraphIndex, data: str, slope: np.ndarray, output: str, name: str
) -> tuple[list[onnx.NodeProto], str, bool] | str:
    """The fastest form of ``PRelu(data, slope)`` for a constant float32 slope: the nodes,
    a description and whether it keeps every bit; or the reason there is none."""
    flat = slope.reshape(-1)
    if slope.dtype != np.float32 or flat.size == 0 or not np.all(np.isfinite(flat)):
        return f"slope of type {slope.dtype} or with non-finite values is kept as is"
    if np.all(flat == flat[0]):
        alpha = float(flat[0])
        node = helper.make_node("LeakyRelu", [data], [output], name=name, alpha=alpha)
        return [node], f"LeakyRelu(alpha={alpha:g})", True
    count = channels(index, data)
    vector = None if count is None else channel_vector(slope, count)
    if vector is not None and is_blocked(index, data):
        return _blocked_form(index, data, vector, output, name), "blocked-layout PReLU", False
    slope_name = index.add_initializer(f"{name}/slope", slope)
    if np.all(flat > 0) and np.all(flat <= 1):
        scaled = index.names.fresh(f"{name}/scaled")
        nodes = [
            helper.make_node("Mul", [data, slope_name], [scaled], name=scaled),
            helper.make_node("Max", [data, scaled], [output], name=name),
        ]
        return nodes, "Max(x, x * slope)", True
    shape = index.info(data).shape
    if shape is not None and all(d is not None for d in shape):
        size = int(np.prod(shape, dtype=np.int64))
        if size < WHERE_FORM_MIN_SIZE:
            return (
                f"{size} elements: below {WHERE_FORM_MIN_SIZE} onnxruntime's one PRelu "
                "costs less than the three nodes of x * Where(x < 0, slope, 1)"
            )
    negative, factor = (index.names.fresh(f"{name}/{part}") for part in ("negative", "factor"))
    shared = index.memo.get("prelu-zero-one")
    if shared is None:
        shared = index.memo["prelu-zero-one"] = tuple(
            index.add_initializer(f"prelu/{value:g}", np.asarray(value, np.float32))
            for value in (0.0, 1.0)
        )
    zero, one = shared
    nodes = [
        helper.make_node("Less", [data, zero], [negative], name=negative),
        helper.make_node("Where", [negative, slope_name, one], [factor], name=factor),
        helper.make_node("Mul", [data, factor], [output], name=name),
    ]
    return nodes, "x * Where(x < 0, slope, 1)", True


class PReluAsLeakyRelu:
    name = "prelu-as-leaky-relu"
    anchors = ("PRelu",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        slope = index.constant(node.input[1])
        if slope is None:
            return Declined(self.name, node.name, "the slope is not a constant")
        if not index.is_free([node]):
            return None
        form = fast_prelu_form(index, node.input[0], slope, node.output[0], node.name)
        if isinstance(form, str):
            return Declined(self.name, node.name, form)
        index.claim([node])
        nodes, detail, exact = form
        index.replace([node], nodes)
        return Fired(self.name, node.name, detail, exact=exact)
