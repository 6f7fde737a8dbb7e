"""``inspect``: what a model holds and what lowering or conversion would do to it.

ONNX models are read through onnx-graphsurgeon's graph view (ops with their domains,
typed inputs and outputs, nested graphs); the custom nodes' plan comes from running the
lowering on a copy, so the report says exactly what ``lower`` would produce, and names a
node that cannot be lowered instead of failing the whole report.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs

from b2s_onnx.errors import B2SError, OpValidationError
from b2s_onnx.lowering import DEFAULT_DOMAINS, RULES, LoweringOptions, lower_model


@dataclass
class TensorSummary:
    name: str
    dtype: str
    shape: list[int | str] | None


@dataclass
class CustomNode:
    name: str
    op_type: str
    domain: str
    static: bool | None
    lowering: list[str]
    error: str | None = None


@dataclass
class InspectReport:
    path: str | None
    kind: str
    ir_version: int
    opsets: dict[str, int]
    op_counts: dict[str, int]
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    custom_nodes: list[CustomNode] = field(default_factory=list)
    size_bytes: int = 0
    unsupported: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _tensor(variable: gs.Variable) -> TensorSummary:
    dtype = (
        "unknown"
        if variable.dtype is None
        else str(getattr(variable.dtype, "__name__", variable.dtype))
    )
    shape = (
        None
        if variable.shape is None
        else [d if isinstance(d, int) else str(d) for d in variable.shape]
    )
    return TensorSummary(variable.name, dtype, shape)


def _walk(graph: gs.Graph):
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            subgraphs = value if isinstance(value, list) else [value]
            for sub in subgraphs:
                if isinstance(sub, gs.Graph):
                    yield from _walk(sub)


def _qualified(node: gs.Node) -> str:
    return f"{node.domain}::{node.op}" if node.domain not in (None, "", "ai.onnx") else node.op


def inspect_onnx(
    model: onnx.ModelProto, path: str | None = None, domains: tuple[str, ...] = DEFAULT_DOMAINS
) -> InspectReport:
    graph = gs.import_onnx(model)
    nodes = list(_walk(graph))
    report = InspectReport(
        path=path,
        kind="onnx",
        ir_version=model.ir_version,
        opsets={entry.domain or "ai.onnx": entry.version for entry in model.opset_import},
        op_counts=dict(sorted(Counter(_qualified(n) for n in nodes).items())),
        inputs=[_tensor(v) for v in graph.inputs],
        outputs=[_tensor(v) for v in graph.outputs],
        size_bytes=model.ByteSize(),
    )
    custom = [n for n in nodes if n.domain in domains and n.op in RULES]
    if not custom:
        return report
    try:
        plans = {
            n.name: n
            for n in lower_model(model, domains=domains, options=LoweringOptions()).lowered
        }
        failure = None
    except B2SError as exc:
        plans, failure = {}, exc
    for node in custom:
        plan = plans.get(node.name)
        error = None
        if plan is None and failure is not None:
            blamed = isinstance(failure, OpValidationError) and failure.node_name == node.name
            error = (
                str(failure)
                if blamed or not isinstance(failure, OpValidationError)
                else "not lowered: another node is invalid"
            )
        report.custom_nodes.append(
            CustomNode(
                name=node.name,
                op_type=node.op,
                domain=node.domain,
                static=None if plan is None else plan.static,
                lowering=[] if plan is None else list(plan.replacement),
                error=error,
            )
        )
    return report


def inspect_ir(xml_path: str | os.PathLike) -> InspectReport:
    from b2s_onnx.ir.converters import find
    from b2s_onnx.ir.reader import read_ir_xml

    ir = read_ir_xml(xml_path)
    layers = list(ir.layers.values())
    counts = Counter(f"{layer.type}-{layer.version}" for layer in layers)
    unsupported = [
        f"{layer.type}-{layer.version} '{layer.name}'"
        for layer in layers
        if layer.type not in ("Const", "Parameter", "Result") and find(layer) is None
    ]

    def port_summary(layer, port) -> TensorSummary:
        name = port.names[0] if port.names else layer.name
        dims = None if port.dims is None else [d if d is not None else "?" for d in port.dims]
        return TensorSummary(
            name, (port.precision or layer.data.get("element_type", "?")).lower(), dims
        )

    inputs = [
        port_summary(layer, layer.outputs[0]) for layer in layers if layer.type == "Parameter"
    ]
    outputs = []
    for layer in layers:
        if layer.type == "Result":
            source_layer, source_port = ir.sources[(layer.id, layer.inputs[0].id)]
            producer = ir.layers[source_layer]
            outputs.append(port_summary(producer, producer.output_port(source_port)))
    custom = [
        CustomNode(layer.name, layer.type, "openvino", None, [])
        for layer in layers
        if layer.type in RULES
    ]
    return InspectReport(
        path=str(xml_path),
        kind="openvino-ir",
        ir_version=ir.version,
        opsets={},
        op_counts=dict(sorted(counts.items())),
        inputs=inputs,
        outputs=outputs,
        custom_nodes=custom,
        size_bytes=Path(xml_path).stat().st_size,
        unsupported=unsupported,
    )


def inspect(
    model: onnx.ModelProto | str | os.PathLike, domains: tuple[str, ...] = DEFAULT_DOMAINS
) -> InspectReport:
    """Summarises an ONNX model (ModelProto or path) or an OpenVINO IR (.xml path)."""
    if isinstance(model, onnx.ModelProto):
        return inspect_onnx(model, None, domains)
    path = Path(model)
    if path.suffix.lower() == ".xml":
        return inspect_ir(path)
    from b2s_onnx.io import load_model

    return inspect_onnx(load_model(path), str(path), domains)
