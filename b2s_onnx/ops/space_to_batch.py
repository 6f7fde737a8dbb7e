"""SpaceToBatch-2 (OpenVINO): shape rule, validation and numpy reference.

The inverse of BatchToSpace: zero-pad the spatial axes, cut each into ``block_shape[i]``
blocks and move the blocks into the batch axis. OpenVINO's CPU plugin accepts negative
pads (acting as a crop) although its spec requires pads >= 0; we follow the spec and
refuse them, like ``block_shape[0] != 1`` and ``pads[0] != 0``.
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

OP_TYPE = "SpaceToBatch"
INDEX_ROLES = ("block_shape", "pads_begin", "pads_end")


def infer(
    node: NodeRef,
    data_shape: Sequence[Dim],
    block_shape: IndexInput,
    pads_begin: IndexInput,
    pads_end: IndexInput,
) -> list[Dim]:
    """Checks every rule decidable from what is known and returns the output shape."""
    rank = len(data_shape)
    blocks, begins, ends = check_blocks_and_margins(
        node, data_shape, block_shape, pads_begin, pads_end, "padded"
    )

    out: list[Dim] = [None] * rank
    if blocks is not None:
        product = block_product(node, "block_shape", blocks)
        if data_shape[0] is not None:
            out[0] = data_shape[0] * product
    for i in range(1, rank):
        dim = data_shape[i]
        if blocks is None or begins is None or ends is None or dim is None:
            continue
        padded = dim + begins[i] + ends[i]
        if padded % blocks[i]:
            node.fail(
                "data",
                f"data.shape[{i}] + pads_begin[{i}] + pads_end[{i}] = {padded} is not "
                f"divisible by block_shape[{i}] = {blocks[i]}",
            )
        out[i] = padded // blocks[i]
    return out


def reference(
    data: np.ndarray,
    block_shape: np.ndarray,
    pads_begin: np.ndarray,
    pads_end: np.ndarray,
    node: NodeRef | None = None,
) -> np.ndarray:
    """Pad with zeros, split, move blocks to the batch axis; exact for every dtype."""
    node = node or NodeRef(OP_TYPE, "reference")
    infer(
        node,
        data.shape,
        IndexInput.constant("block_shape", block_shape),
        IndexInput.constant("pads_begin", pads_begin),
        IndexInput.constant("pads_end", pads_end),
    )
    rank = data.ndim
    begins = [int(p) for p in pads_begin]
    padded_shape = [d + b + int(e) for d, b, e in zip(data.shape, begins, pads_end, strict=True)]
    # Zeros of the data's own dtype (np.pad is avoided: it routes some dtypes through float).
    padded = np.zeros(padded_shape, dtype=data.dtype)
    padded[tuple(slice(b, b + d) for b, d in zip(begins, data.shape, strict=True))] = data
    blocks = [int(b) for b in block_shape]
    split_shape = [padded_shape[0]]
    for i in range(1, rank):
        split_shape += [padded_shape[i] // blocks[i], blocks[i]]
    perm = [2 * i for i in range(1, rank)] + [0] + [2 * i - 1 for i in range(1, rank)]
    moved = padded.reshape(split_shape).transpose(perm)
    out_shape = [padded_shape[0] * int(np.prod(blocks, dtype=np.int64))] + [
        padded_shape[i] // blocks[i] for i in range(1, rank)
    ]
    return np.ascontiguousarray(moved.reshape(out_shape))
