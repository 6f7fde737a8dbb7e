"""Parity of a converted IR: OpenVINO's CPU plugin (when the package is installed) or, without
it, onnx's reference evaluator on the converted graph before lowering, vs onnxruntime."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.port_map import PortMap
from b2s_onnx.ir.reader import read_ir_xml, topological_order
from b2s_onnx.parity.check import CheckResult, OutputReport, Tasks, Tolerance, finish_check
from b2s_onnx.parity.inputs import ValueRange, make_inputs, option_warnings
from b2s_onnx.parity.quantized_spread import FLOAT_SIMULATION_CONFIG, widen_by_spread
from b2s_onnx.parity.references import run_onnx_reference
from b2s_onnx.parity.runtime import first_line
from b2s_onnx.parity.scale_tolerance import widen_by_scale

#: A converted IR computes float math in another runtime, so last-bit differences are
#: expected, and they grow with the magnitude of a value: an element passes when
#: ``|actual - expected| <= IR_ATOL + IR_RTOL * |expected|`` (absolute near zero, relative
#: for large values; e.g. an output of 880 may differ by 0.88).
IR_ATOL = 1e-4
IR_RTOL = 1e-3
#: IRs with FakeQuantize layers: OpenVINO runs them in integer arithmetic, ONNX simulates
#: the quantization in float, so a last-bit difference before a FakeQuantize can move a value
#: by one quantization step, which later layers amplify. Measured on the INT8 corpus model
#: (sigmoid outputs in [0, 1]): worst 0.049 over 40 runs (20 seeds, normal and [0, 255]
#: inputs), median 0.02; the default leaves a 2x margin.
IR_QUANTIZED_ATOL = 1e-1


def is_quantized(xml_path: str | os.PathLike) -> bool:
    from b2s_onnx.ir.reader import read_ir_xml

    layers = read_ir_xml(Path(xml_path)).layers.values()
    return any(layer.type == "FakeQuantize" for layer in layers)


def _not_given(value: Tolerance | None) -> bool:
    return value is None or (isinstance(value, Mapping) and not value)


def _with_default(value: Tolerance | None, default: float) -> Tolerance:
    """Tolerances not given (None, 0, empty) take the IR default, also per output."""
    if isinstance(value, Mapping):
        return {"*": default, **value} if value else default
    return value or default


def openvino_available() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def _run_openvino(
    xml: Path,
    bin_path: Path | None,
    feeds: Mapping[str, np.ndarray],
    names: Sequence[str],
    config: Mapping[str, str] | None = None,
    results: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """OpenVINO's outputs keyed by the converted model's output ``names``: matched by tensor
    name, or, for a Result whose tensor has none (PyTorch's frontend writes such IRs), by
    the Result layer's name in ``results`` (aligned with ``names``)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(xml), None if bin_path is None else str(bin_path))
    # The CPU plugin runs bf16 on AMX/AVX512-BF16 machines unless told otherwise.
    compiled = core.compile_model(
        model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", **(config or {})}
    )
    by_name = {}
    for port in compiled.inputs:
        match = [n for n in feeds if n in port.get_names()]
        if not match:
            raise B2SError(f"OpenVINO input {sorted(port.get_names())} has no converted input")
        by_name[port] = feeds[match[0]]
    values = compiled(by_name)
    outputs = {}
    by_result = dict(zip(results, names, strict=False))
    for port in compiled.outputs:
        match = [n for n in names if n in port.get_names()]
        if not match and port.get_node().get_friendly_name() in by_result:
            match = [by_result[port.get_node().get_friendly_name()]]
        if match:
            outputs[match[0]] = np.asarray(values[port])
    return outputs


def _result_layers(xml_path: str | os.PathLike, count: int) -> list[str]:
    """The IR's Result layer names in the order the converter declares its outputs (the
    layers' topological order), or none when that does not give one per output."""
    ir = read_ir_xml(Path(xml_path))
    names = [layer.name for layer in topological_order(ir) if layer.type == "Result"]
    return names if len(names) == count else []


def _start_method() -> str:
    """forkserver where the platform has it: each run forks from a small server process
    that has imported OpenVINO but started no threads (forking this process, whose
    onnxruntime and OpenVINO thread pools may hold locks, could deadlock the child), and
    costs milliseconds where spawning a fresh interpreter costs seconds."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


_CONTEXT: multiprocessing.context.BaseContext | None = None


def _context() -> multiprocessing.context.BaseContext:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context(_start_method())
        if _CONTEXT.get_start_method() == "forkserver":
            _CONTEXT.set_forkserver_preload(["openvino", __name__])
    return _CONTEXT


def _child(connection, target: Callable, args: tuple) -> None:
    """Runs ``target(*args)`` and sends back ("ok", result), ("bad-input", message) or
    ("error", first line)."""
    try:
        connection.send(("ok", target(*args)))
    except B2SError as exc:
        connection.send(("bad-input", str(exc)))
    except Exception as exc:  # reported to the parent, which raises it
        connection.send(("error", first_line(exc)))
    finally:
        connection.close()


def run_isolated(target: Callable, *args):
    """``target(*args)`` in a child process. OpenVINO can crash the process running it on
    an IR it wrote itself (a segmentation fault compiling a TensorFlow NMS graph, found
    here): in-process that kills ``check`` with a signal instead of one of its exit codes,
    so the reference runs apart and a crash becomes a B2SError naming the signal."""
    receiver, sender = _context().Pipe(duplex=False)
    process = _context().Process(target=_child, args=(sender, target, args), daemon=True)
    process.start()
    sender.close()
    try:
        status, payload = receiver.recv()
    except EOFError:
        process.join()
        code = process.exitcode
        how = (
            f"signal {signal.Signals(-code).name}"
            if code is not None and code < 0 and -code in signal.valid_signals()
            else f"exit code {code}"
        )
        raise B2SError(
            f"OpenVINO's CPU plugin crashed ({how}) computing the reference; "
            "--reference onnx checks the conversion without it"
        ) from None
    finally:
        receiver.close()
    process.join()
    if status == "bad-input":
        raise B2SError(payload)
    if status == "error":
        raise B2SError(
            f"reference openvino-cpu failed: {payload}; --reference onnx checks the "
            "conversion without it"
        )
    return payload


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
    val_range: Mapping[str, ValueRange] | None = None,
    compare: Tasks = None,
    progress: Callable[[str], None] | None = None,
    per_layer: bool = False,
    ports: PortMap | None = None,
) -> CheckResult:
    """Runs ``converted`` in onnxruntime against ``reference`` ("openvino", "onnx", "auto").

    Tolerances not given (None, 0 or empty) default to :data:`IR_ATOL` (or
    :data:`IR_QUANTIZED_ATOL` for an IR with FakeQuantize layers) / :data:`IR_RTOL`.
    ``per_layer`` also compares every layer output against OpenVINO (``ports``: the
    conversion's port map; default: convert again) and names the first that diverge.
    """
    step = progress or (lambda _stage: None)
    if reference == "auto":
        reference = "openvino" if openvino_available() else "onnx"
    if per_layer and reference != "openvino":
        raise B2SError(
            "--per-layer compares layers against OpenVINO: it needs --reference openvino"
        )
    feeds = make_inputs(
        converted,
        seed=seed,
        given=inputs,
        dim_sizes=dim_sizes,
        input_shapes=input_shapes,
        val_range=val_range,
    )
    names = [o.name for o in converted.graph.output]
    timings = {}
    start = time.perf_counter()
    step("running the reference")
    detail = ""

    def openvino_outputs(config: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
        weights = None if bin_path is None else Path(bin_path)
        return run_isolated(
            _run_openvino,
            Path(xml_path),
            weights,
            dict(feeds),
            list(names),
            config,
            _result_layers(xml_path, len(names)),
        )

    if reference == "openvino":
        if not openvino_available():
            raise B2SError(
                "--reference openvino needs the openvino package (pip install 'b2s-onnx[openvino]')"
            )
        expected = openvino_outputs()
        label = "openvino-cpu"
        detail = "OpenVINO's CPU plugin, INFERENCE_PRECISION_HINT=f32"
    elif reference == "onnx":
        if unlowered is None:
            raise B2SError("the onnx reference needs the converted graph before lowering")
        run = run_onnx_reference(
            unlowered,
            feeds,
            [DEFAULT_DOMAIN],
            "onnx's reference evaluator ran the converted graph before lowering",
            other="openvino",
        )
        expected, label, detail = run.outputs, run.label, run.detail
    else:
        raise B2SError(
            f"reference '{reference}' does not apply to an IR model (auto, openvino, onnx)"
        )
    timings["reference_s"] = time.perf_counter() - start
    quantized = is_quantized(xml_path)
    revise = None
    if not quantized and _not_given(atol):

        def revise(reports: list[OutputReport], actual: Mapping[str, np.ndarray]) -> None:
            widen_by_scale(reports, expected, actual)

    elif reference == "openvino" and quantized and _not_given(atol):

        def revise(reports: list[OutputReport], actual: Mapping[str, np.ndarray]) -> None:
            step("running OpenVINO's float simulation")
            began = time.perf_counter()
            try:
                simulated = openvino_outputs(FLOAT_SIMULATION_CONFIG)
            except B2SError:
                return  # no second opinion: the outputs keep their verdict
            finally:
                timings["float_simulation_s"] = time.perf_counter() - began
            widen_by_spread(reports, expected, simulated, actual)

    step("running the converted model")
    result = finish_check(
        converted,
        feeds,
        names,
        expected,
        _with_default(atol, IR_QUANTIZED_ATOL if quantized else IR_ATOL),
        _with_default(rtol, IR_RTOL),
        seed,
        timings,
        tasks=compare,
        reference=label,
        reference_detail=detail,
        warnings=option_warnings(converted, dim_sizes, compare),
        revise=revise,
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


def check_ir_file(
    xml_path: str | os.PathLike,
    *,
    bin_path: str | os.PathLike | None = None,
    lowered: onnx.ModelProto | str | os.PathLike | None = None,
    opset: int | None = None,
    **options,
) -> CheckResult:
    """Converts the IR and checks the conversion (or ``lowered``, a model converted from it
    before) with :func:`check_ir`: what ``b2s-onnx check model.xml`` and
    ``b2s_onnx.check("model.xml")`` run. ``options`` are :func:`check_ir`'s."""
    from b2s_onnx.ir.convert import convert_ir_model
    from b2s_onnx.parity.check import load_onnx

    if options.get("progress") is not None:
        options["progress"]("converting")
    conversion = convert_ir_model(xml_path, bin_path, **({} if opset is None else {"opset": opset}))
    converted = conversion.model if lowered is None else load_onnx(lowered, "lowered")
    return check_ir(
        xml_path,
        converted,
        bin_path=bin_path,
        unlowered=conversion.unlowered,
        ports=conversion.ports,
        **options,
    )
