"""``convert_ir``: an OpenVINO IR (v10/v11) as an ONNX model onnxruntime runs.

Layers are converted in topological order by the registry in ``converters``; a layer
whose inputs are all constants is evaluated at once (onnx's reference evaluator on the
nodes just emitted) and becomes a constant, which folds weight decompression, ShapeOf
chains and prior boxes. The four data-movement ops are emitted as custom-domain nodes
and lowered by the same rule registry as ``b2s_onnx.lower``. Finally every converted
shape is checked against the shapes the IR declares on its ports.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.consistency import (  # noqa: F401 - ConversionMismatchError is public here
    ConversionMismatchError,
    check_declared_shapes,
    computed_infos,
    shape_disagreement,
)
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters import find
from b2s_onnx.ir.converters.registry import prepare, registration
from b2s_onnx.ir.converters.schema import declared_only
from b2s_onnx.ir.reader import IRModel, Layer, parse_shape, read_ir_xml, topological_order
from b2s_onnx.ir.weights import Weights, element_type, onnx_type
from b2s_onnx.lowering import LoweredNode, LoweringOptions, lower_model
from b2s_onnx.validation import conversion_blame, prove

DEFAULT_OPSET = 18
#: Domain of layers written as-is with ``keep_unsupported``.
UNSUPPORTED_DOMAIN = "org.openvinotoolkit.ir"
#: Constants larger than this are not produced by folding (they would bloat the model).
FOLD_LIMIT = 1 << 24
_STRUCTURAL = ("Const", "Parameter", "Result")


@dataclass
class ConversionResult:
    model: onnx.ModelProto
    lowered: list[LoweredNode] = field(default_factory=list)
    kept_unsupported: list[str] = field(default_factory=list)
    #: The converted graph before lowering (data-movement ops still custom nodes).
    unlowered: onnx.ModelProto | None = None


def _unsupported(order: list[Layer]) -> list[Layer]:
    return [layer for layer in order if layer.type not in _STRUCTURAL and find(layer) is None]


def _parameter_info(ctx: ConversionContext, layer: Layer) -> onnx.ValueInfoProto:
    name = ctx.out(layer)
    ir_type = element_type(
        layer.data.get("element_type", layer.outputs[0].precision or ""), layer.where()
    )
    if "shape" in layer.data:
        dims = parse_shape(layer.data["shape"], ctx.model.path, layer.where())
    else:
        dims = layer.outputs[0].dims
    ctx.types[name] = onnx_type(ir_type)
    ctx.shapes[name] = dims
    shape = (
        None
        if dims is None
        else [d if d is not None else f"{name}_d{i}" for i, d in enumerate(dims)]
    )
    return helper.make_tensor_value_info(name, onnx_type(ir_type), shape)


def _fold(ctx: ConversionContext, layer: Layer, inputs: list[str], start: int) -> None:
    """Replaces the nodes just emitted for ``layer`` by constants when its inputs are."""
    emitted = ctx.nodes[start:]
    if not emitted or not all(name in ctx.constants for name in inputs):
        return
    if any(node.domain not in ("", "ai.onnx") for node in emitted):
        return
    outputs = [ctx.out(layer, i) for i in range(len(layer.outputs))]
    # Evaluate only what the IR declares small: absurd shapes must not be allocated here.
    declared = 0
    for port in layer.outputs:
        if port.dims is None or any(d is None for d in port.dims):
            return
        count = 1
        for dim in port.dims:
            count *= dim
        declared += count
    if declared > FOLD_LIMIT:
        return
    produced = {o for node in emitted for o in node.output}
    if not all(o in produced for o in outputs):
        return
    graph = helper.make_graph(
        emitted,
        "fold",
        [],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(ctx.constants[i], i) for i in dict.fromkeys(inputs)]
        + [
            ctx.initializers[n]
            for node in emitted
            for n in node.input
            if n in ctx.initializers and n not in inputs
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ctx.opset)])
    try:
        values = ReferenceEvaluator(model).run(None, {})
    except Exception:  # leave it to run time; the converted nodes are still correct
        return
    del ctx.nodes[start:]
    for name, value in zip(outputs, values, strict=True):
        ctx.add_constant(name, np.asarray(value))


def _keep_as_custom(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    outputs = [ctx.out(layer, i) for i in range(len(layer.outputs))]
    attrs = dict(layer.data)
    ctx.node(
        layer.type,
        inputs,
        outputs,
        domain=UNSUPPORTED_DOMAIN,
        hint=layer.type,
        ir_version=layer.version,
        **attrs,
    )


def _check_shapes(
    model: onnx.ModelProto, ctx: ConversionContext, order: list[Layer], bin_path: Path | None
) -> None:
    infos = computed_infos(model)
    for layer in order:
        if layer.type in _STRUCTURAL:
            continue
        for index, port in enumerate(layer.outputs):
            name = ctx.out(layer, index)
            declared = port.dims
            found = infos.get(name)
            if (
                declared is None
                or found is None
                or found.shape is None
                or any(d is None for d in declared)
                or any(d is None for d in found.shape)
            ):
                continue
            if tuple(found.shape) != tuple(declared):
                raise shape_disagreement(ctx.model, layer, index, found.shape, declared, bin_path)


def convert_ir_model(
    xml_path: str | os.PathLike,
    bin_path: str | os.PathLike | None = None,
    *,
    opset: int = DEFAULT_OPSET,
    keep_unsupported: bool = False,
    domains: Iterable[str] = (),
    options: LoweringOptions | None = None,
    progress: Callable[[], object] | None = None,
) -> ConversionResult:
    """Converts the IR; ``progress`` (if given) is called once per layer converted."""
    xml = Path(xml_path)
    ir: IRModel = read_ir_xml(xml)
    order = topological_order(ir)
    check_declared_shapes(ir)
    unsupported = _unsupported(order)
    if unsupported and not keep_unsupported:
        listed = "; ".join(f"{layer.type}-{layer.version} '{layer.name}'" for layer in unsupported)
        raise B2SError(
            f"{xml}: {len(unsupported)} unsupported layer(s): {listed} "
            "(--keep-unsupported writes them as custom-domain nodes)"
        )
    needs_weights = any(layer.type == "Const" for layer in order)
    weights_path = Path(bin_path) if bin_path is not None else xml.with_suffix(".bin")
    weights = Weights(weights_path if needs_weights or bin_path is not None else None)

    ctx = ConversionContext(ir, opset)
    for layer in order:
        if layer.type == "Parameter":
            ctx.assign_output_names(layer)
    for layer in order:
        if layer.type != "Parameter":
            ctx.assign_output_names(layer)
    graph_inputs = [_parameter_info(ctx, layer) for layer in order if layer.type == "Parameter"]

    results: list[tuple[Layer, str]] = []
    for layer in order:
        prepare(layer, ir.path)
    for layer in order:
        if progress is not None:
            progress()
        ctx.begin(layer)
        if layer.type == "Const":
            ctx.add_constant(ctx.out(layer), weights.const(layer))
            continue
        if layer.type == "Parameter":
            continue
        inputs = ctx.inputs(layer)
        if layer.type == "Result":
            if len(inputs) != 1:
                raise B2SError(f"{layer.where()}: a Result takes exactly one input")
            results.append((layer, inputs[0]))
            continue
        start = len(ctx.nodes)
        found = registration(layer)
        if found is None:
            _keep_as_custom(ctx, layer, inputs)
            continue
        with declared_only(layer, found.attrs):
            found.converter(ctx, layer, inputs)
        _fold(ctx, layer, inputs, start)

    graph_outputs = []
    taken: set[str] = set()
    for layer, tensor in results:
        name = tensor
        if tensor in taken or tensor in ctx.constants or tensor in {i.name for i in graph_inputs}:
            name = ctx.names.fresh(layer.name)
            ctx.node("Identity", [tensor], name, hint="result")
        taken.add(name)
        dims = layer.inputs[0].dims
        graph_outputs.append(
            helper.make_tensor_value_info(
                name,
                ctx.type_of(tensor),
                None
                if dims is None
                else [d if d is not None else f"{name}_d{i}" for i, d in enumerate(dims)],
            )
        )

    used = {n for node in ctx.nodes for n in node.input} | {o.name for o in graph_outputs}
    graph = helper.make_graph(
        ctx.nodes,
        ir.name,
        graph_inputs,
        graph_outputs,
        [t for name, t in ctx.initializers.items() if name in used],
    )
    imports = [helper.make_opsetid("", opset)]
    node_domains = {n.domain for n in ctx.nodes}
    imports += [helper.make_opsetid(d, 1) for d in sorted(node_domains - {""})]
    model = helper.make_model(graph, opset_imports=imports, producer_name="b2s-onnx")
    model.doc_string = f"Converted from OpenVINO IR v{ir.version} '{xml.name}'"
    lowered = lower_model(
        model,
        opset=opset,
        domains=(DEFAULT_DOMAIN, *domains),
        options=options or LoweringOptions(),
        proven=False,
    )
    # Checked after lowering: shape inference sees through the lowered data-movement ops.
    _check_shapes(lowered.model, ctx, order, weights.path)
    prove(lowered.model, conversion_blame(order, xml, weights.path))
    kept = [f"{layer.type}-{layer.version} '{layer.name}'" for layer in unsupported]
    return ConversionResult(lowered.model, lowered.lowered, kept, model)
