"""Which outputs a rewrite that changes float rounding can reach, and the tolerance ``check``
then uses for them when the user gave none.

A pure data-movement lowering reproduces every bit, so ``check`` compares bit for bit by
default. A rewrite that is not exact (``Rewrite.exact`` False, e.g. an atrous pattern
fused into one dilated Conv, whose sums run over the same terms in another order) keeps the
values only up to float rounding; the outputs downstream of it get
:data:`REASSOCIATION_ATOL` / :data:`REASSOCIATION_RTOL`, with the reason in the report,
and every other output stays bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

#: float32 sums of the same terms in another order differ by a few units in the last place
#: per accumulated term; for the kernel sizes and depths of real models (up to thousands of
#: terms, errors carried through later layers) 1e-4 relative plus 1e-5 absolute (for
#: values near zero) bounds that with room, and is far below any real mismatch.
REASSOCIATION_RTOL = 1e-4
REASSOCIATION_ATOL = 1e-5


def reached_outputs(model: onnx.ModelProto, node_names: set[str]) -> set[str]:
    """The graph outputs computed from any node named in ``node_names`` (top-level graph;
    a subgraph reading a reached tensor taints its node's outputs)."""
    reached: set[str] = set()
    for node in model.graph.node:
        reads = set(node.input)
        for attr in node.attribute:
            for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
                reads.update(name for inner in graph.node for name in inner.input)
        if node.name in node_names or reads & reached:
            reached.update(name for name in node.output if name)
    return {o.name for o in model.graph.output if o.name in reached}


def tolerance_reasons(
    original: onnx.ModelProto, fired: Sequence, outputs: Sequence[str]
) -> dict[str, str]:
    """Output name -> why it is compared within the reassociation tolerance, for each
    output that a non-exact ``fired`` rewrite (``Fired`` records) reaches."""
    inexact = [f for f in fired if f.exact is False]
    if not inexact:
        return {}
    reasons: dict[str, list[str]] = {}
    for record in inexact:
        # An unnamed node cannot be traced: every output may be affected.
        reached = reached_outputs(original, {record.node}) if record.node else set(outputs)
        for name in reached:
            reasons.setdefault(name, []).append(f"{record.rewrite} at '{record.node}'")
    return {
        name: (
            "float rounding: "
            + ", ".join(sorted(set(reasons[name])))
            + " computes the same terms in another order"
        )
        for name in outputs
        if name in reasons
    }


def with_rewrite_tolerances(
    atol, rtol, reasons: Mapping[str, str], outputs: Sequence[str]
) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
    """Per-output atol and rtol: the user's where they set one for an output (a number
    other than 0, or any value named for the output or ``"*"``, so ``--atol 0`` insists
    on bit for bit), else the reassociation tolerance for the outputs in ``reasons``; and
    the reasons that were applied."""

    def value(tolerance, output: str) -> float:
        if isinstance(tolerance, Mapping):
            return float(tolerance.get(output, tolerance.get("*", 0.0)))
        return float(tolerance)

    def given(tolerance, output: str) -> bool:
        if isinstance(tolerance, Mapping):
            return output in tolerance or "*" in tolerance
        return float(tolerance) != 0

    atols, rtols, applied = {}, {}, {}
    for output in outputs:
        atols[output], rtols[output] = value(atol, output), value(rtol, output)
        chosen = given(atol, output) or given(rtol, output)
        if output in reasons and not chosen:
            atols[output], rtols[output] = REASSOCIATION_ATOL, REASSOCIATION_RTOL
            applied[output] = reasons[output]
    return atols, rtols, applied
