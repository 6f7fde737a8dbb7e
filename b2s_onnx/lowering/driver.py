"""Runs the rule registry over a model: every custom node of a known op is replaced.

The model is walked graph by graph (subgraphs first, so a parent is rebuilt from nodes
whose bodies are already lowered). A node is lowered once the rank and element type of
its data are known; ONNX shape inference cannot see through custom nodes, so a node fed
(through standard ops) by another custom node waits for the next round, after the first
one is lowered and inference runs again. Rounds stop when no node is left, or none could
be lowered, which is an error naming the node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.types import TensorInfo, constant_values, infer_infos
from b2s_onnx.graph.versions import MIN_OPSET, choose_ir_version, default_opset, resolve_opset
from b2s_onnx.graph.walk import (
    all_graphs,
    all_nodes,
    check_element_types,
    check_strings,
    copy_message,
    defined_names,
    sort_topologically,
    subgraphs,
    taken_names,
    used_names,
)
from b2s_onnx.lowering._emit import Emitter, NameAllocator
from b2s_onnx.lowering._node import NodeFacts, check_arity, index_input, node_ref, read_attributes
from b2s_onnx.lowering._options import LoweringOptions
from b2s_onnx.lowering.registry import DEFAULT_DOMAINS, RULES
from b2s_onnx.validation import checker_problem, lowering_blame, prove


@dataclass(frozen=True)
class LoweredNode:
    """One replaced node, for reports: where it was and what it became."""

    name: str
    op_type: str
    static: bool
    replacement: tuple[str, ...]


@dataclass
class LoweringResult:
    model: onnx.ModelProto
    lowered: list[LoweredNode] = field(default_factory=list)
    #: What the rewrites around the lowering did (a ``b2s_onnx.rewrites.RewriteReport``).
    rewrites: object = None


class _Lowering:
    def __init__(
        self, model: onnx.ModelProto, domains: Iterable[str], options: LoweringOptions
    ) -> None:
        self.model = model
        self.domains = frozenset(domains)
        self.options = options
        self.names = NameAllocator(taken_names(model))
        self.constants: dict[str, np.ndarray] = constant_values(model)
        self.infos: dict[str, TensorInfo] = {}
        self.lowered: list[LoweredNode] = []
        self.folded_constants: set[str] = set()
        self.waiting: list[tuple[NodeFacts | None, onnx.NodeProto, str]] = []
        self._position = 0
        self.defined = defined_names(model)
        self.templates: dict[tuple, _Template] = {}

    def is_custom(self, node: onnx.NodeProto) -> bool:
        return node.domain in self.domains and node.op_type in RULES

    def run(self) -> None:
        while True:
            self.infos = infer_infos(self.model)
            self.waiting = []
            before = len(self.lowered)
            self._lower_graph(self.model.graph)
            if not self.waiting:
                return
            if len(self.lowered) == before:
                _, node, why = self.waiting[0]
                more = len(self.waiting) - 1
                suffix = f" (and {more} more node{'s' if more > 1 else ''})" if more else ""
                raise B2SError(f"{node.op_type} '{node.name}': {why}{suffix}")

    def _lower_graph(self, graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for sub in subgraphs(node):
                self._lower_graph(sub)
        if not any(self.is_custom(node) for node in graph.node):
            return
        rebuilt: list[onnx.NodeProto] = []
        for node in graph.node:
            self._position += 1
            if not self.is_custom(node):
                rebuilt.append(node)
                continue
            replacement = self._lower_node(node, graph)
            if replacement is None:
                rebuilt.append(node)
            else:
                rebuilt.extend(replacement)
        graph.ClearField("node")
        graph.node.extend(rebuilt)

    def _facts(self, node: onnx.NodeProto) -> NodeFacts | str:
        """The node's facts, or why it cannot be lowered yet (unknown rank or type)."""
        rule = RULES[node.op_type]
        ref = node_ref(node, self._position)
        check_arity(ref, node, ("data", *rule.index_roles))
        for role, tensor in zip(("data", *rule.index_roles), node.input, strict=True):
            if tensor not in self.defined:
                ref.fail(
                    role,
                    f"input '{role}' reads tensor '{tensor}', which nothing in the "
                    "model defines (a missing initializer?)",
                )
        attributes = read_attributes(ref, node, rule.attributes)
        data = node.input[0]
        info = self.infos.get(data, TensorInfo())
        if info.shape is None:
            return f"rank of input 'data' (tensor '{data}') is unknown; give it a shape"
        if not info.elem_type:
            return f"element type of input 'data' (tensor '{data}') is unknown"
        facts = NodeFacts(node=node, ref=ref, data=data, data_info=info, attributes=attributes)
        for role, tensor in zip(rule.index_roles, node.input[1:], strict=True):
            facts.index[role] = index_input(role, tensor, self.infos.get(tensor), self.constants)
            facts.index_tensors[role] = tensor
        return facts

    def _lower_node(self, node: onnx.NodeProto, graph: onnx.GraphProto):
        facts = self._facts(node)
        if isinstance(facts, str):
            self.waiting.append((None, node, facts))
            return None
        static = all(ix.value is not None for ix in facts.index.values()) and all(
            d is not None for d in facts.shape
        )
        key = self._template_key(facts) if static else None
        template = self.templates.get(key) if key is not None else None
        if template is not None:
            nodes, initializers = template.stamp(facts, self.names)
            out_shape = template.out_shape
        else:
            emit = Emitter(self.names, facts.ref.name, default_opset(self.model) or MIN_OPSET)
            RULES[node.op_type].lower(facts, emit, self.options)
            nodes, initializers, out_shape = emit.nodes, emit.initializers, facts.out_shape
            if key is not None:
                self.templates[key] = _Template(facts, nodes, initializers, out_shape)
        graph.initializer.extend(initializers)
        if out_shape is not None:
            self.infos[facts.output] = TensorInfo(facts.data_info.elem_type, tuple(out_shape))
        self.lowered.append(
            LoweredNode(facts.ref.name, node.op_type, static, tuple(n.op_type for n in nodes))
        )
        self.folded_constants.update(
            tensor
            for role, tensor in facts.index_tensors.items()
            if facts.index[role].value is not None
        )
        return nodes

    def _template_key(self, facts: NodeFacts) -> tuple:
        values = tuple(
            (role, tuple(ix.ints() or ()), ix.dtype_name) for role, ix in facts.index.items()
        )
        attributes = tuple(sorted((k, str(v)) for k, v in facts.attributes.items()))
        return (facts.node.op_type, facts.shape, facts.data_info.elem_type, values, attributes)


class _Template:
    """The lowering of one fully static node, reused for every identical node.

    Models repeat the same block many times; the rule's output depends only on the key
    (op, shape, element type, index values, attributes), so later nodes get renamed copies:
    their own data input, output, and fresh names derived from their own node name.
    """

    def __init__(
        self,
        facts: NodeFacts,
        nodes: list[onnx.NodeProto],
        initializers: list[onnx.TensorProto],
        out_shape,
    ) -> None:
        self.prefix = facts.ref.name
        self.data = facts.data
        self.output = facts.output
        self.nodes = [copy_message(n) for n in nodes]
        self.initializers = [copy_message(t) for t in initializers]
        self.out_shape = out_shape

    def stamp(self, facts: NodeFacts, names: NameAllocator):
        renamed = {self.data: facts.data, self.output: facts.output}
        prefix = self.prefix + "/"

        def rename(name: str) -> str:
            if name not in renamed:
                suffix = name[len(prefix) :] if name.startswith(prefix) else name
                renamed[name] = names.fresh(f"{facts.ref.name}/{suffix}")
            return renamed[name]

        initializers = []
        for tensor in self.initializers:
            copy = copy_message(tensor)
            copy.name = rename(tensor.name)
            initializers.append(copy)
        nodes = []
        for node in self.nodes:
            copy = copy_message(node)
            copy.name = rename(node.name)
            copy.input[:] = [rename(i) if i else i for i in node.input]
            copy.output[:] = [rename(o) for o in node.output]
            nodes.append(copy)
        return nodes, initializers


def _drop_dead_constants(model: onnx.ModelProto, candidates: set[str]) -> None:
    """Removes the index constants that only the lowered nodes read."""
    dead = candidates - used_names(model.graph)
    if not dead:
        return
    for graph in all_graphs(model.graph):
        # Delete in place: rebuilding the list would copy every kept tensor (weights too).
        for index in reversed(range(len(graph.initializer))):
            if graph.initializer[index].name in dead:
                del graph.initializer[index]
        for index in reversed(range(len(graph.node))):
            node = graph.node[index]
            if (
                node.op_type == "Constant"
                and node.domain in ("", "ai.onnx")
                and node.output[0] in dead
            ):
                del graph.node[index]


def _drop_unused_domains(model: onnx.ModelProto, domains: frozenset[str]) -> None:
    in_use = {n.domain for n in all_nodes(model.graph)}
    for function in model.functions:
        in_use.add(function.domain)
        in_use.update(n.domain for n in function.node)
    kept = [o for o in model.opset_import if o.domain not in domains or o.domain in in_use]
    if len(kept) != len(model.opset_import):
        model.ClearField("opset_import")
        model.opset_import.extend(kept)


def lower_model(
    model: onnx.ModelProto,
    *,
    opset: int | None = None,
    domains: Iterable[str] = DEFAULT_DOMAINS,
    options: LoweringOptions | None = None,
    in_place: bool = False,
    proven: bool = True,
) -> LoweringResult:
    """Lowers a copy of ``model`` (the input is never modified), or, with ``in_place``, the
    model itself, which keeps memory near the model's size for very large models.
    ``proven``: the result passes onnx's checker and loads in onnxruntime, or this raises
    (callers that prove the result themselves, with better names, turn it off)."""
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"expected onnx.ModelProto, got {type(model).__name__}")
    check_strings(model)
    check_element_types(model)
    if proven:  # judged before lowering: with in_place the input is about to change
        blame, tolerated = lowering_blame(model), checker_problem(model)
    if in_place:
        work = model
    else:
        work = onnx.ModelProto()
        work.CopyFrom(model)
    # Shape inference needs a sorted graph; replacements are spliced in place, so the
    # output stays sorted.
    sort_topologically(work.graph)
    work = resolve_opset(work, opset)
    options = options or LoweringOptions()
    # Imported here: the rewrites build on the lowering's emitter, so the packages would
    # otherwise import each other.
    from b2s_onnx.rewrites import (
        AFTER_LOWERING_REWRITES,
        RewriteReport,
        apply_rewrites,
        lowering_rewrites,
    )

    domains = tuple(domains)
    rewrites = RewriteReport()
    if options.fuse:
        rewrites = apply_rewrites(work, lowering_rewrites(domains))
    lowering = _Lowering(work, domains, options)
    lowering.run()
    _drop_dead_constants(work, lowering.folded_constants)
    _drop_unused_domains(work, lowering.domains)
    if options.fuse:
        rewrites.extend(apply_rewrites(work, AFTER_LOWERING_REWRITES))
    work.ir_version = choose_ir_version(work)
    if proven:
        prove(work, blame, tolerated)
    return LoweringResult(work, lowering.lowered, rewrites)
