"""Reading an OpenVINO IR ``.xml`` into plain data, refusing anything malformed.

The XML comes from anywhere, so it is parsed with defusedxml (no DTDs, no entity
expansion, no network) and every structural rule is checked here, once, with a message
that names the layer and the field: unknown root, missing sections, duplicate ids, edges
to missing layers or ports, ports fed twice or never, dims that are not sizes.
"""

from __future__ import annotations

import heapq
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from b2s_onnx.errors import B2SError

SUPPORTED_VERSIONS = (10, 11)
#: A dimension larger than this is refused before anything is allocated from it.
MAX_DIM = 2**40

_RANGE = re.compile(r"^(-?\d+)?\.\.(-?\d+)?$")


@dataclass(frozen=True)
class Port:
    id: int
    dims: tuple[int | None, ...] | None
    precision: str | None = None
    names: tuple[str, ...] = ()


@dataclass
class Layer:
    id: str
    name: str
    type: str
    version: str
    data: dict[str, str]
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    #: Typed attribute values, parsed and checked against the converter's schema.
    attrs: dict[str, object] = field(default_factory=dict)
    #: Nested networks of TensorIterator/Loop (``body``) and If (``then_body``,
    #: ``else_body``), and their raw port maps and back edges (see ``ir.body``).
    bodies: dict[str, IRModel] = field(default_factory=dict)
    port_maps: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    def where(self) -> str:
        """How messages name the layer: id, name, and type-version, as the IR spells them."""
        return f"layer {self.id} '{self.name}' ({self.type}-{self.version})"

    def output_port(self, port_id: int) -> Port:
        for port in self.outputs:
            if port.id == port_id:
                return port
        raise KeyError(port_id)


@dataclass(frozen=True)
class Edge:
    from_layer: str
    from_port: int
    to_layer: str
    to_port: int


@dataclass
class IRModel:
    path: Path
    name: str
    version: int
    layers: dict[str, Layer]
    edges: list[Edge]
    #: (to_layer, to_port) -> (from_layer, from_port)
    sources: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)


def _fail(path: Path, message: str) -> B2SError:
    return B2SError(f"{path}: {message}")


def parse_dim(text: str, path: Path, where: str) -> int | None:
    """A dimension: a size, or None for a dynamic one (``?``, ``-1``, a range ``1..10``)."""
    value = text.strip()
    if value in ("?", "-1") or _RANGE.match(value):
        return None
    try:
        number = int(value)
    except ValueError:
        raise _fail(path, f"{where}: dimension '{value}' is not a number") from None
    if number < 0:
        raise _fail(path, f"{where}: dimension {number} is negative")
    if number > MAX_DIM:
        raise _fail(path, f"{where}: dimension {number} is absurdly large (> 2^40)")
    return number


def parse_shape(text: str, path: Path, where: str) -> tuple[int | None, ...] | None:
    """``"1,3,224,224"`` -> dims; ``""`` -> () (a scalar); ``"..."`` -> None (any rank)."""
    value = text.strip().strip("[]")
    if value in ("...",):
        return None
    if not value:
        return ()
    return tuple(parse_dim(part, path, where) for part in value.split(","))


def _split_names(text: str) -> tuple[str, ...]:
    """Port names are comma-separated; a literal comma is escaped as ``\\,``."""
    parts = re.split(r"(?<!\\),", text)
    return tuple(p.replace("\\,", ",").strip() for p in parts if p.strip())


def _ports(element, path: Path, where: str) -> list[Port]:
    ports = []
    seen = set()
    for port in element.findall("port") if element is not None else []:
        raw_id = port.get("id")
        if raw_id is None or not raw_id.strip().isdigit():
            raise _fail(path, f"{where}: port id '{raw_id}' is not a number")
        port_id = int(raw_id)
        if port_id in seen:
            raise _fail(path, f"{where}: duplicate port id {port_id}")
        seen.add(port_id)
        dims = tuple(
            parse_dim(d.text or "", path, f"{where} port {port_id}") for d in port.findall("dim")
        )
        ports.append(
            Port(port_id, dims, port.get("precision"), _split_names(port.get("names", "")))
        )
    return ports


def read_ir_xml(xml_path: str | os.PathLike) -> IRModel:
    path = Path(xml_path)
    if not path.is_file():
        raise B2SError(f"{path}: no such file")
    try:
        tree = SafeET.parse(str(path), forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise _fail(
            path,
            f"refused unsafe XML ({type(exc).__name__}: DTDs and entities are not "
            "allowed in IR files)",
        ) from None
    except SafeET.ParseError as exc:
        raise _fail(path, f"not well-formed XML ({exc})") from None
    root = tree.getroot()
    if root.tag != "net":
        raise _fail(path, f"root element is <{root.tag}>, expected <net> (not an OpenVINO IR)")
    raw_version = root.get("version", "")
    if not raw_version.isdigit() or int(raw_version) not in SUPPORTED_VERSIONS:
        raise _fail(path, f"IR version '{raw_version}' is not supported (supported: 10, 11)")
    layers, edges, sources = _read_network(root, path, depth=0)
    return IRModel(path, root.get("name", path.stem), int(raw_version), layers, edges, sources)


#: Subgraph sections of a layer, and the sections describing how they connect.
BODY_TAGS = ("body", "then_body", "else_body")
PORT_MAP_TAGS = ("port_map", "then_port_map", "else_port_map", "back_edges")
#: Deeper nesting of bodies than this is refused (it only serves to exhaust the stack).
MAX_BODY_DEPTH = 16


def _read_network(
    root, path: Path, depth: int
) -> tuple[dict[str, Layer], list[Edge], dict[tuple[str, int], tuple[str, int]]]:
    """The ``<layers>`` and ``<edges>`` under ``root``: the model, or a layer's body."""
    layers_element = root.find("layers")
    edges_element = root.find("edges")
    if layers_element is None:
        raise _fail(path, "missing <layers>")
    if edges_element is None:
        raise _fail(path, "missing <edges>")

    layers: dict[str, Layer] = {}
    for element in layers_element.findall("layer"):
        layer_id = element.get("id")
        if layer_id is None or not layer_id.strip():
            raise _fail(path, "a <layer> has no id")
        if layer_id in layers:
            raise _fail(path, f"duplicate layer id {layer_id}")
        layer_type = element.get("type")
        if not layer_type:
            raise _fail(path, f"layer {layer_id} has no type")
        name = element.get("name") or f"{layer_type}_{layer_id}"
        version = element.get("version", "opset1")
        where = f"layer {layer_id} '{name}' ({layer_type}-{version})"
        data_element = element.find("data")
        data = dict(data_element.attrib) if data_element is not None else {}
        layers[layer_id] = Layer(
            id=layer_id,
            name=name,
            type=layer_type,
            version=version,
            data=data,
            inputs=_ports(element.find("input"), path, where),
            outputs=_ports(element.find("output"), path, where),
        )
        _read_bodies(element, layers[layer_id], path, depth)

    edges: list[Edge] = []
    sources: dict[tuple[str, int], tuple[str, int]] = {}
    for element in edges_element.findall("edge"):
        try:
            edge = Edge(
                element.get("from-layer", ""),
                int(element.get("from-port", "")),
                element.get("to-layer", ""),
                int(element.get("to-port", "")),
            )
        except ValueError:
            raise _fail(
                path, f"edge {dict(element.attrib)} has a port that is not a number"
            ) from None
        source = layers.get(edge.from_layer)
        target = layers.get(edge.to_layer)
        if source is None or target is None:
            missing = edge.from_layer if source is None else edge.to_layer
            raise _fail(
                path,
                f"edge {edge.from_layer}:{edge.from_port} -> "
                f"{edge.to_layer}:{edge.to_port} refers to missing layer {missing}",
            )
        if edge.from_port not in {p.id for p in source.outputs}:
            raise _fail(
                path, f"edge from {source.where()} uses missing output port {edge.from_port}"
            )
        if edge.to_port not in {p.id for p in target.inputs}:
            raise _fail(path, f"edge to {target.where()} uses missing input port {edge.to_port}")
        key = (edge.to_layer, edge.to_port)
        if key in sources:
            raise _fail(path, f"{target.where()} input port {edge.to_port} is fed by two edges")
        sources[key] = (edge.from_layer, edge.from_port)
        edges.append(edge)

    for layer in layers.values():
        for port in layer.inputs:
            if (layer.id, port.id) not in sources:
                raise _fail(path, f"{layer.where()} input port {port.id} is not connected")
    return layers, edges, sources


def _read_bodies(element, layer: Layer, path: Path, depth: int) -> None:
    for tag in PORT_MAP_TAGS:
        section = element.find(tag)
        if section is not None:
            layer.port_maps[tag] = [{"kind": item.tag, **dict(item.attrib)} for item in section]
    for tag in BODY_TAGS:
        section = element.find(tag)
        if section is None:
            continue
        if depth >= MAX_BODY_DEPTH:
            raise _fail(path, f"{layer.where()}: bodies nested deeper than {MAX_BODY_DEPTH}")
        layers, edges, sources = _read_network(section, path, depth + 1)
        layer.bodies[tag] = IRModel(path, f"{layer.name}/{tag}", 0, layers, edges, sources)


def topological_order(model: IRModel) -> list[Layer]:
    """Layers so that every producer comes before its consumers, otherwise in file order;
    a cycle is an error naming layers on it."""
    position = {layer_id: i for i, layer_id in enumerate(model.layers)}
    consumers: dict[str, list[str]] = {layer_id: [] for layer_id in model.layers}
    waiting = dict.fromkeys(model.layers, 0)
    for (to_layer, _), (from_layer, _) in model.sources.items():
        consumers[from_layer].append(to_layer)
        waiting[to_layer] += 1
    ready = [position[lid] for lid, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    ids = list(model.layers)
    order: list[Layer] = []
    while ready:
        layer_id = ids[heapq.heappop(ready)]
        order.append(model.layers[layer_id])
        for consumer in consumers[layer_id]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, position[consumer])
    if len(order) != len(model.layers):
        stuck = [lid for lid, n in waiting.items() if n > 0]
        names = ", ".join(model.layers[lid].where() for lid in stuck[:3])
        raise _fail(model.path, f"the graph has a cycle through {names}")
    return order
