"""Running an ONNX model in onnxruntime with intermediate tensors exposed as outputs.

The extra outputs are appended to the model's own graph and removed again afterwards, so
no copy of the weights is made; tensors whose element type shape inference cannot tell
cannot be declared as outputs and are reported as such by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.graph.types import TensorInfo, infer_infos
from b2s_onnx.parity.runtime import run_onnxruntime


def exposable(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    """Tensors computed by ``model`` that onnxruntime can return, with their types."""
    infos = infer_infos(model)
    produced = {o for node in model.graph.node for o in node.output if o}
    produced |= {v.name for v in model.graph.input}
    return {
        name: info
        for name, info in infos.items()
        if name in produced and info.elem_type not in (0, onnx.TensorProto.UNDEFINED)
    }


def run_exposed(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    tensors: Iterable[str],
    infos: Mapping[str, TensorInfo],
) -> dict[str, np.ndarray]:
    """Runs ``model`` returning ``tensors`` (and its own outputs)."""
    outputs = model.graph.output
    present = {o.name for o in outputs}
    graph_inputs = {v.name for v in model.graph.input}
    extra = [t for t in dict.fromkeys(tensors) if t not in present and t not in graph_inputs]
    before = len(outputs)
    outputs.extend(helper.make_tensor_value_info(t, infos[t].elem_type, None) for t in extra)
    try:
        results = run_onnxruntime(model, feeds)
    finally:
        del outputs[before:]
    for name in tensors:
        if name in graph_inputs and name in feeds:
            results[name] = np.asarray(feeds[name])
    return results
