"""Choosing how to run a permutation in onnxruntime: one Transpose, or several cheap ones.

onnxruntime's Transpose has three paths (read from its source, timed on 1.31 at one
thread, as multiples of a plain copy of the same bytes):

- a *single axis moving inward* (one writer, one reader per element of the moved axis):
  ~1.9-2.2x whatever the contiguous unit, when the moved axis is small;
- a *single axis moving outward* (one reader, one writer per element): ~2x when the
  moved axis is small, but 3-8x when it is large (scattered writes);
- anything else, a general strided copy: ~2.5x when the innermost ~256 bytes stay
  contiguous, ~13x when the innermost axis itself moves.

So a permutation that moves the innermost axis is cheaper as a sequence of single-axis
inward moves (fix the output's axes from the innermost out: "staged"), or as one such move
for the innermost axis followed by one general Transpose whose contiguous unit is then
large ("hybrid"); each inward move is expressed so that onnxruntime recognises it: its
dispatcher checks "moved outward" first, so an adjacent swap [m, G] is taken as G moving
outward with |G| writers; splitting G into two factors leaves only the inward reading. The
cost model below encodes these measurements (`benchmarks/` re-measures them); the plan
with the lowest estimate wins.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from b2s_onnx.lowering._sizes import Size, product

#: Sizes only known at run time are assumed large for costing.
UNKNOWN_SIZE = 1024
#: A moved axis up to this size is "small": few readers or writers.
SMALL_AXIS = 64
STRATEGIES = ("auto", "direct", "staged", "hybrid")
#: onnxruntime's own DepthToSpace/SpaceToDepth kernels, in copies of the tensor (measured
#: ~9x on 1.31 for a 4-D float32 block-2 case: they run a general transpose internally).
NATIVE_DEPTH_SPACE_COST = 9.0
#: onnxruntime parallelises an outward single-axis move element by element: with a unit
#: under this many bytes it ran ~30x a copy at 2 threads (2x at 1 thread).
TINY_UNIT = 16
MULTITHREAD_TINY_OUTWARD_COST = 30.0
#: Below this many bytes a pass costs less than an extra node's fixed overhead: one Transpose.
SMALL_TENSOR_BYTES = 1 << 18


@dataclass(frozen=True)
class Stage:
    """One Transpose: the input is first viewed as ``shape``, then permuted by ``perm``."""

    shape: list[Size]
    perm: list[int]


def _size(s: Size) -> int:
    return UNKNOWN_SIZE if s.static is None else s.static


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


def single_axis_move(perm: list[int]) -> tuple[str, int, int] | None:
    """onnxruntime's own classification: ("outward"|"inward", from, to), or None."""
    for i, axis in enumerate(perm):
        if axis == i:
            continue
        rest = perm[i + 1 :]
        # outward: axis moved to slot i, the others keep their order after it
        others = [a for a in range(i, len(perm)) if a != axis]
        if rest == others:
            return "outward", axis, i
        # inward: axis i moved later, the others shift down by one
        if [a for a in perm[i:] if a != i] == list(range(i + 1, len(perm))):
            return "inward", i, perm.index(i)
        return None
    return None


def stage_cost(
    shape: list[Size], perm: list[int], itemsize: int, threads: int | None = None
) -> float:
    """Estimated cost of one Transpose, in copies of the tensor (see module docstring).

    ``threads``: the session's intra-op threads (None: several, onnxruntime's default).
    """
    sizes = [_size(s) for s in shape]
    move = single_axis_move(perm)
    if move is not None:
        kind, source, target = move
        unit = itemsize
        for dim in sizes[max(source, target) + 1 :]:
            unit *= dim
        if kind == "outward" and unit < TINY_UNIT and threads != 1:
            return MULTITHREAD_TINY_OUTWARD_COST
        if sizes[source] <= SMALL_AXIS:
            return 2.0
        return 2.5 + 350.0 / max(unit, 1)
    unit = itemsize
    for axis in reversed(range(len(perm))):
        if perm[axis] != axis:
            break
        unit *= sizes[axis]
    return 2.4 + 42.0 / max(unit, 1)


def plan_cost(stages: list[Stage], itemsize: int, threads: int | None = None) -> float:
    return sum(stage_cost(s.shape, s.perm, itemsize, threads) for s in stages)


def _split(size: Size) -> tuple[Size, Size] | None:
    """Two factors > 1 of a static size (the largest divisor up to its square root)."""
    n = size.static
    if n is None or n < 4:
        return None
    best = 0
    d = 2
    while d * d <= n:
        if n % d == 0:
            best = d
        d += 1
    return (Size.of(n // best), Size.of(best)) if best else None


def _inward_stage(layout_sizes: list[Size], source: int, target: int) -> Stage:
    """Moves axis ``source`` to ``target`` (> source) as onnxruntime's inward kernel sees it."""
    prefix = layout_sizes[:source]
    moved = layout_sizes[source]
    passed = layout_sizes[source + 1 : target + 1]
    suffix = layout_sizes[target + 1 :]
    groups: list[list[Size]] = []
    if prefix:
        groups.append(prefix)
    groups.append([moved])
    groups.append(passed)
    if suffix:
        groups.append(suffix)

    def product(sizes: list[Size]) -> Size:
        result = Size.of(1)
        for s in sizes:
            result = result * s
        return result

    merged = [product(g) for g in groups]
    m = 1 if prefix else 0
    passed_size = merged[m + 1]
    split = (
        _split(passed_size)
        if passed_size.static is None or passed_size.static > SMALL_AXIS
        else None
    )
    if split is not None:
        merged = [*merged[: m + 1], split[0], split[1], *merged[m + 2 :]]
        perm = [*range(m), m + 1, m + 2, m, *range(m + 3, len(merged))]
    else:
        perm = [*range(m), m + 1, m, *range(m + 2, len(merged))]
    return Stage(merged, perm)


def staged_plan(factors: list[Size], perm: list[int], limit: int | None = None) -> list[Stage]:
    """Single-axis inward moves that fix the output's axes from the innermost outward.

    With ``limit``, at most that many moves, then one Transpose for whatever is left.
    """
    layout = list(range(len(factors)))  # which original factor sits at each position
    stages: list[Stage] = []
    for position in reversed(range(len(perm))):
        axis = perm[position]
        current = layout.index(axis)
        if current == position:
            continue
        if limit is not None and len(stages) == limit:
            rest_factors, rest_perm = simplify(
                [factors[f] for f in layout], [layout.index(a) for a in perm]
            )
            if rest_perm != sorted(rest_perm):
                stages.append(Stage(rest_factors, rest_perm))
            break
        sizes = [factors[f] for f in layout]
        stages.append(_inward_stage(sizes, current, position))
        layout = (
            layout[:current] + layout[current + 1 : position + 1] + [axis] + layout[position + 1 :]
        )
    return stages


def choose_plan(
    factors: list[Size],
    perm: list[int],
    itemsize: int,
    strategy: str = "auto",
    threads: int | None = None,
) -> list[Stage]:
    """The stages to run ``perm`` over ``factors`` (already simplified), for sessions with
    ``threads`` intra-op threads (None: several)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy '{strategy}' (one of {', '.join(STRATEGIES)})")
    return list(_cached_plan(tuple(factors), tuple(perm), itemsize, strategy, threads))


@functools.lru_cache(maxsize=4096)
def _cached_plan(
    factors: tuple[Size, ...],
    perm: tuple[int, ...],
    itemsize: int,
    strategy: str,
    threads: int | None,
) -> tuple[Stage, ...]:
    """Plans are pure functions of their arguments, and models repeat the same few nodes."""
    direct = (Stage(list(factors), list(perm)),)
    if strategy == "direct":
        return direct
    if strategy == "auto":
        total = itemsize
        for factor in factors:
            total *= _size(factor)
        if total < SMALL_TENSOR_BYTES:
            return direct
    staged = tuple(staged_plan(list(factors), list(perm)))
    hybrid = tuple(staged_plan(list(factors), list(perm), limit=1))
    if strategy == "staged":
        return staged or direct
    if strategy == "hybrid":
        return hybrid or direct
    candidates = [direct, staged, hybrid]
    return min(
        (c for c in candidates if c), key=lambda c: (plan_cost(list(c), itemsize, threads), len(c))
    )
