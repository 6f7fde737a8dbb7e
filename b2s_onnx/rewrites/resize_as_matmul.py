"""Linear or cubic Resize of the last two axes -> two MatMuls with constant interpolation
matrices: ``A_h @ (X @ A_w^T)``.

Linear and cubic resizing are separable and linear: every output row is a fixed weighted
sum of 2 (linear) or 4 (cubic) input rows, and the same for columns, so resizing is a
product with an ``[out, in]`` matrix per axis. onnxruntime's Resize pays a per-element
cost that the MatMuls (dense, so their work grows with the input size) beat where the
maps are small or the mode is cubic. Measured 1 thread, Resize against the MatMuls:

- cubic, [1,3,270,480] -> 1080x1920 (a super-resolution model's bicubic skip path):
  356 -> 32 ms (OpenVINO 130 ms); [1,32,64,64] -> 128x128: 34.6 -> 1.07 ms;
  [1,3,1080,1920] -> 2160x3840: 1708 -> 685 ms;
- linear, [1,256,8,8] -> 16x16: 0.119 -> 0.054 ms (OpenVINO 0.019 ms); [1,48,26,26] x2:
  0.238 -> 0.101 ms; sides of 64: a tie; sides of 128: the MatMuls twice as slow.

Hence: cubic whenever each matrix stays below 2^22 elements (16 MB of weights); linear
only for sides up to 32. The weights follow ONNX's Resize (which OpenVINO's Interpolate
matches in these modes, see ``ir.converters.interpolate``): coordinates computed in
float32 as onnxruntime computes them, indices outside the input clamped to its edge, or
dropped and the rest renormalised with ``exclude_outside``. Float rounding only: the same
weighted sums, added in another order.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Largest input height or width a linear Resize is rewritten for (see the module doc).
MAX_LINEAR_INPUT = 32
#: Largest interpolation matrix (elements) written as a weight.
MAX_MATRIX = 1 << 22
_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _source_coordinates(size_in: int, size_out: int, mode: str) -> np.ndarray:
    """Where each output sample reads the input, in float32 as onnxruntime computes it."""
    out = np.arange(size_out, dtype=np.float32)
    scale = np.float32(size_out) / np.float32(size_in)
    if mode == "align_corners":
        if size_out == 1:
            return np.zeros(1, np.float32)
        return out * np.float32(size_in - 1) / np.float32(size_out - 1)
    if mode == "asymmetric":
        return out / scale
    if mode == "pytorch_half_pixel" and size_out == 1:
        return np.zeros(1, np.float32)
    return (out + np.float32(0.5)) / scale - np.float32(0.5)


def _cubic(distance: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def interpolation_matrix(
    size_in: int,
    size_out: int,
    coordinates: str,
    mode: str = "linear",
    cubic_a: float = -0.75,
    exclude_outside: bool = False,
) -> np.ndarray:
    """The [size_out, size_in] float32 matrix of ONNX's linear or cubic Resize on one axis."""
    x = _source_coordinates(size_in, size_out, coordinates).astype(np.float64)
    rows = np.arange(size_out)
    matrix = np.zeros((size_out, size_in))
    if mode == "linear":
        x = np.clip(x, 0, size_in - 1)
        low = np.floor(x)
        taps = [(low, 1 - (x - low)), (low + 1, x - low)]
    else:
        base = np.floor(x)
        taps = [(base + k, _cubic(x - (base + k), cubic_a)) for k in (-1, 0, 1, 2)]
    for index, weight in taps:
        inside = (index >= 0) & (index <= size_in - 1)
        if exclude_outside:
            weight = np.where(inside, weight, 0.0)
        np.add.at(matrix, (rows, np.clip(index, 0, size_in - 1).astype(np.int64)), weight)
    if exclude_outside:
        matrix /= matrix.sum(axis=1, keepdims=True)
    return matrix.astype(np.float32)


class ResizeAsMatMul:
    name = "resize-as-matmul"
    exact = False
    anchors = ("Resize",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        mode = index.text(node, "mode", "nearest")
        if mode not in ("linear", "cubic"):
            return None
        coordinates = index.text(node, "coordinate_transformation_mode", "half_pixel")
        if coordinates not in _COORDINATES or int(index.attribute(node, "antialias", 0)):
            return None
        if index.text(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
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
        if mode == "linear" and max(height, width) > MAX_LINEAR_INPUT:
            return Declined(self.name, node.name, f"a linear input side above {MAX_LINEAR_INPUT}")
        if max(height * out_h, width * out_w) > MAX_MATRIX:
            return Declined(self.name, node.name, "an interpolation matrix above 2^22 elements")
        if any(name and index.constant(name) is None for name in node.input[1:]):
            return Declined(self.name, node.name, "the resize parameters are computed")
        if not self._sizes_match_scales(index, node, data.shape, result.shape):
            return Declined(self.name, node.name, "scales that do not give whole sizes")
        if not index.is_free([node]):
            return None
        index.claim([node])
        options = {
            "coordinates": coordinates,
            "mode": mode,
            "cubic_a": float(index.attribute(node, "cubic_coeff_a", -0.75)),
            "exclude_outside": bool(index.attribute(node, "exclude_outside", 0)),
        }
        along_width = interpolation_matrix(width, out_w, **options)
        along_height = interpolation_matrix(height, out_h, **options)
        columns = index.add_initializer(f"{node.name}/columns", np.ascontiguousarray(along_width.T))
        rows = index.add_initializer(f"{node.name}/rows", along_height)
        wide = index.names.fresh(f"{node.name}/columns_resized")
        index.replace(
            [node],
            [
                helper.make_node("MatMul", [node.input[0], columns], [wide], name=wide),
                helper.make_node("MatMul", [rows, wide], [node.output[0]], name=node.name),
            ],
        )
        return Fired(self.name, node.name, f"{mode} {height}x{width} -> {out_h}x{out_w}")

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
