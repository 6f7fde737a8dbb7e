"""DepthToSpace-1 (OpenVINO), N-D: shape rule, validation and numpy reference.

Moves ``block_size ** K`` slices of the channel axis into the K spatial axes. The mode
says how the channel index splits: ``blocks_first`` = ``[bs, ..., bs, C']`` (ONNX DCR),
``depth_first`` = ``[C', bs, ..., bs]`` (ONNX CRD).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from b2s_onnx.ops._common import INT64_MAX, Dim, NodeRef, check_rank

OP_TYPE = "DepthToSpace"
MIN_RANK = 3
MODES = ("blocks_first", "depth_first")


def check_attributes(node: NodeRef, block_size: int, mode: str) -> None:
    """The attribute rules shared by DepthToSpace and SpaceToDepth."""
    if mode not in MODES:
        node.fail("mode", f"mode = '{mode}' must be one of {', '.join(MODES)}")
    if block_size < 1:
        node.fail("block_size", f"block_size = {block_size} must be >= 1")


def check_common(
    node: NodeRef, data_shape: Sequence[Dim], block_size: int, mode: str
) -> tuple[int, int]:
    """The rules DepthToSpace and SpaceToDepth share; returns (K, block_size^K)."""
    check_rank(node, len(data_shape), MIN_RANK)
    check_attributes(node, block_size, mode)
    k = len(data_shape) - 2
    factor = block_size**k
    if factor > INT64_MAX:
        node.fail("block_size", f"block_size^{k} = {factor} overflows int64")
    return k, factor


def infer(node: NodeRef, data_shape: Sequence[Dim], block_size: int, mode: str) -> list[Dim]:
    """Checks every rule decidable from what is known and returns the output shape."""
    k, divisor = check_common(node, data_shape, block_size, mode)
    channels = data_shape[1]
    if channels is not None and channels % divisor:
        node.fail(
            "data",
            f"data.shape[1] = {channels} is not divisible by block_size^{k} = {divisor}",
        )
    out: list[Dim] = [data_shape[0], None if channels is None else channels // divisor]
    out += [None if d is None else d * block_size for d in data_shape[2:]]
    return out


def reference(
    data: np.ndarray,
    block_size: int,
    mode: str,
    node: NodeRef | None = None,
) -> np.ndarray:
    """The spec's reshape/transpose/reshape in numpy; exact for every dtype."""
    node = node or NodeRef(OP_TYPE, "reference")
    out_shape = infer(node, data.shape, block_size, mode)
    n, c, *spatial = data.shape
    k = len(spatial)
    depth = c // block_size**k
    if mode == "blocks_first":
        split = data.reshape(n, *([block_size] * k), depth, *spatial)
        perm = [0, k + 1] + [axis for i in range(k) for axis in (k + 2 + i, 1 + i)]
    else:
        split = data.reshape(n, depth, *([block_size] * k), *spatial)
        perm = [0, 1] + [axis for i in range(k) for axis in (k + 2 + i, 2 + i)]
    return np.ascontiguousarray(split.transpose(perm).reshape(out_shape))
