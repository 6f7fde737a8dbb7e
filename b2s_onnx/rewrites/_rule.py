"""What a graph rewrite is: the op types it starts from, and an attempt that either
schedules a replacement (fired) or says why it did not apply (declined).

A rewrite declines politely instead of raising: a missing precondition (a slope that is not
a constant, an unknown rank) leaves the graph as it was and becomes a line in the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import onnx

from b2s_onnx.rewrites._index import GraphIndex


@dataclass(frozen=True)
class Fired:
    rewrite: str
    node: str
    detail: str = ""
    #: Whether the outputs keep every bit; None: as the rewrite's ``exact`` says.
    exact: bool | None = None


@dataclass(frozen=True)
class Declined:
    rewrite: str
    node: str
    reason: str


@dataclass
class RewriteReport:
    """What every rewrite did to one model. ``absorbed`` maps each tensor that no longer
    exists to the tensor that now carries its value or the node that absorbed it, so
    per-layer comparisons can say where a layer's output went."""

    fired: list[Fired] = field(default_factory=list)
    declined: list[Declined] = field(default_factory=list)
    absorbed: dict[str, str] = field(default_factory=dict)
    #: Tensors now carried with extra zero channels (axis 1) by another tensor: old name ->
    #: (new name, the old channel count), so per-layer comparisons can still compare them.
    widened: dict[str, tuple[str, int]] = field(default_factory=dict)

    def extend(self, other: RewriteReport) -> None:
        self.fired.extend(other.fired)
        self.declined.extend(other.declined)
        self.absorbed.update(other.absorbed)
        self.widened.update(other.widened)

    def inexact(self) -> list[Fired]:
        """The rewrites that fired and may change float rounding (``exact`` False)."""
        return [f for f in self.fired if f.exact is False]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for fired in self.fired:
            counts[fired.rewrite] = counts.get(fired.rewrite, 0) + 1
        return counts

    def to_dict(self) -> dict:
        return {
            "fired": [vars(f) for f in self.fired],
            "declined": [vars(d) for d in self.declined],
            "counts": self.counts(),
        }


class Rewrite(Protocol):
    #: Short kebab-case name, shown in reports.
    name: str
    #: Op types (default domain) a match starts from.
    anchors: tuple[str, ...]
    #: Whether outputs keep every bit (False: float rounding may differ, e.g. a sum runs in
    #: another order). A rewrite without it counts as exact; a Fired may say otherwise.
    exact: bool
    #: Optional (default False): pass over the graph again while the last pass fired, for
    #: a rewrite that moves a node past one op at a time along a chain.
    # until_settled: bool

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        """Schedules a replacement through ``index`` (claiming the nodes it replaces) and
        returns Fired; or returns Declined with the reason; or None when ``node`` is simply
        not an instance of the pattern."""
        ...
