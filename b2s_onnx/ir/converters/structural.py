"""Parameter, Const and Result: the layers every IR has, checked like converters' layers.

They are not converted by a registered converter (the driver turns them into graph
inputs, initializers and outputs), but their attributes come from the same untrusted XML,
so they get a schema too, and one clear error naming the layer, the attribute and the rule.
"""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters.schema import ElementType, Int, Schema, Text, validate
from b2s_onnx.ir.reader import Layer, parse_shape

#: (attribute schema, (fewest, most) inputs) per structural layer type.
STRUCTURAL: dict[str, tuple[Schema, tuple[int, int]]] = {
    "Parameter": ({"element_type": ElementType(), "shape": Text()}, (0, 0)),
    "Const": (
        {
            "element_type": ElementType(required=True),
            "shape": Text(required=True),
            "offset": Int(required=True, minimum=0),
            "size": Int(required=True, minimum=0),
        },
        (0, 0),
    ),
    "Result": ({}, (1, 1)),
}


def check_inputs(layer: Layer, bounds: tuple[int, int]) -> None:
    """The layer's input count lies within ``bounds``; one error naming the layer if not."""
    low, high = bounds
    count = len(layer.inputs)
    if not low <= count <= high:
        wanted = str(low) if low == high else f"{low} to {high}"
        raise B2SError(f"{layer.where()}: takes {wanted} input(s), got {count}")


def check_outputs(layer: Layer) -> None:
    """Every layer but a Result produces something."""
    if layer.type != "Result" and not layer.outputs:
        raise B2SError(f"{layer.where()}: has no output port")


def check_structural(layer: Layer, path) -> bool:
    """Validates a Parameter/Const/Result layer into ``layer.attrs``; False for any other."""
    found = STRUCTURAL.get(layer.type)
    if found is None:
        return False
    schema, bounds = found
    check_inputs(layer, bounds)
    check_outputs(layer)
    layer.attrs = validate(layer, schema)
    shape = layer.attrs["shape"] if "shape" in schema else None
    if shape is not None:
        dims = parse_shape(shape, path, layer.where())
        if layer.type == "Const" and (dims is None or any(d is None for d in dims)):
            raise B2SError(
                f"{layer.where()}: attribute shape='{shape}': a Const needs a static shape"
            )
    return True
