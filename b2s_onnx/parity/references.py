"""Which reference computes the expected outputs of an ONNX model, and running it.

``onnxruntime`` (the default) isolates the lowering: see :mod:`b2s_onnx.parity.partitioned`.
``onnx`` is an independent second opinion: onnx's reference evaluator runs the whole model
(with our numpy ops for the custom nodes), slower and rounding differently from onnxruntime,
so float models need tolerances under it. A failure of a reference is reported as that
reference's failure (bad input, exit 2), never as a bug of the lowering.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from b2s_onnx.errors import B2SError
from b2s_onnx.parity.partitioned import (
    ONNX_REFERENCE,
    ReferenceRun,
    custom_nodes_in_bodies,
    run_partitioned,
)
from b2s_onnx.parity.runtime import first_line

#: ``--reference`` choices for ONNX models ("openvino" exists only for IR models).
ONNX_REFERENCES = ("auto", "onnxruntime", "onnx")


def run_onnx_reference(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    domains: Sequence[str],
    detail: str = "onnx's reference evaluator ran the whole model",
    other: str = "onnxruntime",
) -> ReferenceRun:
    from onnx.reference import ReferenceEvaluator  # slow to import; only when asked for

    from b2s_onnx.parity.reference_ops import reference_ops

    try:
        evaluator = ReferenceEvaluator(model, new_ops=reference_ops(domains))
        results = evaluator.run(None, dict(feeds))
    except B2SError:
        raise
    except Exception as exc:
        raise B2SError(
            f"reference {ONNX_REFERENCE} failed ({type(exc).__name__}: {first_line(exc)}); "
            f"this is the reference's own failure: try --reference {other}"
        ) from exc
    names = [o.name for o in model.graph.output]
    return ReferenceRun(dict(zip(names, results, strict=True)), ONNX_REFERENCE, detail)


def run_reference(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    domains: Sequence[str],
    reference: str = "auto",
) -> ReferenceRun:
    """Expected outputs of ``model`` under ``reference`` ("auto", "onnxruntime", "onnx")."""
    if reference not in ONNX_REFERENCES:
        raise B2SError(
            f"reference '{reference}' does not apply to an ONNX model "
            f"({', '.join(ONNX_REFERENCES)}; openvino is for IR .xml models)"
        )
    if reference == "onnx":
        return run_onnx_reference(model, feeds, domains)
    nested = custom_nodes_in_bodies(model.graph, domains)
    if nested:
        return run_onnx_reference(
            model,
            feeds,
            domains,
            f"{nested} custom node(s) inside If/Loop/Scan bodies cannot be cut out, so "
            "onnx's reference evaluator ran the whole model",
        )
    return run_partitioned(model, feeds, domains)
