"""Visiting every graph of a model, subgraphs (If/Loop/Scan bodies) included."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and, depth first, every graph nested in its nodes."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from all_graphs(sub)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in all_graphs(graph):
        yield from g.node


def used_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor a node reads (in any nested graph) or a graph returns."""
    used: set[str] = set()
    for g in all_graphs(graph):
        for node in g.node:
            used.update(node.input)
        used.update(o.name for o in g.output)
    used.discard("")
    return used


def taken_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor and node name in the model, so new names never collide."""
    names: set[str] = set()
    for g in all_graphs(model.graph):
        names.update(v.name for v in g.input)
        names.update(v.name for v in g.output)
        names.update(v.name for v in g.value_info)
        names.update(t.name for t in g.initializer)
        for node in g.node:
            names.add(node.name)
            names.update(node.input)
            names.update(node.output)
    for function in model.functions:
        for node in function.node:
            names.add(node.name)
    names.discard("")
    return names
