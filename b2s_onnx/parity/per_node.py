"""Per-node parity of a lowered ONNX model: does each lowered subgraph compute its op?

The lowering keeps every custom node's input and output names, so the lowered model run in
onnxruntime with those tensors exposed shows, for each node, exactly what its replacement
subgraph was fed and what it produced. The op's numpy reference (``b2s_onnx.ops``) applied
to those same inputs must give the same bits: data movement is exact. Inputs are what the
lowered graph saw, so a subgraph that differs is the culprit by construction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.graph.types import constant_values
from b2s_onnx.ops import OP_MODULES, NodeRef
from b2s_onnx.parity.compare import compare
from b2s_onnx.parity.exposure import exposable, run_exposed
from b2s_onnx.parity.per_layer import FIRST_LIMIT, LayerReport, PerLayerResult

#: Exposed tensors of one run may take this many bytes; more nodes run in chunks.
DEFAULT_BUDGET = 256 << 20


def _reference(node: onnx.NodeProto, values: list[np.ndarray]) -> np.ndarray:
    module = OP_MODULES[node.op_type]
    ref = NodeRef(node.op_type, node.name or node.op_type)
    if hasattr(module, "INDEX_ROLES"):
        return module.reference(*values[:4], node=ref)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"blocks_first")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    return module.reference(values[0], int(attrs.get("block_size", 1)), mode, node=ref)


def _report(node: onnx.NodeProto, status: str, **fields) -> LayerReport:
    return LayerReport(node.name, node.name, node.op_type, 0, node.output[0], status, **fields)


def compare_nodes(
    original: onnx.ModelProto,
    lowered: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    domains: Sequence[str],
    *,
    budget: int = DEFAULT_BUDGET,
) -> PerLayerResult:
    """Each custom node of ``original`` against its lowered subgraph in ``lowered``."""
    start = time.perf_counter()
    nodes = [n for n in original.graph.node if n.domain in domains and n.op_type in OP_MODULES]
    infos = exposable(lowered)
    # Index inputs a static lowering consumed are gone from the lowered model: the
    # original's constants hold them.
    constants = {**constant_values(original), **constant_values(lowered)}
    reports: list[LayerReport] = []
    skipped: list[LayerReport] = []
    planned: list[tuple[onnx.NodeProto, list[str]]] = []
    for node in nodes:
        names = [n for n in (*node.input, node.output[0]) if n]
        missing = [n for n in names if n not in infos and n not in constants]
        if missing:
            skipped.append(
                _report(node, "not-compared", reason=f"lowered model lacks {missing[0]!r}")
            )
        else:
            planned.append((node, names))
    chunks: list[list[tuple[onnx.NodeProto, list[str]]]] = [[]]
    used = estimated = 0
    for node, names in planned:
        size = sum(_bytes(infos.get(n)) for n in names)
        estimated += size
        if chunks[-1] and used + size > budget:
            chunks.append([])
            used = 0
        chunks[-1].append((node, names))
        used += size
    runs = 0
    for chunk in chunks:
        if not chunk:
            continue
        wanted = [n for _, names in chunk for n in names if n not in constants]
        values = run_exposed(lowered, feeds, wanted, infos)
        runs += 1
        for node, names in chunk:
            arrays = [values[n] if n in values else constants[n] for n in names]
            expected, actual = _reference(node, arrays[:-1]), arrays[-1]
            diff = compare(expected, actual, 0.0, 0.0)
            outside = diff.mismatches if diff.mismatches >= 0 else expected.size
            reports.append(
                _report(
                    node,
                    "ok" if diff.passed else "diverged",
                    expected_shape=list(expected.shape),
                    actual_shape=list(actual.shape),
                    max_abs_error=diff.max_abs_error,
                    max_rel_error=diff.max_rel_error,
                    fraction_outside=outside / expected.size if expected.size else 0.0,
                    inputs_agree=True,
                    reason=diff.reason,
                )
            )
        del values
    diverged = [r for r in reports if r.status == "diverged"]
    return PerLayerResult(
        strategy="single-run" if runs <= 1 else "chunked",
        runs=runs,
        budget_bytes=budget,
        estimated_bytes=estimated,
        compared=len(reports),
        diverged=len(diverged),
        first=diverged[:FIRST_LIMIT],
        culprits=[r.layer_id for r in diverged],
        not_compared=skipped,
        layers=reports,
        seconds=time.perf_counter() - start,
    )


def _bytes(info) -> int:
    if info is None or info.shape is None or any(d is None for d in info.shape):
        return 0
    itemsize = helper.tensor_dtype_to_np_dtype(info.elem_type).itemsize if info.elem_type else 4
    return int(np.prod(info.shape, dtype=np.int64)) * itemsize
