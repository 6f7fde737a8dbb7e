"""Parity of a converted IR: OpenVINO's CPU plugin (when the package is installed) or, without
it, onnx's reference evaluator on the converted graph before lowering, vs onnxruntime."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.port_map import PortMap
from b2s_onnx.parity.check import CheckResult, Tolerance, finish_check
from b2s_onnx.parity.inputs import make_inputs
from b2s_onnx.parity.reference_ops import reference_ops

#: A converted IR computes float math in another runtime: last-bit differences are expected.
IR_ATOL = 1e-4
IR_RTOL = 1e-3


def openvino_available() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def _run_openvino(
    xml: Path, bin_path: Path | None, feeds: Mapping[str, np.ndarray], names: Sequence[str]
) -> dict[str, np.ndarray]:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(xml), None if bin_path is None else str(bin_path))
    # The CPU plugin runs bf16 on AMX/AVX512-BF16 machines unless told otherwise.
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    by_name = {}
    for port in compiled.inputs:
        match = [n for n in feeds if n in port.get_names()]
        if not match:
            raise B2SError(f"OpenVINO input {sorted(port.get_names())} has no converted input")
        by_name[port] = feeds[match[0]]
    results = compiled(by_name)
    outputs = {}
    for port in compiled.outputs:
        match = [n for n in names if n in port.get_names()]
        if match:
            outputs[match[0]] = np.asarray(results[port])
    return outputs


def check_ir(
    xml_path: str | os.PathLike,
    converted: onnx.ModelProto,
    *,
    bin_path: str | os.PathLike | None = None,
    unlowered: onnx.ModelProto | None = None,
    reference: str = "auto",
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    dim_sizes: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    atol: Tolerance | None = None,
    rtol: Tolerance | None = None,
    per_layer: bool = False,
    ports: PortMap | None = None,
) -> CheckResult:
    """Runs ``converted`` in onnxruntime against ``reference`` ("openvino", "onnx", "auto").

    Tolerances not given (None, 0 or empty) default to :data:`IR_ATOL` / :data:`IR_RTOL`.
    ``per_layer`` also compares every layer output against OpenVINO (``ports``: the
    conversion's port map; default: convert again) and names the first that diverge.
    """
    if reference == "auto":
        reference = "openvino" if openvino_available() else "onnx"
    if per_layer and reference != "openvino":
        raise B2SError(
            "--per-layer compares layers against OpenVINO: it needs --reference openvino"
        )
    feeds = make_inputs(
        converted, seed=seed, given=inputs, dim_sizes=dim_sizes, input_shapes=input_shapes
    )
    names = [o.name for o in converted.graph.output]
    timings = {}
    start = time.perf_counter()
    if reference == "openvino":
        if not openvino_available():
            raise B2SError(
                "--reference openvino needs the openvino package (pip install 'b2s-onnx[openvino]')"
            )
        expected = _run_openvino(
            Path(xml_path), None if bin_path is None else Path(bin_path), feeds, names
        )
        label = "openvino-cpu"
    elif reference == "onnx":
        if unlowered is None:
            raise B2SError("the onnx reference needs the converted graph before lowering")
        evaluator = ReferenceEvaluator(unlowered, new_ops=reference_ops([DEFAULT_DOMAIN]))
        expected = dict(zip(names, evaluator.run(None, feeds), strict=True))
        label = "onnx-reference"
    else:
        raise B2SError(f"unknown reference '{reference}' (openvino, onnx)")
    timings["reference_s"] = time.perf_counter() - start
    result = finish_check(
        converted,
        feeds,
        names,
        expected,
        atol or IR_ATOL,
        rtol or IR_RTOL,
        seed,
        timings,
        reference=label,
    )
    if per_layer:
        from b2s_onnx.parity.per_layer import compare_layers

        if ports is None:
            from b2s_onnx.ir.convert import convert_ir_model

            ports = convert_ir_model(xml_path, bin_path).ports
        layers = compare_layers(
            xml_path, converted, ports, feeds, bin_path=bin_path, reference_outputs=expected
        )
        result.per_layer = layers.to_dict()
        timings["per_layer_s"] = layers.seconds
    return result
