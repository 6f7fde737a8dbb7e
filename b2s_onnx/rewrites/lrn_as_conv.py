"""LRN across channels -> the window sum as a 1x1 Conv with banded weights, then the power.

``LRN(x) = x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta``.
onnxruntime's LRN kernel is several times slower than the same arithmetic spelled with its
fast kernels: the window sum is a 1x1 convolution whose weights are ``alpha / size`` inside
the band (the bias becomes its bias), and the power is ``Sqrt(d) * Sqrt(Sqrt(d))`` for the
usual ``beta = 0.75``, ``Sqrt(d)`` for 0.5, else ``Exp(-beta * Log(d))``. Measured 1 thread
(size 5, beta 0.75): [1,64,56,56] 4.11 -> 0.54 ms, [1,192,28,28] 2.95 -> 0.52 ms,
[1,256,28,28] 4.02 -> 0.91 ms, [1,512,14,14] 2.13 -> 0.71 ms; a conv stack with an LRN,
against OpenVINO: 2.18x -> 0.94x. The banded convolution costs ``channels`` multiply-adds
per element. From 96 channels in whole blocks of 16 the window sum is grouped instead: one
Gather copies each block of 16 channels with its ``size - 1`` neighbours into overlapping
windows, and a grouped 1x1 Conv sums each block from its own window, ``16 + size - 1``
multiply-adds per element, with no limit on channels. Measured against the banded form, 1
thread (size 5, the whole LRN): [1,64,56,56] 0.47 -> 0.43 ms, [1,96,55,55] 0.86 -> 0.71,
[1,192,56,56] 2.65 -> 1.69, [1,256,28,28] 0.81 -> 0.47, [1,512,14,14] 0.62 -> 0.19,
[1,1024,7,7] 1.05 (onnxruntime's LRN) -> 0.12 ms; GoogLeNet 0.98x, AlexNet 0.99x the
time. At 64 channels the LRN alone was faster too, but a 64-channel conv stack with an LRN
after every Conv took 1.02x the time (the banded Conv stays in onnxruntime's blocked
layout between its neighbours), hence 96. Beyond the first and last channel a window
repeats an edge channel under a zero weight: a zero weight times an infinite square is
NaN, as in the banded form, whose zeros span every channel.

Float rounding only: against float64, 7.7e-6 (this form) and 7.4e-6 (onnxruntime's LRN)
on values up to 40.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Most channels the banded 1x1 convolution is written for (see the module doc).
MAX_CHANNELS = 512
#: From this many channels (in whole blocks) the window sum is a grouped convolution.
GROUPED_FROM = 96
#: Channels per group: onnxruntime's blocked layout on AVX-512.
GROUP = 16


def band(channels: int, size: int, scale: float) -> np.ndarray:
    """[channels, channels, 1, 1] weights summing ONNX LRN's window, times ``scale``: channel
    c reads c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)."""
    weights = np.zeros((channels, channels, 1, 1), np.float32)
    before, after = (size - 1) // 2, size // 2
    for c in range(channels):
        weights[c, max(0, c - before) : min(channels, c + after + 1)] = scale
    return weights


def window_channels(channels: int, size: int) -> np.ndarray:
    """The channels each block's window reads, block after block: channel ``16 b - before``
    to ``16 b + 15 + after``, clipped into range (a clipped slot gets a zero weight)."""
    before, after = (size - 1) // 2, size // 2
    first = np.arange(0, channels, GROUP)[:, None] - before
    picked = first + np.arange(GROUP + before + after)[None, :]
    return np.clip(picked, 0, channels - 1).reshape(-1).astype(np.int64)


def windows(channels: int, size: int, scale: float) -> np.ndarray:
    """[channels, GROUP + size - 1, 1, 1] weights of the grouped window sum: output channel
    c of block b reads its window's slots that hold channels c - floor((size - 1) / 2)
    .. c + ceil((size - 1) / 2) (those in range), times ``scale``."""
    before = (size - 1) // 2
    width = GROUP + size - 1
    weights = np.zeros((channels, width, 1, 1), np.float32)
    for c in range(channels):
        block_start = c - c % GROUP - before  # the channel the window's first slot holds
        for slot in range(c % GROUP, c % GROUP + size):
            if 0 <= block_start + slot < channels:
                weights[c, slot] = scale
    return weights


def _grouped_sum(
    index: GraphIndex,
    squares: str,
    summed: str,
    channels: int,
    size: int,
    scale: float,
    offsets: str,
    base: str,
) -> list[onnx.NodeProto]:
    """Gather of every block's window (one pass, overlaps copied) -> grouped 1x1 Conv."""
    stacked = index.names.fresh(f"{base}/windows")
    picked = index.add_initializer(f"{base}/window_channels", window_channels(channels, size))
    weights = index.add_initializer(f"{base}/window_weights", windows(channels, size, scale))
    return [
        helper.make_node("Gather", [squares, picked], [stacked], name=stacked, axis=1),
        helper.make_node(
            "Conv", [stacked, weights, offsets], [summed], name=summed, group=channels // GROUP
        ),
    ]


class LrnAsConv:
    name = "lrn-as-conv"
    exact = False
    anchors = ("LRN",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        info = index.info(node.input[0])
        if info.elem_type != onnx.TensorProto.FLOAT or info.shape is None or len(info.shape) != 4:
            return None
        channels = info.shape[1]
        if channels is None:
            return Declined(self.name, node.name, "the channel count is unknown")
        grouped = channels >= GROUPED_FROM and channels % GROUP == 0
        if channels > MAX_CHANNELS and not grouped:
            return Declined(
                self.name,
                node.name,
                f"more than {MAX_CHANNELS} channels, not in whole blocks of {GROUP}",
            )
        size = int(index.attribute(node, "size", 0))
        alpha = float(index.attribute(node, "alpha", 1e-4))
        beta = float(index.attribute(node, "beta", 0.75))
        bias = float(index.attribute(node, "bias", 1.0))
        if size < 1 or not all(np.isfinite(v) for v in (alpha, beta, bias)):
            return Declined(self.name, node.name, "attributes out of range")
        if not index.is_free([node]):
            return None
        index.claim([node])
        fresh = index.names.fresh
        data, output, base = node.input[0], node.output[0], node.name or node.output[0]
        squares, summed = fresh(f"{base}/squares"), fresh(f"{base}/window")
        offsets = index.add_initializer(f"{base}/bias", np.full(channels, bias, np.float32))
        nodes = [helper.make_node("Mul", [data, data], [squares], name=squares)]
        if grouped:
            nodes += _grouped_sum(
                index, squares, summed, channels, size, alpha / size, offsets, base
            )
        else:
            weights = index.add_initializer(f"{base}/band", band(channels, size, alpha / size))
            nodes.append(
                helper.make_node("Conv", [squares, weights, offsets], [summed], name=summed)
            )
        if beta in (0.5, 0.75):
            root = fresh(f"{base}/sqrt")
            nodes.append(helper.make_node("Sqrt", [summed], [root], name=root))
            denominator = root
            if beta == 0.75:
                fourth, power = fresh(f"{base}/fourth_root"), fresh(f"{base}/power")
                nodes += [
                    helper.make_node("Sqrt", [root], [fourth], name=fourth),
                    helper.make_node("Mul", [root, fourth], [power], name=power),
                ]
                denominator = power
            nodes.append(helper.make_node("Div", [data, denominator], [output], name=base))
        else:
            logs, scaled, factor = (fresh(f"{base}/{p}") for p in ("log", "scaled", "factor"))
            minus_beta = index.add_initializer(f"{base}/minus_beta", np.float32(-beta))
            nodes += [
                helper.make_node("Log", [summed], [logs], name=logs),
                helper.make_node("Mul", [logs, minus_beta], [scaled], name=scaled),
                helper.make_node("Exp", [scaled], [factor], name=factor),
                helper.make_node("Mul", [data, factor], [output], name=base),
            ]
        index.replace([node], nodes)
        form = f"grouped by {GROUP}" if grouped else "banded"
        return Fired(
            self.name, node.name, f"{channels} channels, size {size}, beta {beta:g}, {form}"
        )
