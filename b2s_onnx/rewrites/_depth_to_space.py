"""DepthToSpace as onnxruntime runs it fastest on a static shape: two Transposes.

onnxruntime's DepthToSpace is one rank-6 transpose that moves the innermost axis, its
slowest kind (docs/performance.md). In two stages each moves less: first each column phase
goes innermost (the width interleaved), then each row phase goes between the rows. The
rewrites that write an interleave (`conv-into-upsampling`, `conv-after-upsampling`,
`strided-conv-transpose-as-phases`) decide when it pays; this writes it. Same bits.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex


def depth_to_space_in_stages(
    index: GraphIndex,
    source: str,
    final: str,
    name: str,
    mode: str,
    block: int,
    shape: tuple[int, int, int, int],
) -> list[onnx.NodeProto]:
    """``final`` = DepthToSpace(``source``, ``block``, ``mode``) for an output of static
    ``shape`` [N, C, H*b, W*b], as Reshape -> Transpose -> Reshape -> Transpose -> Reshape
    (the last one named ``name``)."""
    n, c, height, width = shape
    h, w = height // block, width // block
    if mode == "DCR":  # channel = (row phase, column phase, c)
        split_shape, first = (n, block, block, c, h, w), [0, 1, 3, 4, 5, 2]
        rows_shape, second = (n, block, c, h, w * block), [0, 2, 3, 1, 4]
    else:  # CRD: channel = (c, row phase, column phase)
        split_shape, first = (n, c, block, block, h, w), [0, 1, 2, 4, 5, 3]
        rows_shape, second = (n, c, block, h, w * block), [0, 1, 3, 2, 4]
    fresh = index.names.fresh
    split, columns, rows, moved = (
        fresh(f"{name}/{part}") for part in ("split", "columns", "rows", "moved")
    )

    def shape_of(dims: tuple[int, ...]) -> str:
        return index.add_initializer(f"{name}/shape", np.asarray(dims, np.int64))

    return [
        helper.make_node("Reshape", [source, shape_of(split_shape)], [split]),
        helper.make_node("Transpose", [split], [columns], perm=first),
        helper.make_node("Reshape", [columns, shape_of(rows_shape)], [rows]),
        helper.make_node("Transpose", [rows], [moved], perm=second),
        helper.make_node("Reshape", [moved, shape_of((n, c, height, width))], [final], name=name),
    ]
