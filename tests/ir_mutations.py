"""Seeded single mutations of an OpenVINO IR (``.xml`` text and ``.bin`` bytes) and of an
ONNX model, for the mutation-fuzz tests.

Each mutation changes one thing a broken exporter, a bad hand edit or a corrupted download
could: an attribute value, a dim, an edge endpoint, a Const's offset/size/element type, a
layer's type or version, a port, the weights' bytes; for ONNX an attribute, an initializer
or a declared shape. The same seed always gives the same mutant, so a failure is replayed
by its seed alone.
"""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

IR_KINDS = (
    "attribute",
    "dim",
    "edge",
    "cycle",
    "const",
    "type",
    "version",
    "drop_port",
    "bin_flip",
    "bin_truncate",
)
ONNX_KINDS = ("attribute", "initializer", "shape", "elem_type", "drop_input")

#: Values an attribute is set to: wrong type, empty, wrong length, out of range.
ODD_VALUES = (
    "",
    "abc",
    "-1",
    "0",
    "1",
    "2",
    "-7",
    "1e309",
    "nan",
    "99999999999999999999",
    "1,1",
    "2,2",
    "1,2,3",
    "0,0,0,0",
    "-1,-1",
    "true",
    "false",
    "f16",
    "i32",
    "u1",
    "numpy",
    "explicit",
    "same_upper",
    "valid",
    "ceil",
    "1.5",
    ",",
)
DIM_VALUES = (0, 1, 2, 3, 7, 1000, -1)
LAYER_TYPES = (
    "Add",
    "Multiply",
    "ReLU",
    "Sigmoid",
    "Convolution",
    "GroupConvolution",
    "MaxPool",
    "AvgPool",
    "Concat",
    "Reshape",
    "Transpose",
    "SoftMax",
    "MatMul",
    "Clamp",
    "Squeeze",
    "Unsqueeze",
    "Interpolate",
    "ReduceMean",
    "Gather",
    "StridedSlice",
    "DepthToSpace",
    "BatchToSpace",
    "NoSuchOp",
)
VERSIONS = ("opset1", "opset3", "opset4", "opset8", "opset11", "opset13", "opset99", "")


@dataclass
class IRMutant:
    xml: str
    weights: bytes
    kind: str
    description: str


def _layers(root: ET.Element) -> list[ET.Element]:
    return root.findall("./layers/layer")


def _attribute(rng: random.Random, root: ET.Element) -> str:
    candidates = [
        (layer, data)
        for layer in _layers(root)
        if (data := layer.find("data")) is not None and data.attrib
    ]
    if not candidates:
        return _dim(rng, root)
    layer, data = rng.choice(candidates)
    key = rng.choice(sorted(data.attrib))
    old = data.attrib[key]
    choice = rng.random()
    if choice < 0.2 and "," in old:  # wrong length: one value dropped or added
        parts = old.split(",")
        new = ",".join(parts[:-1]) if rng.random() < 0.5 else ",".join([*parts, parts[-1]])
    elif choice < 0.35 and old.lstrip("-").isdigit():  # out of range
        new = str(rng.choice((-int(old) - 1, int(old) * 1000 + 7, 0, -1)))
    elif choice < 0.45:
        del data.attrib[key]
        return f"layer {layer.get('id')} attribute {key} removed"
    else:
        new = rng.choice(ODD_VALUES)
    data.set(key, new)
    return f"layer {layer.get('id')} {key}='{old}' -> '{new}'"


def _dim(rng: random.Random, root: ET.Element) -> str:
    dims = [(layer, dim) for layer in _layers(root) for dim in layer.iter("dim")]
    layer, dim = rng.choice(dims)
    old = dim.text
    value = rng.choice(DIM_VALUES)
    if rng.random() < 0.5 and old and old.isdigit():
        value = max(0, int(old) + rng.choice((-1, 1)))
    dim.text = str(value)
    return f"layer {layer.get('id')} dim {old} -> {value}"


def _edge(rng: random.Random, root: ET.Element) -> str:
    edges = root.findall("./edges/edge")
    edge = rng.choice(edges)
    field = rng.choice(("from-layer", "from-port", "to-layer", "to-port"))
    old = edge.get(field)
    if field.endswith("layer"):
        ids = [layer.get("id") for layer in _layers(root)]
        new = rng.choice([*ids, "99999"])
    else:
        new = str(rng.choice((0, 1, 2, 3, 5, 17)))
    edge.set(field, new)
    return f"edge {field} {old} -> {new}"


def _cycle(rng: random.Random, root: ET.Element) -> str:
    """Feeds an early layer's input from a later layer's output."""
    edges = root.findall("./edges/edge")
    order = {layer.get("id"): i for i, layer in enumerate(_layers(root))}
    edge = rng.choice(edges)
    later = [
        e for e in edges if order.get(e.get("from-layer"), 0) > order.get(e.get("to-layer"), 0)
    ]
    source = rng.choice(later or edges)
    edge.set("from-layer", source.get("to-layer"))
    edge.set("from-port", str(rng.choice((0, 1, 2, 3))))
    return f"edge into layer {edge.get('to-layer')} now from layer {source.get('to-layer')}"


def _const(rng: random.Random, root: ET.Element) -> str:
    consts = [layer for layer in _layers(root) if layer.get("type") == "Const"]
    if not consts:
        return _attribute(rng, root)
    data = rng.choice(consts).find("data")
    key = rng.choice(("offset", "size", "element_type", "shape"))
    old = data.get(key, "")
    if key == "element_type":
        new = rng.choice(("f32", "f16", "i8", "u8", "i64", "boolean", "u1", "q7", ""))
    elif key == "shape":
        new = rng.choice(("", "1", "0", "2,2", "-1", "?"))
    else:
        base = int(old) if old.isdigit() else 0
        new = str(rng.choice((base + 1, base - 1, base * 2, -4, 0, 10**12, base + 4)))
    data.set(key, new)
    return f"Const {key} '{old}' -> '{new}'"


def _retype(rng: random.Random, root: ET.Element) -> str:
    layer = rng.choice(_layers(root))
    old = layer.get("type")
    new = rng.choice(LAYER_TYPES)
    layer.set("type", new)
    return f"layer {layer.get('id')} type {old} -> {new}"


def _reversion(rng: random.Random, root: ET.Element) -> str:
    layer = rng.choice(_layers(root))
    old = layer.get("version")
    new = rng.choice(VERSIONS)
    layer.set("version", new)
    return f"layer {layer.get('id')} version {old} -> {new}"


def _drop_port(rng: random.Random, root: ET.Element) -> str:
    ports = [
        (layer, section, port)
        for layer in _layers(root)
        for section in layer
        if section.tag in ("input", "output")
        for port in section.findall("port")
    ]
    layer, section, port = rng.choice(ports)
    section.remove(port)
    if rng.random() < 0.5:  # also drop the edge, leaving no dangling reference
        end = "to" if section.tag == "input" else "from"
        edges = root.find("edges")
        for edge in edges.findall("edge"):
            if edge.get(f"{end}-layer") == layer.get("id") and edge.get(f"{end}-port") == port.get(
                "id"
            ):
                edges.remove(edge)
    return f"layer {layer.get('id')} {section.tag} port {port.get('id')} dropped"


def mutate_ir(xml_text: str, weights: bytes, seed: int, kinds=IR_KINDS) -> IRMutant:
    """One seeded mutation of the IR ``xml_text`` + ``weights``."""
    rng = random.Random(seed)
    kind = rng.choice(kinds)
    if kind in ("bin_flip", "bin_truncate") and weights:
        data = bytearray(weights)
        if kind == "bin_flip":
            for _ in range(rng.randint(1, 8)):
                position = rng.randrange(len(data))
                data[position] ^= 1 << rng.randrange(8)
            return IRMutant(xml_text, bytes(data), kind, "flipped weight bits")
        size = rng.randrange(len(data))
        return IRMutant(xml_text, bytes(data[:size]), kind, f"weights truncated to {size}")
    root = ET.fromstring(xml_text)
    mutate = {
        "attribute": _attribute,
        "dim": _dim,
        "edge": _edge,
        "cycle": _cycle,
        "const": _const,
        "type": _retype,
        "version": _reversion,
        "drop_port": _drop_port,
    }.get(kind, _attribute)
    description = mutate(rng, root)
    return IRMutant(ET.tostring(root, encoding="unicode"), weights, kind, description)


# -- ONNX ------------------------------------------------------------------------------


def _odd_attribute(rng: random.Random, attr: onnx.AttributeProto) -> str:
    kind = attr.type
    if kind == onnx.AttributeProto.INT:
        attr.i = rng.choice((0, -1, -5, 1, 3, 2**40, -(2**62)))
    elif kind == onnx.AttributeProto.INTS:
        values = list(attr.ints)
        choice = rng.random()
        if choice < 0.3 and values:
            values = values[:-1]
        elif choice < 0.6:
            values = [*values, rng.choice((0, 1, -1))]
        else:
            values = [rng.choice((0, -1, 2, 1000)) for _ in values]
        del attr.ints[:]
        attr.ints.extend(values)
    elif kind == onnx.AttributeProto.STRING:
        attr.s = rng.choice((b"", b"depth_first", b"blocks_first", b"DCR", b"x", b"CRD"))
    elif kind == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice((0.0, -1.0, float("nan"), float("inf")))
    else:
        attr.type = rng.choice((onnx.AttributeProto.INT, onnx.AttributeProto.STRING))
    return f"attribute {attr.name}"


def mutate_onnx(model: onnx.ModelProto, seed: int, kinds=ONNX_KINDS) -> tuple[bytes, str]:
    """One seeded mutation of ``model``'s attributes, initializers or declared shapes;
    returns the serialized mutant and what changed."""
    rng = random.Random(seed)
    mutant = onnx.ModelProto()
    mutant.CopyFrom(model)
    graph = mutant.graph
    kind = rng.choice(kinds)
    described = kind
    if kind == "attribute" and any(node.attribute for node in graph.node):
        node = rng.choice([n for n in graph.node if n.attribute])
        attr = rng.choice(list(node.attribute))
        if rng.random() < 0.2:
            node.attribute.remove(attr)
            described = f"node {node.name} attribute {attr.name} removed"
        else:
            described = f"node {node.name} " + _odd_attribute(rng, attr)
    elif kind == "initializer" and len(graph.initializer):
        tensor = rng.choice(list(graph.initializer))
        array = numpy_helper.to_array(tensor)
        choice = rng.random()
        if choice < 0.3 and array.size:
            flat = array.reshape(-1).copy()
            flat[rng.randrange(flat.size)] = rng.choice((0, -1, 1, 7, -3, 100))
            array = flat.reshape(array.shape)
        elif choice < 0.6:
            array = np.asarray([rng.choice((0, 1, 2, -1))] * rng.randint(0, 5), array.dtype)
        elif choice < 0.8:
            array = array.astype(rng.choice((np.int32, np.float32, np.int8)))
        else:
            array = array.reshape(-1)[: rng.randint(0, max(array.size - 1, 0))]
        tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
        described = f"initializer {tensor.name} -> {array.dtype}{list(array.shape)}"
    elif kind == "shape" and len(graph.input):
        value = rng.choice([*graph.input, *graph.output])
        dims = value.type.tensor_type.shape.dim
        if len(dims) and rng.random() < 0.7:
            dim = rng.choice(list(dims))
            dim.Clear()
            if rng.random() < 0.8:
                dim.dim_value = rng.choice((0, 1, 2, 3, 5, 16))
            else:
                dim.dim_param = "N"
        elif len(dims):
            del dims[-1]
        described = f"shape of {value.name}"
    elif kind == "elem_type" and len(graph.input):
        value = rng.choice([*graph.input, *graph.output])
        value.type.tensor_type.elem_type = rng.choice((0, 2, 6, 7, 9, 10, 16, 39))
        described = f"elem_type of {value.name}"
    elif len(graph.node):
        node = rng.choice(list(graph.node))
        if len(node.input):
            del node.input[-1]
        described = f"node {node.name} lost its last input"
    if rng.random() < 0.1:  # sometimes also an ONNX opset the lowering must convert from
        for entry in mutant.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = rng.choice((11, 13, 17, 21))
    return mutant.SerializeToString(), described


def tiny_models() -> list[onnx.ModelProto]:
    """Generated ONNX models holding each data-movement op, with static and run-time
    index inputs."""
    from b2s_onnx.builders import single_op_model

    b2s = {"block_shape": [1, 2, 2, 1], "crops_begin": [0, 1, 0, 0], "crops_end": [0, 0, 1, 0]}
    s2b = {"block_shape": [1, 2, 2, 1], "pads_begin": [0, 0, 0, 0], "pads_end": [0, 0, 0, 1]}
    models = [
        single_op_model("BatchToSpace", [4, 3, 4, 2], index=b2s),
        single_op_model("BatchToSpace", ["N", 3, 4, 2], index=dict.fromkeys(b2s, "runtime")),
        single_op_model("SpaceToBatch", [1, 2, 4, 3], index=s2b),
        single_op_model(
            "DepthToSpace", [1, 8, 2, 3], attributes={"block_size": 2, "mode": "depth_first"}
        ),
        single_op_model(
            "SpaceToDepth", [1, 2, 4, 6], attributes={"block_size": 2, "mode": "blocks_first"}
        ),
    ]
    sandwich = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Relu", ["x"], ["r"], name="relu"),
                helper.make_node(
                    "DepthToSpace",
                    ["r"],
                    ["d"],
                    name="d2s",
                    domain="org.openvinotoolkit",
                    block_size=2,
                    mode="blocks_first",
                ),
                helper.make_node("Transpose", ["d"], ["y"], name="t", perm=[0, 1, 3, 2]),
            ],
            "sandwich",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 2, 3])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 6, 4])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)],
    )
    sandwich.ir_version = 8
    return [*models, sandwich]
