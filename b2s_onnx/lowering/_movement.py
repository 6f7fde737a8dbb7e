"""Reshape -> Transpose(s) -> Reshape, with the axes simplified first.

Every lowering here is "split axes into factors, permute the factors, merge them back".
Before emitting, factors of static size 1 are dropped and factors that stay adjacent and
in order are merged, so the permutation has the lowest rank that is still exact (an
identity permutation disappears entirely). The planner then decides whether it runs as
one Transpose or as several cheaper ones. A Reshape whose target equals its input shape
is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from b2s_onnx.errors import B2SError
from b2s_onnx.lowering._emit import Emitter
from b2s_onnx.lowering._planner import choose_plan, simplify
from b2s_onnx.lowering._sizes import Size


@dataclass(frozen=True)
class Movement:
    """``reshape(transpose(reshape(x, factors), perm), out_shape)``, simplified."""

    factors: list[Size]
    perm: list[int]
    out_shape: list[Size]


def same_shape(a: Sequence[Size], b: Sequence[Size]) -> bool:
    return len(a) == len(b) and all(x.key == y.key for x, y in zip(a, b, strict=True))


def emit_movement(
    emit: Emitter,
    data: str,
    data_shape: Sequence[Size],
    movement: Movement,
    output: str | None,
    itemsize: int,
    strategy: str = "auto",
    threads: int | None = None,
) -> str | None:
    """Emits the simplified movement; returns the produced tensor, or None if it is a no-op.

    ``output`` names the last node's output (the original node's output) when given. The
    permutation runs as the planner's stages; Reshapes between them only relabel axes.
    """
    factors, perm = simplify(movement.factors, movement.perm)
    stages = [] if perm == sorted(perm) else choose_plan(factors, perm, itemsize, strategy, threads)
    if not stages and same_shape(data_shape, movement.out_shape):
        return None
    current, current_shape = data, list(data_shape)
    steps: list[tuple[str, object]] = []
    for stage in stages:
        if not same_shape(stage.shape, current_shape):
            steps.append(("reshape", stage.shape))
        steps.append(("transpose", stage.perm))
        current_shape = [stage.shape[p] for p in stage.perm]
    if not same_shape(current_shape, movement.out_shape):
        steps.append(("reshape", movement.out_shape))
    if steps[0][0] == "transpose":
        current = emit.gate_data(current)
    for index, (kind, arg) in enumerate(steps):
        target = output if index == len(steps) - 1 else None
        if kind == "transpose":
            current = emit.node("Transpose", [current], "transpose", output=target, perm=arg)
            continue
        suffix = "merge" if index == len(steps) - 1 else "split"
        shape = emit.shape_vector(arg, f"{suffix}_shape")
        if emit.has_checks():
            shape = emit.gate(shape)
        # A 0 in a Reshape target means "copy that dim" unless allowzero (opset 14) is set;
        # here every size is literal, so an empty tensor's 0 must stay a 0.
        literal_zero = {"allowzero": 1} if any(s.static == 0 for s in arg) else {}
        if literal_zero and emit.opset < 14:
            raise B2SError(f"{emit.prefix}: moving an empty tensor needs target opset 14 or newer")
        current = emit.node(
            "Reshape", [current, shape], f"reshape_{suffix}", output=target, **literal_zero
        )
    return current
