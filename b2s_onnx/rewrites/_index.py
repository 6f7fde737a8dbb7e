"""One look at a graph per pass: producers, consumers and constants by tensor name.

Rewrites query this index instead of walking the graph again, and edit through it so the
index stays true while they work: replacements go where the last matched node stood (its
inputs are produced before, its outputs consumed after), removed nodes leave by identity.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from b2s_onnx.graph.types import TensorInfo, decode_tensor, infer_infos
from b2s_onnx.graph.walk import outer_reads, taken_names
from b2s_onnx.lowering._emit import NameAllocator


def _holds_data(tensor: onnx.TensorProto) -> bool:
    """False for a stub whose bytes are attached later (large converted weights)."""
    if tensor.raw_data or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return True
    count = 1
    for dim in tensor.dims:
        count *= dim
    fields = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
    return count == 0 or any(len(getattr(tensor, f)) for f in fields)


class GraphIndex:
    """The top-level graph of ``model``; subgraphs (If/Loop bodies) are left alone."""

    def __init__(
        self, model: onnx.ModelProto, late: Mapping[str, np.ndarray] | None = None
    ) -> None:
        self.model = model
        #: Values of initializers that are stubs until the model is saved (large weights).
        self.late = late or {}
        self.graph = model.graph
        self.names = NameAllocator(taken_names(model))
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.graph_outputs = {o.name for o in self.graph.output}
        #: Inputs a caller feeds (an initializer listed as an input is a default, not data).
        self.graph_inputs = {v.name for v in self.graph.input} - set(self.initializers)
        self._constants: dict[str, np.ndarray | None] = {}
        self._infos: dict[str, TensorInfo] | None = None
        #: Initializers a rewrite stopped using; dropped at commit if nothing else reads them.
        self.orphaned: set[str] = set()
        self._pending: list[tuple[list[onnx.NodeProto], list[onnx.NodeProto]]] = []
        self._renames: dict[str, str] = {}
        self._outer_reads: set[str] = set()
        self._claimed: set[int] = set()
        self._reindex()

    def _reindex(self) -> None:
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        self._outer_reads = set()
        for node in self.graph.node:
            for name in node.output:
                if name:
                    self.producer[name] = node
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
            # A Loop/If/Scan whose body reads an outer tensor reads it too: a rewrite that
            # sees every reader then leaves the tensor (and its producer) in place.
            implicit = outer_reads(node)
            self._outer_reads |= implicit
            for name in implicit - set(node.input):
                self.consumers[name].append(node)
        self._pending.clear()
        self._claimed.clear()
        #: Facts rewrites derive from this pass's graph (cleared when the graph changes).
        self.memo: dict[str, dict] = {}

    # -- facts -----------------------------------------------------------------------------

    def info(self, name: str) -> TensorInfo:
        """Element type and shape of ``name`` from shape inference, run once, on first use
        (most rewrites never need it)."""
        if self._infos is None:
            self._infos = infer_infos(self.model)
        return self._infos.get(name, TensorInfo())

    def opset(self) -> int:
        for entry in self.model.opset_import:
            if entry.domain in ("", "ai.onnx"):
                return entry.version
        return 0

    def constant(self, name: str) -> np.ndarray | None:
        """The value of an initializer or Constant node output (None when not constant)."""
        if name not in self._constants:
            value = None
            tensor = self.initializers.get(name)
            if tensor is not None and _holds_data(tensor):
                value = decode_tensor(tensor)
            else:
                node = self.producer.get(name)
                if (
                    node is not None
                    and node.op_type == "Constant"
                    and node.domain in ("", "ai.onnx")
                ):
                    for attr in node.attribute:
                        if attr.name == "value":
                            value = numpy_helper.to_array(attr.t)
            self._constants[name] = value
        return self._constants[name]

    def weight(self, name: str) -> np.ndarray | None:
        """Like :meth:`constant`, but also the value of a large weight whose bytes are
        attached at save; only for rewrites that compose weights into new ones of a bounded
        size (others keep seeing stubs, so they never copy large weights into the graph)."""
        value = self.constant(name)
        if value is None and name in self.initializers:
            value = self.late.get(name)
        return value

    def know_constant(self, name: str, value: np.ndarray) -> None:
        """Records that ``name`` now holds ``value`` (a rewrite folded it), so later nodes of
        the same pass see a constant."""
        self._constants[name] = value

    def produced_by(
        self, name: str, op_type: str, domains: tuple[str, ...] = ("", "ai.onnx")
    ) -> onnx.NodeProto | None:
        """The node producing ``name`` when it is an ``op_type`` of ``domains``, else None."""
        node = self.producer.get(name)
        if node is None or node.op_type != op_type or node.domain not in domains:
            return None
        return node

    def position(self, node: onnx.NodeProto) -> int:
        """``node``'s place in this pass's (topologically ordered) node list."""
        positions = self.memo.setdefault("positions", {})
        if not positions:
            positions.update((id(n), i) for i, n in enumerate(self.graph.node))
        return positions[id(node)]

    def sole_feeders(
        self, node: onnx.NodeProto, *producers: onnx.NodeProto
    ) -> list[onnx.NodeProto]:
        """Those of ``producers`` whose output ``node`` alone reads: they go when it goes."""
        return [p for p in producers if self.only_consumer(p.output[0]) is node]

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        """The single node reading ``name``, when it is not also a graph output."""
        readers = self.consumers.get(name, [])
        if len(readers) != 1 or name in self.graph_outputs:
            return None
        return readers[0]

    def attribute(self, node: onnx.NodeProto, name: str, default=None):
        for attr in node.attribute:
            if attr.name == name:
                return onnx.helper.get_attribute_value(attr)
        return default

    def attributes(self, node: onnx.NodeProto) -> dict:
        """All of ``node``'s attributes by name (to compare two nodes' settings)."""
        return {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}

    def reduction_axes(self, node: onnx.NodeProto) -> list[int] | None:
        """A Reduce op's axes as written (possibly negative): the attribute before opset 18
        (ReduceSum: 13), the constant input after; None when computed or absent. Squeeze
        and Unsqueeze spell their axes the same way (input from opset 13)."""
        axes = self.attribute(node, "axes", None)
        if axes is None and len(node.input) > 1 and node.input[1]:
            value = self.constant(node.input[1])
            axes = None if value is None else value.reshape(-1)
        return None if axes is None else [int(a) for a in axes]

    def text(self, node: onnx.NodeProto, name: str, default: str = "") -> str:
        """A string attribute as text (protobuf gives bytes)."""
        value = self.attribute(node, name, default)
        return value.decode() if isinstance(value, bytes) else str(value)

    # -- edits -----------------------------------------------------------------------------

    def add_initializer(self, hint: str, value: np.ndarray, *, exact_name: bool = False) -> str:
        """Adds a constant under a fresh name from ``hint`` (or ``hint`` itself)."""
        name = hint if exact_name else self.names.fresh(hint)
        tensor = numpy_helper.from_array(value, name)
        self.graph.initializer.append(tensor)
        self.initializers[name] = tensor
        return name

    def is_free(self, nodes: list[onnx.NodeProto]) -> bool:
        """No other rewrite of this pass has claimed any of ``nodes``."""
        return not any(id(node) in self._claimed for node in nodes)

    def claim(self, nodes: list[onnx.NodeProto]) -> None:
        """Reserves ``nodes`` for one rewrite in this pass (check :meth:`is_free` first)."""
        self._claimed.update(id(node) for node in nodes)

    def retype(self, node: onnx.NodeProto, op_type: str) -> bool:
        """Replaces a free ``node`` by a copy of it as ``op_type`` (same inputs, outputs,
        name and attributes): Add as Sum, which onnxruntime's fusions do not match.
        False, and nothing changed, when another rewrite claimed the node this pass."""
        if not self.is_free([node]):
            return False
        self.claim([node])
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.op_type = op_type
        self.replace([node], [copy])
        return True

    def replace(self, matched: list[onnx.NodeProto], replacements: list[onnx.NodeProto]) -> None:
        """Schedules ``matched`` (claimed nodes) to give way to ``replacements``, which go
        where the last of them stood; :meth:`commit` carries out a pass's replacements."""
        self._pending.append((matched, replacements))

    def replace_stacked(
        self, layers: list[list[onnx.NodeProto]], replacements: list[onnx.NodeProto]
    ) -> None:
        """Schedules several layers (claimed nodes each) to give way to one set of
        ``replacements`` computing all their outputs. Every layer's readers come after its
        own last node, so the replacements go where the earliest of those stood; the other
        layers' nodes simply go."""
        earliest = min(layers, key=lambda nodes: max(self.position(n) for n in nodes))
        self.replace(earliest, replacements)
        for nodes in layers:
            if nodes is not earliest:
                self.replace(nodes, [])

    def can_rename(self, name: str) -> bool:
        """Whether readers of ``name`` can be pointed elsewhere: it is no graph output and
        no subgraph reads it from the outer scope."""
        return name not in self.graph_outputs and not self.read_by_subgraph(name)

    def read_by_subgraph(self, name: str) -> bool:
        """Whether a Loop/If/Scan body reads ``name`` from the outer scope (such a reader is
        among :attr:`consumers` but cannot be pointed elsewhere by a rename)."""
        return name in self._outer_reads

    def rename_later(self, old: str, new: str) -> None:
        """At commit, every reader of ``old`` reads ``new`` (check :meth:`can_rename`)."""
        self._renames[old] = new

    def forget_shapes(self, names: list[str]) -> None:
        """Drops recorded shapes of tensors whose values a rewrite changed."""
        doomed = set(names)
        kept = [v for v in self.graph.value_info if v.name not in doomed]
        if len(kept) != len(self.graph.value_info):
            del self.graph.value_info[:]
            self.graph.value_info.extend(kept)

    def commit(self) -> None:
        """Rebuilds the node list once for all scheduled replacements and re-indexes."""
        if not self._pending and not self._renames:
            return
        doomed: set[int] = set()
        insert_after: dict[int, list[onnx.NodeProto]] = {}
        positions = {id(node): i for i, node in enumerate(self.graph.node)}
        for matched, replacements in self._pending:
            doomed.update(id(node) for node in matched)
            last = max(matched, key=lambda node: positions[id(node)])
            insert_after[id(last)] = replacements
            self.orphaned.update(
                name for node in matched for name in node.input if name in self.initializers
            )
        rebuilt: list[onnx.NodeProto] = []
        for node in self.graph.node:
            if id(node) in doomed:
                rebuilt.extend(insert_after.get(id(node), []))
            else:
                rebuilt.append(node)
        copies = [onnx.NodeProto() for _ in rebuilt]
        for copy, node in zip(copies, rebuilt, strict=True):
            copy.CopyFrom(node)
            for position, name in enumerate(copy.input):
                while name in self._renames:
                    name = self._renames[name]
                copy.input[position] = name
        self._renames.clear()
        del self.graph.node[:]
        self.graph.node.extend(copies)
        self._infos = None  # new tensors need shapes too: inferred again when asked
        self._reindex()
        self._drop_orphaned_initializers()

    def _drop_orphaned_initializers(self) -> None:
        dead = {
            name
            for name in self.orphaned
            if not self.consumers.get(name) and name not in self.graph_outputs
        }
        self.orphaned.clear()
        if not dead:
            return
        kept = [t for t in self.graph.initializer if t.name not in dead]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept)
        self.initializers = {t.name: t for t in self.graph.initializer}
