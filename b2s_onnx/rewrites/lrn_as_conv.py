"""LRN across channels -> the window sum as a 1x1 Conv with banded weights, then the power.

``LRN(x) = x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta``.
onnxruntime's LRN kernel is several times slower than the same arithmetic spelled with its
fast kernels: the window sum is a 1x1 convolution whose weights are ``alpha / size`` inside
the band (the bias becomes its bias), and the power is ``Sqrt(d) * Sqrt(Sqrt(d))`` for the
usual ``beta = 0.75``, ``Sqrt(d)`` for 0.5, else ``Exp(-beta * Log(d))``. Measured 1 thread
(size 5, beta 0.75): [1,64,56,56] 4.11 -> 0.54 ms, [1,192,28,28] 2.95 -> 0.52 ms,
[1,256,28,28] 4.02 -> 0.91 ms, [1,512,14,14] 2.13 -> 0.71 ms; a conv stack with an LRN,
against OpenVINO: 2.18x -> 0.94x. The convolution costs ``channels`` multiply-adds per
element, so only up to 512 channels (measured).

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


def band(channels: int, size: int, scale: float) -> np.ndarray:
    """[channels, channels, 1, 1] weights summing ONNX LRN's window, times ``scale``: channel
    c reads c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)."""
    weights = np.zeros((channels, channels, 1, 1), np.float32)
    before, after = (size - 1) // 2, size // 2
    for c in range(channels):
        weights[c, max(0, c - before) : min(channels, c + after + 1)] = scale
    return weights


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
        if channels > MAX_CHANNELS:
            return Declined(self.name, node.name, f"more than {MAX_CHANNELS} channels")
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
        weights = index.add_initializer(f"{base}/band", band(channels, size, alpha / size))
        offsets = index.add_initializer(f"{base}/bias", np.full(channels, bias, np.float32))
        nodes = [
            helper.make_node("Mul", [data, data], [squares], name=squares),
            helper.make_node("Conv", [squares, weights, offsets], [summed], name=summed),
        ]
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
        return Fired(self.name, node.name, f"{channels} channels, size {size}, beta {beta:g}")
