"""Visiting every graph of a model, subgraphs (If/Loop/Scan bodies) included."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def copy_message(message):
    """A deep copy of a protobuf message (a node or tensor kept apart from its graph)."""
    duplicate = type(message)()
    duplicate.CopyFrom(message)
    return duplicate


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


def defined_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor some graph defines: inputs, initializers and node outputs."""
    names: set[str] = set()
    for graph in all_graphs(model.graph):
        names.update(v.name for v in graph.input)
        names.update(t.name for t in graph.initializer)
        for node in graph.node:
            names.update(node.output)
    return names


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


def outer_reads(node: onnx.NodeProto) -> set[str]:
    """Tensors a node's subgraphs read from enclosing scopes (its implicit inputs)."""
    reads: set[str] = set()
    for sub in subgraphs(node):
        defined = {v.name for v in sub.input} | {t.name for t in sub.initializer}
        for inner in sub.node:
            reads.update(n for n in inner.input if n and n not in defined)
            reads.update(outer_reads(inner) - defined)
            defined.update(inner.output)
        reads.update(o.name for o in sub.output if o.name not in defined)
    return reads


def sort_topologically(graph: onnx.GraphProto, visible: frozenset[str] = frozenset()) -> None:
    """Orders ``graph``'s nodes (and, recursively, its subgraphs') so that every tensor is
    produced before it is read, keeping the existing order wherever it already is valid.

    ``visible`` holds the names enclosing scopes define. Nodes in a cycle, or reading a
    tensor nobody produces, keep their relative order at the end (the checker reports them).
    """
    available = set(visible) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        for sub in subgraphs(node):
            sort_topologically(
                sub, frozenset(available | {o for n in graph.node for o in n.output})
            )
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    progress = True
    while pending and progress:
        progress = False
        waiting = []
        for node in pending:
            needs = {n for n in node.input if n} | outer_reads(node)
            if needs <= available:
                ordered.append(node)
                available.update(node.output)
                progress = True
            else:
                waiting.append(node)
        pending = waiting
    ordered.extend(pending)
    if [id(n) for n in ordered] != [id(n) for n in graph.node]:
        graph.ClearField("node")
        graph.node.extend(ordered)


def _names(model: onnx.ModelProto) -> Iterator[object]:
    for entry in model.opset_import:
        yield entry.domain
    for graph in all_graphs(model.graph):
        yield graph.name
        for value in (*graph.input, *graph.output, *graph.value_info):
            yield value.name
            for dim in value.type.tensor_type.shape.dim:
                yield dim.dim_param
        for tensor in graph.initializer:
            yield tensor.name
        for node in graph.node:
            yield from (node.name, node.op_type, node.domain, *node.input, *node.output)
            for attr in node.attribute:
                yield attr.name


def check_strings(model: onnx.ModelProto) -> None:
    """ONNX's protobuf does not validate UTF-8 when parsing: a corrupted name comes back as
    bytes (or fails to decode) wherever it is first read. Every name is checked once here."""
    from b2s_onnx.errors import B2SError

    try:
        bad = next((name for name in _names(model) if not isinstance(name, str)), None)
    except UnicodeDecodeError:
        bad = b"?"
    if bad is not None:
        raise B2SError(
            f"the model holds a name that is not valid UTF-8 ({bad!r}); is the file corrupted?"
        )


def _known_element_types() -> frozenset[int]:
    known = set()
    for value in onnx.TensorProto.DataType.values():
        try:
            onnx.helper.tensor_dtype_to_np_dtype(value)
        except (KeyError, ValueError):
            continue
        known.add(value)
    return frozenset(known | {onnx.TensorProto.STRING})


#: Element types onnx (and so every helper we call) has a numpy type for.
KNOWN_ELEMENT_TYPES = _known_element_types()


def _element_types(model: onnx.ModelProto) -> Iterator[tuple[int, str]]:
    for graph in all_graphs(model.graph):
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.HasField("tensor_type"):
                yield value.type.tensor_type.elem_type, f"tensor '{value.name}'"
        for tensor in graph.initializer:
            yield tensor.data_type, f"initializer '{tensor.name}'"
        for sparse in graph.sparse_initializer:
            yield sparse.values.data_type, f"sparse initializer '{sparse.values.name}'"
        for node in graph.node:
            for attr in node.attribute:
                for tensor in (attr.t, *attr.tensors) if attr.HasField("t") else attr.tensors:
                    yield tensor.data_type, f"node '{node.name}' attribute {attr.name}"


def check_element_types(model: onnx.ModelProto) -> None:
    """A corrupted file can carry an element-type number no onnx release defines; it would
    surface as a KeyError deep inside onnx's helpers. Every declared type is checked once
    here (0, 'undefined', is allowed where shapes are merely unknown)."""
    from b2s_onnx.errors import B2SError

    for elem_type, where in _element_types(model):
        if elem_type != 0 and elem_type not in KNOWN_ELEMENT_TYPES:
            raise B2SError(f"{where}: element type {elem_type} is not an ONNX tensor type")
