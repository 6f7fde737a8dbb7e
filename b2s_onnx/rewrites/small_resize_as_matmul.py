"""Linear Resize of a small map over its last two axes -> two MatMuls with constant
interpolation matrices: ``A_h @ (X @ A_w^T)``.

Bilinear resizing is separable and linear: every output row is a fixed combination of at
most two input rows, and the same for columns, so it is a product with an ``[out, in]``
matrix per axis. onnxruntime's linear Resize pays a per-element cost that dominates on the
small maps of detection necks (MediaPipe's palm detector upsamples [1,256,8,8] to 16x16:
0.119 ms as Resize, 0.054 ms as the MatMuls, OpenVINO 0.019 ms; [1,48,26,26] x2: 0.238 vs
0.101 ms; 1 thread). The matrices are dense, so the work grows with the input size: at 64
input rows or columns both forms took the same time (0.88 vs 0.73 ms for [1,32,64,64] x2,
0.72 vs 0.73 ms for [1,16,64,112]) and at 128 the MatMuls are twice as slow, hence the
limit of 32.

Float rounding only: each output is the same two-by-two weighted sum, with the weights
computed once in float64 and rounded to float32 (onnxruntime computes them in float32).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Largest input height or width resized this way (see the module doc).
MAX_INPUT = 32
_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def interpolation_matrix(size_in: int, size_out: int, mode: str) -> np.ndarray:
    """The [size_out, size_in] matrix of ONNX's linear Resize along one axis."""
    out = np.arange(size_out, dtype=np.float64)
    scale = size_out / size_in
    if mode == "align_corners":
        x = out * (size_in - 1) / (size_out - 1) if size_out > 1 else np.zeros(size_out)
    elif mode == "asymmetric":
        x = out / scale
    elif mode == "pytorch_half_pixel" and size_out == 1:
        x = np.zeros(size_out)
    else:
        x = (out + 0.5) / scale - 0.5
    x = np.clip(x, 0, size_in - 1)
    low = np.floor(x).astype(np.int64)
    high = np.minimum(low + 1, size_in - 1)
    fraction = x - low
    matrix = np.zeros((size_out, size_in))
    rows = np.arange(size_out)
    np.add.at(matrix, (rows, low), 1 - fraction)
    np.add.at(matrix, (rows, high), fraction)
    return matrix.astype(np.float32)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SmallResizeAsMatMul:
    name = "small-resize-as-matmul"
    exact = False
    anchors = ("Resize",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if _text(index.attribute(node, "mode", "nearest")) != "linear":
            return None
        mode = _text(index.attribute(node, "coordinate_transformation_mode", "half_pixel"))
        if mode not in _MODES or int(index.attribute(node, "antialias", 0)):
            return None
        if _text(index.attribute(node, "keep_aspect_ratio_policy", "stretch")) != "stretch":
            return None
        data, result = index.info(node.input[0]), index.info(node.output[0])
        if data.elem_type != onnx.TensorProto.FLOAT:
            return None
        if data.shape is None or result.shape is None or len(data.shape) != 4:
            return None
        if None in data.shape or None in result.shape:
            return None
        if tuple(data.shape[:2]) != tuple(result.shape[:2]):
            return None  # only the last two axes resized
        (height, width), (out_h, out_w) = data.shape[2:], result.shape[2:]
        if max(height, width) > MAX_INPUT:
            return Declined(self.name, node.name, f"an input side above {MAX_INPUT}")
        if any(name and index.constant(name) is None for name in node.input[1:]):
            return Declined(self.name, node.name, "the resize parameters are computed")
        if not self._sizes_match_scales(index, node, data.shape, result.shape):
            return Declined(self.name, node.name, "scales that do not give whole sizes")
        if not index.is_free([node]):
            return None
        index.claim([node])
        columns = index.add_initializer(
            f"{node.name}/columns", np.ascontiguousarray(interpolation_matrix(width, out_w, mode).T)
        )
        rows = index.add_initializer(f"{node.name}/rows", interpolation_matrix(height, out_h, mode))
        wide = index.names.fresh(f"{node.name}/columns_resized")
        index.replace(
            [node],
            [
                helper.make_node("MatMul", [node.input[0], columns], [wide], name=wide),
                helper.make_node("MatMul", [rows, wide], [node.output[0]], name=node.name),
            ],
        )
        return Fired(self.name, node.name, f"{height}x{width} -> {out_h}x{out_w}")

    @staticmethod
    def _sizes_match_scales(index: GraphIndex, node: onnx.NodeProto, shape, out_shape) -> bool:
        """With ``scales`` (no ``sizes``), ONNX's coordinates use the scale itself, which
        equals out/in only when it gives the output size exactly."""
        sizes = node.input[3] if len(node.input) > 3 else ""
        if sizes:
            return True
        scales = index.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scales is None:
            return False
        axes = index.attribute(node, "axes", None)
        axes = list(range(4)) if axes is None else [a % 4 for a in axes]
        by_axis = dict(zip(axes, np.asarray(scales, np.float64).reshape(-1), strict=False))
        return all(by_axis.get(a, 1.0) * shape[a] == out_shape[a] for a in range(4))
