"""Dropping nodes whose outputs nothing reads, and putting them back for a look.

onnxruntime runs every node of a graph, read or not (1.31 removes no unread node), so a node
a rewrite or a dangling IR layer leaves behind costs a full pass over its tensor on every
run: a DequantizeLinear of a network's input that a rewrite stopped reading took 1% of a
small INT8 model's time. OpenVINO builds its model from the Results backwards, so it never
computes such layers either.

The dropped nodes still computed IR layers' outputs (a FakeQuantize's dequantized value whose
readers a rewrite fused away): per-layer comparison puts them back while it runs, so it can
still name such a layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import onnx

from b2s_onnx.graph.walk import copy_message, outer_reads


@dataclass
class Unread:
    """Nodes dropped because nothing read them, in graph order, and the initializers only
    they read (copies: the graph's own messages went with the deletion)."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)

    def outputs(self) -> set[str]:
        return {name for node in self.nodes for name in node.output if name}


def drop_dead_nodes(graph: onnx.GraphProto) -> Unread:
    """Removes, in place, every node of ``graph`` (a topologically sorted top-level graph)
    none of whose outputs reaches a graph output, and the initializers only they read.

    Subgraph bodies are kept whole: an If/Loop that stays keeps its body as written.
    Initializers that are also graph inputs stay (a caller may feed them)."""
    needed = {o.name for o in graph.output}
    kept_flags: list[bool] = []
    for node in reversed(graph.node):
        live = any(name in needed for name in node.output if name)
        kept_flags.append(live)
        if live:
            needed.update(name for name in node.input if name)
            needed.update(outer_reads(node))
    kept_flags.reverse()
    unread = Unread(
        [copy_message(n) for n, keep in zip(graph.node, kept_flags, strict=True) if not keep]
    )
    if not unread.nodes:
        return unread
    orphans = {name for node in unread.nodes for name in node.input if name} - needed
    orphans -= {v.name for v in graph.input}
    unread.initializers = [copy_message(t) for t in graph.initializer if t.name in orphans]
    # Delete in place: rebuilding the lists would copy every kept node and weight.
    for position in reversed(range(len(graph.node))):
        if not kept_flags[position]:
            del graph.node[position]
    for position in reversed(range(len(graph.initializer))):
        if graph.initializer[position].name in orphans:
            del graph.initializer[position]
    dropped = unread.outputs()
    infos = [v for v in graph.value_info if v.name not in dropped]
    if len(infos) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(infos)
    return unread


@contextmanager
def restored(graph: onnx.GraphProto, unread: Unread | None) -> Iterator[None]:
    """``graph`` with the ``unread`` nodes it lacks appended (after every node they read),
    and their initializers, until the block ends. Nodes whose outputs the graph already
    defines, or whose inputs it lacks, stay out (``graph`` may be another conversion)."""
    if unread is None or not unread.nodes:
        yield
        return
    available = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    available |= {name for node in graph.node for name in node.output}
    tensors = [t for t in unread.initializers if t.name not in available]
    available |= {t.name for t in tensors}
    nodes = []
    for node in unread.nodes:
        outputs = [name for name in node.output if name]
        inputs = [name for name in node.input if name] + sorted(outer_reads(node))
        if any(name in available for name in outputs) or not all(
            name in available for name in inputs
        ):
            continue
        nodes.append(node)
        available.update(outputs)
    node_count, initializer_count = len(graph.node), len(graph.initializer)
    graph.node.extend(nodes)
    graph.initializer.extend(tensors)
    try:
        yield
    finally:
        del graph.node[node_count:]
        del graph.initializer[initializer_count:]
