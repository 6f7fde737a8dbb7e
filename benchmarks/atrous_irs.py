"""IRs shaped as OpenVINO's TensorFlow frontend writes atrous convolutions and DeepLab's
ASPP head, built with openvino's opset API (no TensorFlow needed).

TensorFlow's ``with_space_to_batch`` (behind ``atrous_conv2d``, ``depthwise_conv2d`` with a
rate, Keras' dilated depthwise layers) becomes SpaceToBatch -> Transpose(NHWC->NCHW) ->
Convolution/GroupConvolution -> Transpose(back) -> BatchToSpace, followed by the bias Add,
BatchNorm folded into Multiply/Add and Relu or Relu6 (Clamp). With static shapes the pads
and crops are constants; with dynamic height and width they come from ShapeOf ->
StridedSlice -> FloorMod arithmetic (``required_space_to_batch_paddings``), split and
squeezed from an [M, 2] paddings tensor.

ASPP: from one feature map, a 1x1 convolution, three atrous branches (rates 6, 12, 18) and
image pooling (mean over H, W -> 1x1 convolution -> resized back), concatenated along the
channels and projected by a 1x1 convolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AtrousGraph:
    """What to build: ``branch`` is 'depthwise' (DeepLab's separable convs), 'full' (3x3
    atrous conv), 'maxpool' or 'avgpool'; ``dynamic`` leaves height and width unknown."""

    channels: int = 8
    size: int = 17
    rates: tuple[int, ...] = (2,)
    branch: str = "depthwise"
    nhwc: bool = True
    dynamic: bool = False
    aspp: bool = False
    kernel: int = 3
    seed: int = 0
    #: A depthwise branch is followed by its pointwise conv (DeepLab's separable convs).
    separable: bool = True
    #: TensorFlow's padding: "SAME" keeps height and width, "VALID" pads nothing itself.
    padding: str = "SAME"


def _paddings(ops, x, graph: AtrousGraph, rate: int, kernel: int):
    """(pads_begin, pads_end, crops_begin, crops_end) as the frontend writes them."""
    first = 1 if graph.nhwc else 2
    total = (kernel - 1) * rate if graph.padding == "SAME" else 0
    begin = np.full(2, total // 2, np.int32)
    end = np.full(2, total - total // 2, np.int32)
    zero = np.zeros(1, np.int32)

    def full_vector(vector):
        parts = [zero, vector, zero] if graph.nhwc else [zero, zero, vector]
        if isinstance(vector, np.ndarray):
            return np.concatenate(parts).astype(np.int64)
        return ops.concat(parts, 0)

    if not graph.dynamic:
        size = np.full(2, graph.size, np.int32)
        extra = (rate - (size + begin + end) % rate) % rate
        return (
            full_vector(begin),
            full_vector(end + extra),
            full_vector(np.zeros(2, np.int32)),
            full_vector(extra.astype(np.int32)),
        )
    sizes = ops.strided_slice(
        ops.shape_of(x, "i32"), np.array([first]), np.array([first + 2]), np.array([1]), [0], [0]
    )
    block = np.full(2, rate, np.int32)
    full = ops.add(ops.add(sizes, begin), end)
    extra = ops.floor_mod(ops.subtract(block, ops.floor_mod(full, block)), block)
    axis = np.array(1, np.int32)
    paddings = ops.concat(
        [ops.unsqueeze(ops.constant(begin), axis), ops.unsqueeze(ops.add(end, extra), axis)], 1
    )
    crops = ops.concat(
        [ops.unsqueeze(ops.constant(np.zeros(2, np.int32)), axis), ops.unsqueeze(extra, axis)], 1
    )
    columns = []
    for pairs in (paddings, crops):
        parts = ops.split(pairs, np.array(1, np.int32), 2)
        columns += [ops.squeeze(parts.output(i), np.array(1, np.int32)) for i in range(2)]
    return tuple(full_vector(c) for c in columns)


class _Builder:
    def __init__(self, graph: AtrousGraph) -> None:
        import openvino.opset13 as ops

        self.ops = ops
        self.graph = graph
        self.rng = np.random.default_rng(graph.seed)
        self.to_nchw = np.array([0, 3, 1, 2], np.int64)
        self.to_nhwc = np.array([0, 2, 3, 1], np.int64)

    def constant(self, shape, scale=0.1):
        return self.ops.constant((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def channel_shape(self):
        c = self.graph.channels
        return [1, 1, 1, c] if self.graph.nhwc else [1, c, 1, 1]

    def conv(self, x, kernel: int, depthwise: bool):
        """A TF conv in the graph's layout: NHWC data is transposed around it."""
        ops, c = self.ops, self.graph.channels
        if self.graph.nhwc:
            x = ops.transpose(x, self.to_nchw)
        ones, zeros = [1, 1], [0, 0]
        if depthwise:
            weights = self.constant([c, 1, 1, kernel, kernel], 0.3)
            x = ops.group_convolution(x, weights, ones, zeros, zeros, ones)
        else:
            weights = self.constant([c, c, kernel, kernel], 1 / (c * kernel))
            x = ops.convolution(x, weights, ones, zeros, zeros, ones)
        if self.graph.nhwc:
            x = ops.transpose(x, self.to_nhwc)
        return x

    def pool(self, x, kernel: int, kind: str):
        ops = self.ops
        if self.graph.nhwc:
            x = ops.transpose(x, self.to_nchw)
        if kind == "maxpool":
            x = ops.max_pool(x, [1, 1], [1, 1], [0, 0], [0, 0], [kernel, kernel]).output(0)
        else:
            x = ops.avg_pool(x, [1, 1], [0, 0], [0, 0], [kernel, kernel], True)
        if self.graph.nhwc:
            x = ops.transpose(x, self.to_nhwc)
        return x

    def batch_norm_relu(self, x, relu6: bool):
        """Bias Add, BatchNorm folded as Multiply/Add, Relu or Relu6 (Clamp)."""
        ops = self.ops
        x = ops.add(x, self.constant(self.channel_shape()))
        x = ops.multiply(
            x,
            ops.constant(
                np.abs(self.rng.standard_normal(self.channel_shape())).astype(np.float32) + 0.5
            ),
        )
        x = ops.add(x, self.constant(self.channel_shape()))
        return ops.clamp(x, 0.0, 6.0) if relu6 else ops.relu(x)

    def atrous(self, x, rate: int):
        """SpaceToBatch -> conv or pool -> BatchToSpace, then bias/BN/activation."""
        ops, graph = self.ops, self.graph
        int_type = np.int32 if graph.dynamic else np.int64
        blocks = np.array([1, rate, rate, 1] if graph.nhwc else [1, 1, rate, rate], int_type)
        pads_begin, pads_end, crops_begin, crops_end = _paddings(ops, x, graph, rate, graph.kernel)
        y = ops.space_to_batch(x, blocks, pads_begin, pads_end)
        if graph.branch in ("maxpool", "avgpool"):
            y = self.pool(y, graph.kernel, graph.branch)
        else:
            y = self.conv(y, graph.kernel, graph.branch == "depthwise")
        y = ops.batch_to_space(y, blocks, crops_begin, crops_end)
        if graph.branch in ("maxpool", "avgpool"):
            return y
        y = self.batch_norm_relu(y, relu6=graph.branch == "depthwise")
        if graph.branch == "depthwise" and graph.separable:
            y = self.batch_norm_relu(self.conv(y, 1, False), relu6=True)
        return y

    def image_pooling(self, x):
        """Mean over H, W -> 1x1 conv -> back to H x W. TensorFlow resizes the 1x1 map
        bilinearly, which copies it; Broadcast writes the same values."""
        ops = self.ops
        axes = np.array([1, 2] if self.graph.nhwc else [2, 3], np.int64)
        pooled = ops.reduce_mean(x, axes, True)
        pooled = self.batch_norm_relu(self.conv(pooled, 1, False), relu6=False)
        return ops.broadcast(pooled, ops.shape_of(x), "bidirectional")

    def build(self):
        import openvino as ov

        ops, graph = self.ops, self.graph
        spatial = [-1, -1] if graph.dynamic else [graph.size, graph.size]
        c = graph.channels
        shape = [1, *spatial, c] if graph.nhwc else [1, c, *spatial]
        data = ops.parameter(shape, np.float32, name="data")
        branches = [self.atrous(data, rate) for rate in graph.rates]
        if not graph.aspp:
            (out,) = branches
        else:
            one_by_one = self.batch_norm_relu(self.conv(data, 1, False), relu6=False)
            branches = [one_by_one, *branches, self.image_pooling(data)]
            concat = ops.concat(branches, 3 if graph.nhwc else 1)
            if graph.nhwc:
                concat = ops.transpose(concat, self.to_nchw)
            weights = self.constant([c, c * len(branches), 1, 1], 1 / c)
            out = ops.convolution(concat, weights, [1, 1], [0, 0], [0, 0], [1, 1])
            if graph.nhwc:
                out = ops.transpose(out, self.to_nhwc)
        out.output(0).set_names({"out"})
        return ov.Model([out], [data])


def atrous_ir_model(graph: AtrousGraph):
    """An ``openvino.Model`` of ``graph`` (save it with ``compress_to_fp16=False``)."""
    return _Builder(graph).build()
