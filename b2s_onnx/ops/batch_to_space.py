"""BatchToSpace-2 (OpenVINO): shape rule, validation and numpy reference.

The batch axis is split into ``block_shape[1:]`` blocks that are interleaved into the
spatial axes, then the spatial axes are cropped. Rules follow OpenVINO's shape inference,
plus the two it only "expects" (``block_shape[0] == 1``, ``crops[0] == 0``): OpenVINO
misbehaves when they are broken, so we refuse them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from b2s_onnx.ops._common import (
    Dim,
    IndexInput,
    NodeRef,
    block_product,
    check_blocks_and_margins,
)

OP_TYPE = "BatchToSpace"
INDEX_ROLES = ("block_shape", "crops_begin", "crops_end")


def infer(
    node: NodeRef,
    data_shape: Sequence[Dim],
    block_shape: IndexInput,
    crops_begin: IndexInput,
    crops_end: IndexInput,
) -> list[Dim]:
    """Checks every rule decidable from what is known and returns the output shape."""
    rank = len(data_shape)
    blocks, begins, ends = check_blocks_and_margins(
        node, data_shape, block_shape, crops_begin, crops_end, "cropped"
    )

    out: list[Dim] = [None] * rank
    batch = data_shape[0]
    if blocks is not None:
        product = block_product(node, "block_shape", blocks)
        if batch is not None:
            if batch % product:
                node.fail(
                    "data",
                    f"data.shape[0] = {batch} is not divisible by the product of "
                    f"block_shape = {product}",
                )
            out[0] = batch // product
    for i in range(1, rank):
        dim = data_shape[i]
        if blocks is None or dim is None:
            continue
        extent = dim * blocks[i]
        if begins is not None and ends is not None:
            if begins[i] + ends[i] > extent:
                node.fail(
                    "crops_begin",
                    f"crops_begin[{i}] + crops_end[{i}] = {begins[i] + ends[i]} exceeds "
                    f"block_shape[{i}] * data.shape[{i}] = {extent}",
                )
            out[i] = extent - begins[i] - ends[i]
    return out


def reference(
    data: np.ndarray,
    block_shape: np.ndarray,
    crops_begin: np.ndarray,
    crops_end: np.ndarray,
    node: NodeRef | None = None,
) -> np.ndarray:
    """The spec's four steps in numpy; moves bits, so it is exact for every dtype."""
    node = node or NodeRef(OP_TYPE, "reference")
    infer(
        node,
        data.shape,
        IndexInput.constant("block_shape", block_shape),
        IndexInput.constant("crops_begin", crops_begin),
        IndexInput.constant("crops_end", crops_end),
    )
    rank = data.ndim
    blocks = [int(b) for b in block_shape[1:]]
    k = rank - 1
    batch = data.shape[0] // int(np.prod(blocks, dtype=np.int64))
    split = data.reshape(*blocks, batch, *data.shape[1:])
    perm = [k] + [axis for i in range(k) for axis in (k + 1 + i, i)]
    spread = split.transpose(perm).reshape(
        batch, *(d * b for d, b in zip(data.shape[1:], blocks, strict=True))
    )
    crop = tuple(
        slice(int(crops_begin[i]), spread.shape[i] - int(crops_end[i])) for i in range(rank)
    )
    return np.ascontiguousarray(spread[crop])
