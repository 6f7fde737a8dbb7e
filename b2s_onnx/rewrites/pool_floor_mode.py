"""AveragePool with ``ceil_mode=1`` whose windows tile the input exactly -> ``ceil_mode=0``.

onnxruntime's NCHWc layout transformer keeps an AveragePool in the blocked layout between
convolutions only without ceil mode (with ``count_include_pad=1``, as OpenVINO's
``exclude-pad=false`` writes it); otherwise the pool runs in NCHW with a ReorderOutput
before it and a ReorderInput after it. road-segmentation-adas-0001 has two such pools
(k=s=2 and k=s=4 on [1,48,64,112]): rewritten, onnxruntime's optimized graph loses 3 of its
19 reorder nodes. When ``(size + pads - effective kernel)`` is a multiple of the stride on
every spatial axis, floor and ceil give the same output size and the same windows and
divisors; with ``count_include_pad=1`` onnxruntime's two AveragePool kernels still sum and
divide in another order (outputs within 1e-7 of each other on unit-scale inputs), as
OpenVINO's kernel differs from both. Float rounding only.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


def windows_tile_exactly(
    sizes: tuple[int | None, ...],
    kernel: list[int],
    strides: list[int],
    pads: list[int],
    dilations: list[int],
) -> bool:
    """Whether the last window on every axis ends exactly at the padded input's end."""
    spatial = len(kernel)
    for axis, size in enumerate(sizes):
        if size is None:
            return False
        span = size + pads[axis] + pads[axis + spatial] - ((kernel[axis] - 1) * dilations[axis] + 1)
        if span < 0 or span % strides[axis]:
            return False
    return True


class PoolFloorMode:
    name = "pool-floor-mode"
    #: Changes float rounding (see the module doc), so checks compare within tolerance.
    exact = False
    anchors = ("AveragePool",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if not index.attribute(node, "ceil_mode", 0):
            return None
        auto_pad = index.attribute(node, "auto_pad", b"NOTSET")
        if auto_pad not in (b"NOTSET", "NOTSET"):
            return Declined(self.name, node.name, "auto_pad computes the pads at run time")
        shape = index.info(node.input[0]).shape
        kernel = list(index.attribute(node, "kernel_shape", []))
        if shape is None or len(shape) != len(kernel) + 2:
            return Declined(self.name, node.name, "the input's spatial shape is unknown")
        spatial = len(kernel)
        strides = list(index.attribute(node, "strides", [1] * spatial))
        pads = list(index.attribute(node, "pads", [0] * 2 * spatial))
        dilations = list(index.attribute(node, "dilations", [1] * spatial))
        if not windows_tile_exactly(shape[2:], kernel, strides, pads, dilations):
            return Declined(self.name, node.name, "ceil mode adds a partial window")
        if not index.is_free([node]):
            return None
        index.claim([node])
        floor = onnx.NodeProto()
        floor.CopyFrom(node)
        del floor.attribute[:]
        floor.attribute.extend(a for a in node.attribute if a.name != "ceil_mode")
        index.replace([node], [floor])
        return Fired(self.name, node.name, "ceil_mode=0 (same windows)")
