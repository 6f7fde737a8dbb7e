"""Where each IR layer output lives in the converted ONNX model.

The converter knows, for every output port of every IR layer, which ONNX tensor carries
it, or that it became a constant, or that it vanished; a per-layer comparison needs
exactly that and nothing else can reconstruct it reliably afterwards. Rewrites that run
after conversion keep the map true through :meth:`PortMap.rename` and
:meth:`PortMap.fuse`; :meth:`PortMap.sync` is the safety net that marks anything a rewrite
forgot to report as removed, so a record never points at a tensor that is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import onnx

from b2s_onnx.graph.dead_code import Unread
from b2s_onnx.ir.reader import IRModel, Layer

#: The tensor named in ``tensor`` is computed by the ONNX graph at run time.
TENSOR = "tensor"
#: Folded at conversion time: ``tensor`` names the initializer (or the constant it was).
CONSTANT = "constant"
#: A graph input (an IR Parameter).
INPUT = "input"
#: An IR Const layer: weights read from the .bin, nothing to compare.
WEIGHTS = "weights"
#: A rewrite merged the computation into the node named in ``into``; no tensor carries it.
FUSED = "fused"
#: No tensor carries it any more (a rewrite dropped it, or it was never used).
REMOVED = "removed"
STATUSES = (TENSOR, CONSTANT, INPUT, WEIGHTS, FUSED, REMOVED)


@dataclass(frozen=True)
class PortRecord:
    """One IR output port and its ONNX counterpart."""

    layer_id: str
    name: str
    type: str
    version: str
    port: int
    tensor: str | None
    status: str
    #: For ``fused``: the node that now computes this value internally.
    into: str | None = None
    #: When ``tensor`` carries the value padded with zero channels (axis 1, a rewrite
    #: widened it to whole blocks): the port's own channel count, its leading channels.
    channels: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.layer_id, self.port)

    @property
    def label(self) -> str:
        return f"{self.type}-{self.version.removeprefix('opset')}"


class PortMap:
    """Records in the IR's topological order, looked up by port or by ONNX tensor name."""

    def __init__(self, records: Iterable[PortRecord] = (), ir: IRModel | None = None) -> None:
        self._records: dict[tuple[str, int], PortRecord] = {r.key: r for r in records}
        #: The IR the ports belong to (saves a second parse to whoever compares layers).
        self.ir = ir
        #: Nodes the conversion dropped because nothing read them: their tensors are still
        #: the layers' values, which per-layer comparison computes by putting them back.
        self.unread: Unread | None = None

    def __iter__(self) -> Iterator[PortRecord]:
        return iter(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, key: tuple[str, int]) -> PortRecord:
        return self._records[key]

    def get(self, key: tuple[str, int]) -> PortRecord | None:
        return self._records.get(key)

    def by_tensor(self, tensor: str) -> list[PortRecord]:
        return [r for r in self._records.values() if r.tensor == tensor]

    def rename(self, old: str, new: str) -> None:
        """A rewrite now carries the value of tensor ``old`` in tensor ``new``."""
        for record in self.by_tensor(old):
            self._records[record.key] = replace(record, tensor=new)

    def widen(self, old: str, new: str, channels: int) -> None:
        """A rewrite now carries tensor ``old`` as the first ``channels`` channels of
        ``new``, padded with zero channels."""
        for record in self.by_tensor(old):
            if record.status == TENSOR:
                self._records[record.key] = replace(record, tensor=new, channels=channels)

    def fuse(self, tensor: str, into: str) -> None:
        """A rewrite removed ``tensor``: node ``into`` computes its value internally."""
        for record in self.by_tensor(tensor):
            if record.status in (TENSOR, CONSTANT):
                self._records[record.key] = replace(record, tensor=None, status=FUSED, into=into)

    def remove(self, tensor: str) -> None:
        """A rewrite removed ``tensor`` and nothing computes its value any more."""
        for record in self.by_tensor(tensor):
            if record.status in (TENSOR, CONSTANT):
                self._records[record.key] = replace(record, tensor=None, status=REMOVED)

    def sync(self, model: onnx.ModelProto) -> None:
        """Marks computed records whose tensor ``model`` no longer defines as removed.

        Constants stay constants: an unused folded value is dropped from the initializers
        but was still the layer's value; so do the tensors of :attr:`unread` nodes."""
        graph = model.graph
        defined = {o for node in graph.node for o in node.output if o}
        defined |= {v.name for v in graph.input}
        if self.unread is not None:
            defined |= self.unread.outputs()
        for record in list(self._records.values()):
            if record.status == TENSOR and record.tensor not in defined:
                self.remove(record.tensor)

    def to_list(self) -> list[dict]:
        return [
            {
                "layer_id": r.layer_id,
                "name": r.name,
                "type": r.type,
                "version": r.version,
                "port": r.port,
                "tensor": r.tensor,
                "status": r.status,
                "into": r.into,
                "channels": r.channels,
            }
            for r in self
        ]


def build_port_map(
    ir: IRModel, layers: Iterable[Layer], tensors: dict[tuple[str, int], str], constants: dict
) -> PortMap:
    """The map right after conversion: ``layers`` in topological order, ``tensors`` the
    converter's (layer id, port id) -> name, ``constants`` the names it folded."""
    records = []
    for layer in layers:
        if layer.type == "Result":
            continue
        for port in layer.outputs:
            tensor = tensors[(layer.id, port.id)]
            if layer.type == "Const":
                status = WEIGHTS
            elif layer.type == "Parameter":
                status = INPUT
            elif tensor in constants:
                status = CONSTANT
            else:
                status = TENSOR
            records.append(
                PortRecord(layer.id, layer.name, layer.type, layer.version, port.id, tensor, status)
            )
    return PortMap(records, ir)
