"""The reference that isolates the lowering: the original model's standard ops run in
onnxruntime (the same kernels the lowered model uses), and only the custom nodes run through
our numpy references.

The graph is cut at the custom nodes: each standard node belongs to the stage given by the
number of custom nodes on its longest path from the inputs, a custom node runs between the
stages, so the run costs one onnxruntime session per stage (two for the usual model with its
custom nodes side by side) plus the numpy references. Then everything the lowering did not
touch is computed by the very same kernels on both sides, and a pure data-movement lowering
must agree bit for bit; a model with nothing to lower is one onnxruntime stage and agrees
trivially.

Custom nodes inside If/Loop/Scan bodies cannot be cut out of their body; such a model runs
in onnx's reference evaluator instead, and the result says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.types import decode_tensor
from b2s_onnx.graph.walk import outer_reads, subgraphs
from b2s_onnx.ops import OP_MODULES, NodeRef
from b2s_onnx.parity.runtime import first_line, run_onnxruntime

#: What the report calls each reference.
PARTITIONED = "onnxruntime+numpy-ops"
ONNX_REFERENCE = "onnx-reference"


@dataclass(frozen=True)
class ReferenceRun:
    outputs: dict[str, np.ndarray]
    label: str
    detail: str


def is_custom(node: onnx.NodeProto, domains: Sequence[str]) -> bool:
    return node.domain in domains and node.op_type in OP_MODULES


def custom_nodes_in_bodies(graph: onnx.GraphProto, domains: Sequence[str]) -> int:
    """How many custom nodes sit inside If/Loop/Scan bodies (at any depth)."""
    count = 0
    for node in graph.node:
        for body in subgraphs(node):
            count += sum(is_custom(n, domains) for n in body.node)
            count += custom_nodes_in_bodies(body, domains)
    return count


def _reads(node: onnx.NodeProto) -> set[str]:
    return ({n for n in node.input if n}) | outer_reads(node)


def _run_custom(node: onnx.NodeProto, values: Mapping[str, np.ndarray]) -> np.ndarray:
    module = OP_MODULES[node.op_type]
    ref = NodeRef(node.op_type, node.name or node.op_type)
    args = [values[name] for name in node.input]
    if hasattr(module, "INDEX_ROLES"):
        return module.reference(*args, node=ref)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    return module.reference(args[0], int(attrs.get("block_size", 1)), mode, node=ref)


def _elem_type(array: np.ndarray) -> int:
    if array.dtype == ml_dtypes.bfloat16:
        return onnx.TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def _stage_model(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    values: Mapping[str, np.ndarray],
    initializers: Mapping[str, onnx.TensorProto],
    outputs: list[str],
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of ``nodes`` alone: what they read from earlier stages becomes its inputs."""
    produced = {o for n in nodes for o in n.output}
    reads = set().union(*(_reads(n) for n in nodes)) - produced
    feeds = {name: values[name] for name in sorted(reads) if name in values}
    graph = helper.make_graph(
        nodes,
        f"{model.graph.name}_stage",
        [
            helper.make_tensor_value_info(name, _elem_type(a), list(a.shape))
            for name, a in feeds.items()
        ],
        [onnx.ValueInfoProto(name=name) for name in outputs],
        [initializers[name] for name in sorted(reads - set(feeds)) if name in initializers],
    )
    stage = helper.make_model(graph, opset_imports=list(model.opset_import))
    stage.ir_version = model.ir_version
    stage.functions.extend(model.functions)
    return stage, feeds


def run_partitioned(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], domains: Sequence[str]
) -> ReferenceRun:
    """The original's outputs: standard ops in onnxruntime, custom nodes in numpy."""
    graph = model.graph
    names = [o.name for o in graph.output]
    returned = set(names)
    customs = [n for n in graph.node if is_custom(n, domains)]
    if not customs:
        outputs = _onnxruntime(model, feeds)
        return ReferenceRun(outputs, PARTITIONED, "nothing to lower: one onnxruntime run")
    stage_of: dict[str, int] = {}
    stages: list[tuple[int, bool]] = []  # per node: its stage, and whether it is custom
    for node in graph.node:
        stage = max((stage_of.get(name, 0) for name in _reads(node)), default=0)
        custom = is_custom(node, domains)
        stages.append((stage, custom))
        stage_of.update(dict.fromkeys(node.output, stage + 1 if custom else stage))
    readers: dict[str, set[tuple[int, bool]]] = defaultdict(set)
    for node, place in zip(graph.node, stages, strict=True):
        for name in _reads(node):
            readers[name].add(place)
    initializers = {t.name: t for t in graph.initializer}
    values: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in feeds.items()}
    runs = 0
    for stage in range(max(s for s, _ in stages) + 1):
        nodes = [n for n, place in zip(graph.node, stages, strict=True) if place == (stage, False)]
        outputs = sorted(
            name
            for n in nodes
            for name in n.output
            if name in returned or readers.get(name, set()) - {(stage, False)}
        )
        if outputs:
            stage_model, stage_feeds = _stage_model(model, nodes, values, initializers, outputs)
            values.update(_onnxruntime(stage_model, stage_feeds))
            runs += 1
        for node, place in zip(graph.node, stages, strict=True):
            if place == (stage, True):
                for name in node.input:
                    if name not in values and name in initializers:
                        values[name] = decode_tensor(initializers[name])
                values[node.output[0]] = np.asarray(_run_custom(node, values))
    detail = f"{runs} onnxruntime stage(s), {len(customs)} custom node(s) in numpy"
    for name in names:
        if name not in values and name in initializers:
            values[name] = decode_tensor(initializers[name])
    return ReferenceRun({name: values[name] for name in names}, PARTITIONED, detail)


def _onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict:
    try:
        return run_onnxruntime(model, feeds)
    except Exception as exc:
        raise B2SError(
            f"reference {PARTITIONED} failed: onnxruntime could not run the original model's "
            f"standard ops ({first_line(exc)}); try --reference onnx"
        ) from exc
