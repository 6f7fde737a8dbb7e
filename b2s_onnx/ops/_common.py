"""Shared pieces of the ops' rules: who is being checked, and the checks on index inputs.

Every rule is stated once here or in the op's own module; the static lowering, the
runtime guards and the numpy reference all call the same functions, so a value that one
path rejects is rejected by all of them with the same words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from b2s_onnx.errors import OpValidationError

#: A dimension: a known size, or ``None`` when only the run time knows it.
Dim = int | None

INT64_MAX = int(np.iinfo(np.int64).max)


@dataclass(frozen=True)
class NodeRef:
    """Names the node under check so every message can point at it."""

    op_type: str
    name: str

    def fail(self, input_name: str, rule: str) -> NoReturn:
        raise OpValidationError(self.op_type, self.name, input_name, rule)


@dataclass(frozen=True)
class IndexInput:
    """What is known, before running, about one index input (block_shape, crops, pads).

    ``value`` is set only when the input is a constant of the model; ``shape`` and
    ``is_integer`` come from type information and may be unknown (``None``).
    """

    role: str
    value: np.ndarray | None = None
    shape: Sequence[Dim] | None = None
    dtype_name: str | None = None
    is_integer: bool | None = None

    @classmethod
    def constant(cls, role: str, value: Sequence[int] | np.ndarray) -> IndexInput:
        array = np.asarray(value)
        return cls(
            role=role,
            value=array,
            shape=array.shape,
            dtype_name=array.dtype.name,
            is_integer=bool(np.issubdtype(array.dtype, np.integer)),
        )

    def ints(self) -> list[int] | None:
        """The values as Python ints (exact for every integer dtype), or None if runtime."""
        return None if self.value is None else [int(v) for v in self.value.reshape(-1)]


def fmt_shape(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def check_rank(node: NodeRef, rank: int, minimum: int) -> None:
    if rank < minimum:
        node.fail("data", f"data rank must be >= {minimum}, got {rank}")


def check_index_input(node: NodeRef, index: IndexInput, rank: int) -> list[int] | None:
    """Checks type, rank and length of an index input; returns its values when constant."""
    if index.is_integer is False:
        node.fail(
            index.role,
            f"{index.role} must be an integer tensor, got {index.dtype_name or 'another type'}",
        )
    if index.shape is not None:
        if len(index.shape) != 1:
            node.fail(index.role, f"{index.role} must be 1-D, got shape {fmt_shape(index.shape)}")
        length = index.shape[0]
        if length is not None and length != rank:
            node.fail(
                index.role,
                f"{index.role} has {length} elements but data has rank {rank}; they must be equal",
            )
    return index.ints()


def check_all_at_least(node: NodeRef, role: str, values: Sequence[int], minimum: int) -> None:
    for i, v in enumerate(values):
        if v < minimum:
            node.fail(role, f"{role}[{i}] = {v} must be >= {minimum}")


def check_first_is(
    node: NodeRef, role: str, values: Sequence[int], expected: int, why: str
) -> None:
    if values and values[0] != expected:
        node.fail(role, f"{role}[0] = {values[0]} must be {expected} ({why})")


def block_product(node: NodeRef, role: str, blocks: Sequence[int]) -> int:
    """Product of block sizes, refused when it cannot be an int64 tensor dimension."""
    product = 1
    for b in blocks:
        product *= b
    if product > INT64_MAX:
        node.fail(role, f"product of {role} = {product} overflows int64")
    return product


def check_blocks_and_margins(
    node: NodeRef,
    data_shape: Sequence[Dim],
    block_shape: IndexInput,
    begin: IndexInput,
    end: IndexInput,
    margin_kind: str,
) -> tuple[list[int] | None, list[int] | None, list[int] | None]:
    """The rules BatchToSpace and SpaceToBatch share: data rank >= 2; block_shape and the two
    margins (crops or pads) are 1-D integer tensors of rank elements; blocks >= 1 with
    ``block_shape[0] == 1``; margins >= 0 with 0 on the batch axis. Returns the constant
    values (None for those known only at run time)."""
    rank = len(data_shape)
    check_rank(node, rank, 2)
    blocks = check_index_input(node, block_shape, rank)
    begins = check_index_input(node, begin, rank)
    ends = check_index_input(node, end, rank)
    if blocks is not None:
        check_all_at_least(node, block_shape.role, blocks, 1)
        check_first_is(node, block_shape.role, blocks, 1, "the batch axis is not split")
    for index, values in ((begin, begins), (end, ends)):
        if values is not None:
            check_all_at_least(node, index.role, values, 0)
            check_first_is(node, index.role, values, 0, f"the batch axis is not {margin_kind}")
    return blocks, begins, ends
