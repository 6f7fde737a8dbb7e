"""Bodies of TensorIterator, Loop and If: their port maps, typed, and their conversion into
ONNX subgraphs by the same converters as the main network.

A body is a network of its own (layer ids restart), so it gets its own conversion context;
tensor names, constants, types and weights are shared with the enclosing graph, because
ONNX names are unique across a model and a subgraph may read any outer tensor by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import prepare
from b2s_onnx.ir.reader import Layer, topological_order
from b2s_onnx.ir.weights import element_type, onnx_type


@dataclass(frozen=True)
class PortLink:
    """One ``<input>`` or ``<output>`` of a port map: an outer port and a body layer
    (a Parameter for inputs, a Result for outputs), sliced or concatenated along ``axis``
    when it is set."""

    external: int
    body_layer: str
    axis: int | None = None
    start: int = 0
    end: int = -1
    stride: int = 1
    part_size: int = 1
    purpose: str | None = None


@dataclass(frozen=True)
class PortMap:
    inputs: list[PortLink]
    outputs: list[PortLink]
    #: body Parameter id -> body Result id whose value it takes in the next iteration
    back_edges: dict[str, str]


#: The special body ports of Loop, by port-map entry kind.
_PURPOSES = {"input": ("current_iteration",), "output": ("execution_condition",)}


def _number(layer: Layer, tag: str, item: dict[str, str], key: str, default: int | None) -> int:
    text = item.get(key)
    if text is None:
        if default is None:
            raise B2SError(f"{layer.where()}: a <{tag}> {item['kind']} has no {key}")
        return default
    try:
        return int(text)
    except ValueError:
        raise B2SError(
            f"{layer.where()}: <{tag}> {item['kind']} {key}='{text}' is not an integer"
        ) from None


def port_map(layer: Layer, tag: str = "port_map", body: str = "body") -> PortMap:
    """The typed port map ``tag`` of ``layer``, checked against ``body``'s layers."""
    network = layer.bodies.get(body)
    if network is None:
        raise B2SError(f"{layer.where()}: missing <{body}>")
    links: dict[str, list[PortLink]] = {"input": [], "output": []}
    for item in layer.port_maps.get(tag, []):
        kind = item["kind"]
        if kind not in links:
            raise B2SError(f"{layer.where()}: unexpected <{kind}> in <{tag}>")
        link = PortLink(
            external=_number(layer, tag, item, "external_port_id", None),
            body_layer=item.get("internal_layer_id", ""),
            axis=None if "axis" not in item else _number(layer, tag, item, "axis", None),
            start=_number(layer, tag, item, "start", 0),
            end=_number(layer, tag, item, "end", -1),
            stride=_number(layer, tag, item, "stride", 1),
            part_size=_number(layer, tag, item, "part_size", 1),
            purpose=item.get("purpose"),
        )
        purposes = _PURPOSES[kind]
        if link.purpose is not None and link.purpose not in purposes:
            raise B2SError(
                f"{layer.where()}: <{tag}> {kind} purpose='{link.purpose}' is not {purposes[0]}"
            )
        wanted = "Parameter" if kind == "input" else "Result"
        target = network.layers.get(link.body_layer)
        if target is None or target.type != wanted:
            raise B2SError(
                f"{layer.where()}: <{tag}> {kind} internal_layer_id='{link.body_layer}' is "
                f"not a {wanted} of <{body}>"
            )
        ports = {p.id for p in (layer.inputs if kind == "input" else layer.outputs)}
        if link.purpose is None and link.external not in ports:
            raise B2SError(
                f"{layer.where()}: <{tag}> {kind} external_port_id={link.external} is not "
                f"one of the layer's {kind} ports"
            )
        links[kind].append(link)
    back_edges = {}
    for item in layer.port_maps.get("back_edges", []):
        source, target = item.get("from-layer", ""), item.get("to-layer", "")
        if network.layers.get(source) is None or network.layers[source].type != "Result":
            raise B2SError(f"{layer.where()}: back edge from '{source}' is not a body Result")
        if network.layers.get(target) is None or network.layers[target].type != "Parameter":
            raise B2SError(f"{layer.where()}: back edge to '{target}' is not a body Parameter")
        back_edges[target] = source
    return PortMap(links["input"], links["output"], back_edges)


#: ConversionContext attributes a body shares with the network that holds it.
SHARED_STATE = (
    "names",
    "constants",
    "types",
    "shapes",
    "initializers",
    "late_initializers",
    "weights",
    "dequantized",
    "notes",
    "int8",
    "fuse",
)


class Body:
    """One body being converted: bind its Parameters, convert, then build the subgraph."""

    def __init__(self, ctx: ConversionContext, layer: Layer, tag: str) -> None:
        self.layer = layer
        self.network = layer.bodies[tag]
        self.ctx = ConversionContext(self.network, ctx.opset)
        # Everything a converter records about tensors is the model's, not the body's: a
        # body's weights join the model's initializers (large ones late, as at top level),
        # and its INT8 provenance, notes, --int8 and --no-fuse choices are the model's too.
        for shared in SHARED_STATE:
            setattr(self.ctx, shared, getattr(ctx, shared))
        self.ctx.begin(layer)
        self.order = topological_order(self.network)
        self.inputs: list[onnx.ValueInfoProto] = []

    def parameter(self, layer_id: str) -> Layer:
        return self.network.layers[layer_id]

    def bind(self, layer_id: str, tensor: str) -> None:
        """Body Parameter ``layer_id`` reads ``tensor`` (outer, or made in this body)."""
        parameter = self.network.layers[layer_id]
        self.ctx.tensors[(layer_id, parameter.outputs[0].id)] = tensor

    def graph_input(self, layer_id: str | None, hint: str, kind: int | None = None) -> str:
        """A fresh input of the subgraph, bound to Parameter ``layer_id`` if given (else a
        scalar: Loop's iteration number and condition)."""
        name = self.ctx.names.fresh(f"{self.layer.name}/{hint}")
        dims: tuple[int | None, ...] | None = ()
        if layer_id is not None:
            parameter = self.parameter(layer_id)
            port = parameter.outputs[0]
            if kind is None:
                kind = onnx_type(
                    element_type(
                        parameter.data.get("element_type", port.precision or "f32"),
                        parameter.where(),
                    )
                )
            dims = port.dims
            self.bind(layer_id, name)
        self.ctx.types[name] = kind
        self.ctx.shapes[name] = dims
        self.inputs.append(
            helper.make_tensor_value_info(name, kind, None if dims is None else list(dims))
        )
        return name

    def convert(self) -> dict[str, str]:
        """Converts the body; returns each Result's layer id with the tensor it reads."""
        from b2s_onnx.ir.convert import convert_layers  # the driver imports the converters

        for layer in self.order:
            if layer.type == "Parameter":
                if (layer.id, layer.outputs[0].id) not in self.ctx.tensors:
                    raise B2SError(
                        f"{self.layer.where()}: body {layer.where()} is not connected by the "
                        "port map"
                    )
                continue
            self.ctx.assign_output_names(layer)
            prepare(layer, self.ctx.model.path)
        results = convert_layers(self.ctx, self.order)
        return {result.id: tensor for result, tensor in results}

    def graph(self, outputs: list[str], name: str) -> onnx.GraphProto:
        """The subgraph returning ``outputs`` (each through an Identity of its own, since a
        subgraph output must be produced inside it)."""
        returned = []
        for tensor in outputs:
            out = self.ctx.one("Identity", [tensor], hint="body_output")
            kind = self.ctx.type_of(tensor)
            self.ctx.types[out] = kind
            returned.append(helper.make_tensor_value_info(out, kind, None))
        return helper.make_graph(self.ctx.nodes, name, self.inputs, returned)
