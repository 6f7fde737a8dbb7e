"""Run-time guards shared by the lowering rules, for values only the run time knows.

Each function emits a bool "violated" tensor for one rule of the op and registers it
with the emitter; the rule texts match the ops' static messages.
"""

from __future__ import annotations

from b2s_onnx.lowering._emit import Emitter


def vector(emit: Emitter, runtime: str | None, values: list[int] | None, suffix: str) -> str:
    """An int64 vector tensor for an index input: its runtime cast, or a constant."""
    if runtime is not None:
        return runtime
    assert values is not None
    return emit.const(suffix, values)


def index_length(emit: Emitter, role: str, vec: str, rank: int) -> str:
    """``role`` is 1-D with ``rank`` elements (checked as ``[rank(v), len(v)] == [1, rank]``).

    Returns the guarded vector: every element read goes through the guard first.
    """
    shape = emit.shape_of(vec)
    facts = emit.node(
        "Concat", [emit.node("Shape", [shape], "rank"), shape], "rank_and_length", axis=0
    )
    ok = emit.node("Equal", [facts, emit.const("expected", [1, rank])], "length_ok")
    bad = emit.node("Not", [ok], "length_bad")
    return emit.guard(vec, f"{role} is 1-D with {rank} elements", bad)


def at_least(emit: Emitter, role: str, vec: str, minimum: int) -> None:
    bad = emit.node("Less", [vec, emit.const("minimum", [minimum])], "below_minimum")
    emit.check(f"{role} >= {minimum}", bad)


def first_is(emit: Emitter, role: str, vec: str, expected: int) -> None:
    first = emit.node("Gather", [vec, emit.const("index", [0])], "first")
    ok = emit.node("Equal", [first, emit.const("expected", [expected])], "first_ok")
    emit.check(f"{role}[0] == {expected}", emit.node("Not", [ok], "first_bad"))


def divisible(emit: Emitter, rule: str, value: str, divisor: str) -> None:
    """``value % divisor == 0`` elementwise (divisor kept >= 1 so Mod cannot trap)."""
    safe = emit.node("Max", [divisor, emit.const("one", [1])], "safe_divisor")
    remainder = emit.node("Mod", [value, safe], "remainder")
    bad = emit.node("Greater", [remainder, emit.const("zero", [0])], "not_divisible")
    emit.check(rule, bad)


def not_greater(emit: Emitter, rule: str, lhs: str, rhs: str) -> None:
    emit.check(rule, emit.node("Greater", [lhs, rhs], "too_large"))


def product_fits(emit: Emitter, rule: str, blocks: str, batch: str, factor: int = 1) -> None:
    """Guards, in float64 so that nothing can wrap, that the block product is at most
    ``batch`` (BatchToSpace, ``factor`` 1) or that ``batch * product`` stays below 2**63
    (SpaceToBatch, ``factor`` -1). Once this passes, an int64 product is exact.
    """
    as_double = emit.node("Cast", [blocks], "blocks_f64", to=11)
    double_product = emit.node("ReduceProd", [as_double], "product_f64", keepdims=1)
    batch_double = emit.node("Cast", [batch], "batch_f64", to=11)
    if factor == 1:
        too_large = emit.node("Greater", [double_product, batch_double], "product_gt_batch")
        nonempty = emit.node("Greater", [batch, emit.const("zero", [0])], "batch_nonempty")
        emit.check(rule, emit.node("And", [too_large, nonempty], "product_too_large"))
    else:
        total = emit.node("Mul", [double_product, batch_double], "batch_times_product")
        limit = emit.const("int64_limit", [2.0**63], dtype="float64")
        emit.check(rule, emit.node("Not", [emit.node("Less", [total, limit], "fits")], "overflow"))
