"""Telling an IR that contradicts itself (bad input, exit 2) from a converter bug (exit 3).

An IR states every tensor's shape twice: on the producer's output port and on each
consumer's input port, and a Const or Parameter states it a third time in its ``shape``
attribute; each end of an edge also states the element type. When those disagree the
file contradicts itself, whichever is right, so that is refused before conversion. Once
every edge agrees, a converted output shape that differs from the declared one means either
our converter computes the op wrongly or the layer's declared output breaks the op's own
shape rule. OpenVINO (when installed) arbitrates: it re-derives every output shape from the
inputs when it reads the IR, so if its shape is the one we computed, or a third one, the
declaration is wrong (bad input); if it agrees with the declaration, the bug is ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.types import TensorInfo, infer_infos
from b2s_onnx.ir.reader import IRModel, Layer, parse_shape
from b2s_onnx.ir.weights import element_type

Dims = Sequence[int | None]


class ConversionMismatchError(RuntimeError):
    """A converted tensor's shape differs from the IR's, and OpenVINO derives the IR's
    shape too: a bug in a converter (exit 3)."""


def agree(first: Dims | None, second: Dims | None) -> bool:
    """Same rank and the same size wherever both state one (unknown dims match anything)."""
    if first is None or second is None:
        return True
    if len(first) != len(second):
        return False
    return all(a is None or b is None or a == b for a, b in zip(first, second, strict=True))


def shown(dims: Dims | None) -> str:
    return (
        "[...]"
        if dims is None
        else "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"
    )


def check_declared_shapes(ir: IRModel) -> None:
    """Refuses an IR whose two ends of an edge, or a Const/Parameter and its ``shape``
    attribute, declare different shapes, naming both ends; in TensorIterator/Loop/If
    bodies too (a body Parameter's ports are what its subgraph input is declared as)."""
    for layer in ir.layers.values():
        for tag, body in layer.bodies.items():
            try:
                check_declared_shapes(body)
            except B2SError as error:
                raise B2SError(f"{layer.where()}, {tag}: {error}") from None
    for layer in ir.layers.values():
        if layer.type in ("Const", "Parameter") and "shape" in layer.data and layer.outputs:
            stated = parse_shape(layer.data["shape"], ir.path, layer.where())
            port = layer.outputs[0]
            if not agree(stated, port.dims):
                raise B2SError(
                    f"{layer.where()}: output port {port.id} declares {shown(port.dims)} but "
                    f"the layer's shape attribute says {shown(stated)}: the IR contradicts itself"
                )
            typed = _element_type(layer.data.get("element_type"))
            made = _element_type(port.precision)
            if typed and made and typed != made:
                raise B2SError(
                    f"{layer.where()}: output port {port.id} declares element type {made} but "
                    f"the layer's element_type attribute says {typed}: the IR contradicts itself"
                )
    for edge in ir.edges:
        source, target = ir.layers[edge.from_layer], ir.layers[edge.to_layer]
        made_port = source.output_port(edge.from_port)
        taken_port = next(p for p in target.inputs if p.id == edge.to_port)
        produced, consumed = made_port.dims, taken_port.dims
        if not agree(produced, consumed):
            raise B2SError(
                f"{target.where()}: input port {edge.to_port} declares {shown(consumed)} but "
                f"{source.where()} output port {edge.from_port}, which feeds it, declares "
                f"{shown(produced)}: the IR contradicts itself"
            )
        made, taken = _element_type(made_port.precision), _element_type(taken_port.precision)
        if made and taken and made != taken:
            # Converters type a layer's outputs by its ports; a consumer told f32 that is fed
            # i32 would be written with the wrong type.
            raise B2SError(
                f"{target.where()}: input port {edge.to_port} declares element type {taken} but "
                f"{source.where()} output port {edge.from_port}, which feeds it, declares "
                f"{made}: the IR contradicts itself"
            )


def _element_type(precision: str | None) -> str | None:
    """A port's precision as an element type; None when unstated, dynamic or unknown
    (unknown names are refused where the type is used)."""
    if precision is None or precision.upper() in ("UNSPECIFIED", "DYNAMIC", "UNDEFINED"):
        return None
    try:
        return element_type(precision, "")
    except B2SError:
        return None


def read_with_openvino(xml: Path, bin_path: Path | None):
    """(OpenVINO's model, None), (None, why OpenVINO refuses the IR), or (None, None) when
    OpenVINO is not installed."""
    try:
        import openvino as ov
    except ImportError:
        return None, None
    try:
        return ov.Core().read_model(str(xml), None if bin_path is None else str(bin_path)), None
    except Exception as exc:  # OpenVINO refusing the file is an answer, not our failure
        lines = [line for line in str(exc).splitlines() if line.strip()]
        reason = next((line for line in lines if not line.startswith("Check ")), None)
        return None, (reason or type(exc).__name__).strip()[:300]


def openvino_shape(xml: Path, bin_path: Path | None, layer: Layer, index: int):
    """The shape OpenVINO derives for the layer's output ``index``: a list (None for a
    dynamic dim), the string OpenVINO refused the IR with, or None when it cannot tell."""
    model, refusal = read_with_openvino(xml, bin_path)
    if model is None:
        return refusal
    for op in model.get_ops():
        if op.get_friendly_name() == layer.name and index < op.get_output_size():
            shape = op.get_output_partial_shape(index)
            if shape.rank.is_dynamic:
                return None
            return [d.get_length() if d.is_static else None for d in shape]
    return None


def shape_disagreement(
    ir: IRModel,
    layer: Layer,
    index: int,
    computed: Dims,
    declared: Dims,
    bin_path: Path | None,
) -> Exception:
    """The error for a converted output shape that differs from the declared one: bad
    input when OpenVINO's shape rules give our shape (or refuse the IR), our bug when they
    give the declared one or cannot be asked."""
    port = layer.outputs[index].id
    derived = openvino_shape(ir.path, bin_path, layer, index)
    facts = (
        f"{layer.where()}: output port {port} declares {shown(declared)}, but its inputs' "
        f"declared shapes give {shown(computed)}"
    )
    if isinstance(derived, str):
        return B2SError(f"{facts} (OpenVINO refuses the IR too: {derived})")
    if derived is not None and agree(derived, computed) and not agree(derived, declared):
        return B2SError(f"{facts} by the op's shape rule: the IR contradicts itself")
    if derived is not None and not agree(derived, declared):
        # Neither agrees: the declaration is still not what OpenVINO's shape rules give.
        return B2SError(
            f"{facts}, and OpenVINO's shape rules give {shown(derived)}: the IR contradicts itself"
        )
    return ConversionMismatchError(
        f"{facts}; this is a bug in b2s_onnx's {layer.type} converter, please report it"
    )


def computed_infos(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    """The shapes the nodes compute. The graph outputs carry the shapes the IR declares,
    and shape inference would keep those over what it computes, so they are left out while
    inferring (and put back)."""
    graph = model.graph
    saved = []
    for output in graph.output:
        kept = onnx.ValueInfoProto()
        kept.CopyFrom(output)
        saved.append(kept)
    bare = [
        onnx.helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None)
        for o in saved
    ]
    del graph.output[:]
    graph.output.extend(bare)
    try:
        return infer_infos(model)
    finally:
        del graph.output[:]
        graph.output.extend(saved)
