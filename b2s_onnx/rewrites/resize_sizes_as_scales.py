"""Resize given output ``sizes`` of the spatial ``axes`` that are whole multiples of the
input -> the same Resize given ``scales``.

onnxruntime 1.31 keeps an upsampling Resize in its blocked channel layout (NCHWc) only
when its factors are whole and constant (nearest asymmetric/floor, or linear half_pixel,
align_corners or asymmetric), given as ``scales`` or as ``sizes`` of all four axes. Given
as ``sizes`` with ``axes`` (how OpenVINO's Interpolate on H and W is converted) the same
Resize runs in NCHW, with reorder passes before and after it. Measured 1 thread, medians
of interleaved runs: ``Conv -> Resize 2x (linear, align_corners) -> Conv`` on
[1,16,128,224] 4.73 -> 2.21 ms; road-segmentation-adas-0001, three upsamplings: 0.92x the
whole model's time (16 channels at 128x224: 3.47 ms plus 1.8 ms of reorders -> 1.30 ms).
A tensor of fewer than 16 channels is padded to a whole block in that layout, which made
road-segmentation's 4-channel [1,4,256,448] upsampling slower (4.0 -> 6.9 ms with its
reorder): those keep their sizes.

Sizes computed from the input's own shape times constant whole factors (OpenVINO's Paddle
frontend writes a scale-mode upsampling so when the batch is dynamic: PP-OCRv3's six) get
the factors as scales too, whatever the layout: the Shape/Cast/Mul chain goes, and shape
inference knows the output's dims again.

The scale of an axis is ``output / input`` either way, so the coordinates are the same
and onnxruntime's NCHW kernel gives the same bits; its blocked kernel interpolates in its
own arithmetic (within a few float32 ulps of the NCHW kernel).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._blocked_layout import (
    BLOCK,
    channels,
    is_blocked,
    upsample_mode_is_blocked,
)
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class ResizeSizesAsScales:
    name = "resize-sizes-as-scales"
    anchors = ("Resize",)
    exact = False

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if len(node.input) < 4 or not node.input[3] or node.input[2]:
            return None  # given scales already, or neither
        if not upsample_mode_is_blocked(index, node):
            return None
        mode = index.text(node, "mode", "nearest")
        if int(index.attribute(node, "antialias", 0)):
            return None
        if index.text(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
            return None
        data = index.info(node.input[0])
        if data.elem_type != onnx.TensorProto.FLOAT or data.shape is None or len(data.shape) != 4:
            return None
        axes = index.attribute(node, "axes")
        axes = None if axes is None else [int(a) % 4 for a in axes]
        if axes == [2, 3]:
            found = _static_factors(index, node)
        elif axes in (None, [0, 1, 2, 3]):
            found = _factors_of_own_shape(index, node)
        else:
            return None
        if found is None:
            return None
        if isinstance(found, str):
            return Declined(self.name, node.name, found)
        factors, chain = found
        width = channels(index, node.input[0])
        blocked = is_blocked(index, node.input[0])
        if blocked and (width is None or width < BLOCK):
            return Declined(
                self.name, node.name, "fewer channels than a block: padded, it would cost more"
            )
        if not blocked and not chain:
            reason = "the input is not in onnxruntime's blocked layout"
            return Declined(self.name, node.name, reason)
        matched = [*chain, node]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        scales = index.add_initializer(
            f"{node.name}/scales", np.asarray([1, 1, *factors], np.float32)
        )
        resized = helper.make_node(
            "Resize", [node.input[0], "", scales], [node.output[0]], name=node.name
        )
        resized.attribute.extend(
            a for a in node.attribute if a.name not in ("axes", "keep_aspect_ratio_policy")
        )
        index.replace(matched, [resized])
        # Nearest copies values whichever kernel runs it; linear interpolates in the blocked
        # kernel's own arithmetic.
        detail = f"{mode} x{factors[0]}x{factors[1]}"
        return Fired(self.name, node.name, detail, exact=mode == "nearest")


def _whole(values: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(values)) and np.all(values >= 1) and np.all(values % 1 == 0))


def _static_factors(
    index: GraphIndex, node: onnx.NodeProto
) -> tuple[list[int], list[onnx.NodeProto]] | str | None:
    """Constant sizes of H and W (``axes``), static shapes: the whole factors."""
    data, result = index.info(node.input[0]), index.info(node.output[0])
    if result.shape is None or None in data.shape or None in result.shape:
        return None
    if index.constant(node.input[3]) is None:
        return None
    if tuple(data.shape[:2]) != tuple(result.shape[:2]):
        return None
    pairs = list(zip(data.shape[2:], result.shape[2:], strict=True))
    factors = [out // size if size else 0 for size, out in pairs]
    if any(f < 1 or f * size != out for f, (size, out) in zip(factors, pairs, strict=True)):
        return "the sizes are not whole multiples"
    return factors, []


def _factors_of_own_shape(
    index: GraphIndex, node: onnx.NodeProto
) -> tuple[list[int], list[onnx.NodeProto]] | None:
    """Sizes computed as the input's own shape times constant whole factors (OpenVINO's
    Paddle frontend writes a scale-mode upsampling so, for a dynamic batch):
    ``Cast<int64>(Cast<float>(Shape(x)) * c)`` or ``Shape(x) * c``, c = [1, 1, f_h, f_w].
    The factors, and the nodes that computed the sizes (read by nothing else)."""
    chain: list[onnx.NodeProto] = []
    name = node.input[3]
    cast = index.produced_by(name, "Cast")
    if cast is not None:
        if index.attribute(cast, "to") != onnx.TensorProto.INT64:
            return None
        chain.append(cast)
        name = cast.input[0]
    mul = index.produced_by(name, "Mul")
    if mul is None:
        return None
    chain.append(mul)
    for shape_side, other in (mul.input, mul.input[::-1]):
        factors = index.constant(other)
        if factors is None or factors.shape != (4,):
            continue
        inner = shape_side
        if cast is not None:
            widen = index.produced_by(inner, "Cast")
            if widen is None or index.attribute(widen, "to") != onnx.TensorProto.FLOAT:
                continue
            chain.append(widen)
            inner = widen.input[0]
        elif factors.dtype != np.int64:
            continue
        shape = index.produced_by(inner, "Shape")
        if shape is None or shape.input[0] != node.input[0] or shape.attribute:
            return None
        chain.append(shape)
        if factors[0] != 1 or factors[1] != 1 or not _whole(factors[2:].astype(np.float64)):
            return None
        if any(index.only_consumer(n.output[0]) is None for n in chain):
            return None
        return [int(f) for f in factors[2:]], chain
    return None
