"""SpaceToDepth-1 (OpenVINO), N-D: shape rule, validation and numpy reference.

The inverse of DepthToSpace: each spatial axis is cut into blocks of ``block_size`` and
the blocks are moved into the channel axis, ordered by ``mode`` as in DepthToSpace.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from b2s_onnx.ops._common import Dim, NodeRef
from b2s_onnx.ops.depth_to_space import check_common

OP_TYPE = "SpaceToDepth"


def infer(node: NodeRef, data_shape: Sequence[Dim], block_size: int, mode: str) -> list[Dim]:
    """Checks every rule decidable from what is known and returns the output shape."""
    _, multiplier = check_common(node, data_shape, block_size, mode)
    for i, dim in enumerate(data_shape[2:], start=2):
        if dim is not None and dim % block_size:
            node.fail(
                "data",
                f"data.shape[{i}] = {dim} is not divisible by block_size = {block_size}",
            )
    channels = data_shape[1]
    out: list[Dim] = [data_shape[0], None if channels is None else channels * multiplier]
    out += [None if d is None else d // block_size for d in data_shape[2:]]
    return out


def reference(
    data: np.ndarray,
    block_size: int,
    mode: str,
    node: NodeRef | None = None,
) -> np.ndarray:
    """Split each spatial axis, move the block axes next to the channels; exact."""
    node = node or NodeRef(OP_TYPE, "reference")
    out_shape = infer(node, data.shape, block_size, mode)
    n, c, *spatial = data.shape
    k = len(spatial)
    split_shape = [n, c]
    for d in spatial:
        split_shape += [d // block_size, block_size]
    block_axes = [3 + 2 * i for i in range(k)]
    space_axes = [2 + 2 * i for i in range(k)]
    if mode == "blocks_first":
        perm = [0, *block_axes, 1, *space_axes]
    else:
        perm = [0, 1, *block_axes, *space_axes]
    return np.ascontiguousarray(data.reshape(split_shape).transpose(perm).reshape(out_shape))
