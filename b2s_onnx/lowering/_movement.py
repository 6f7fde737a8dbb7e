"""Reshape -> Transpose -> Reshape, with the axes simplified first.

Every lowering here is "split axes into factors, permute the factors, merge them back".
Before emitting, factors of static size 1 are dropped and factors that stay adjacent and
in order are merged, so the Transpose has the lowest rank that is still exact (a smaller
rank is never slower in onnxruntime, and an identity permutation disappears entirely).
A Reshape whose target equals its input shape is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from b2s_onnx.lowering._emit import Emitter
from b2s_onnx.lowering._sizes import Size, product


@dataclass(frozen=True)
class Movement:
    """``reshape(transpose(reshape(x, factors), perm), out_shape)``, simplified."""

    factors: list[Size]
    perm: list[int]
    out_shape: list[Size]


def simplify(factors: Sequence[Size], perm: Sequence[int]) -> tuple[list[Size], list[int]]:
    """Drops unit factors and merges factors that move together; returns (factors, perm)."""
    keep = [i for i, f in enumerate(factors) if f.static != 1]
    renumber = {old: new for new, old in enumerate(keep)}
    kept_factors = [factors[i] for i in keep]
    kept_perm = [renumber[p] for p in perm if p in renumber]

    # Group runs of output positions whose source axes are consecutive.
    groups: list[list[int]] = []
    for axis in kept_perm:
        if groups and groups[-1][-1] + 1 == axis:
            groups[-1].append(axis)
        else:
            groups.append([axis])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    merged_factors = [product([kept_factors[a] for a in groups[g]]) for g in order]
    position = {g: new for new, g in enumerate(order)}
    merged_perm = [position[g] for g in range(len(groups))]
    return merged_factors, merged_perm


def same_shape(a: Sequence[Size], b: Sequence[Size]) -> bool:
    return len(a) == len(b) and all(x.key == y.key for x, y in zip(a, b, strict=True))


def emit_movement(
    emit: Emitter,
    data: str,
    data_shape: Sequence[Size],
    movement: Movement,
    output: str | None,
) -> str | None:
    """Emits the simplified movement; returns the produced tensor, or None if it is a no-op.

    ``output`` names the last node's output (the original node's output) when given.
    """
    factors, perm = simplify(movement.factors, movement.perm)
    steps: list[tuple[str, object]] = []
    if perm != sorted(perm):
        if not same_shape(factors, data_shape):
            steps.append(("reshape", factors))
        steps.append(("transpose", perm))
        transposed = [factors[p] for p in perm]
        if not same_shape(transposed, movement.out_shape):
            steps.append(("reshape", movement.out_shape))
    elif not same_shape(data_shape, movement.out_shape):
        steps.append(("reshape", movement.out_shape))
    if not steps:
        return None

    current = data
    if steps[0][0] == "transpose":
        current = emit.gate_data(current)
    for index, (kind, arg) in enumerate(steps):
        last = index == len(steps) - 1
        target = output if last else None
        if kind == "transpose":
            current = emit.node("Transpose", [current], "transpose", output=target, perm=arg)
            continue
        suffix = "split" if index == 0 and len(steps) > 1 else "merge"
        shape = emit.shape_vector(arg, f"{suffix}_shape")
        if emit.has_checks():
            shape = emit.gate(shape)
        current = emit.node("Reshape", [current, shape], f"reshape_{suffix}", output=target)
    return current
