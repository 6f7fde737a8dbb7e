"""INT8 IRs in onnxruntime against OpenVINO, and against onnxruntime's own ceiling.

For each INT8 model (``models/int8`` NNCF networks, the shared corpus's INT8 model), in one
process, interleaved round by round, medians:
- qdq:      ``convert_ir(int8="qdq")`` (the default) in onnxruntime;
- float:    ``convert_ir(int8="float")``: FakeQuantize simulated in float;
- openvino: the INT8 IR on OpenVINO's CPU plugin (its INT8 kernels; f32 elsewhere);
- ceiling:  for NNCF networks, the float original quantized by onnxruntime's own
            ``quantize_static`` (QDQ, uint8 activations, int8 per-channel weights) after
            the ``quant_pre_process`` step onnxruntime recommends.
Plus the integer-kernel coverage of the qdq form, and a reference: 10 x Conv3x3+ReLU on
1x3x224x224 quantized by ``quantize_static``, in onnxruntime and in OpenVINO, whose ratio
is what onnxruntime's integer kernels can reach on this CPU.

    python -m benchmarks.int8                    # 1 and 2 threads
    python -m benchmarks.int8 --statistic best   # fastest round: steadier on a busy machine
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from b2s_onnx.ir.int8_coverage import coverage
from benchmarks._machine import interleaved_medians, isa_flags, settle, settle_seconds
from benchmarks.models import _session

MODELS = Path(__file__).resolve().parents[1] / "models" / "int8"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"
CORPUS_INT8 = ["person-attributes-recognition-crossroad-0230"]


def _openvino(model_path: Path, threads: int):
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    return core.compile_model(core.read_model(model_path), "CPU", config).create_infer_request()


def _quantize_static(model: onnx.ModelProto, feeds: list[dict], folder: Path) -> onnx.ModelProto:
    """onnxruntime's own post-training quantization of a float model (the ceiling)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self):
            return next(self.items, None)

    from onnxruntime.quantization.shape_inference import quant_pre_process

    source, target = folder / "float.onnx", folder / "quantized.onnx"
    prepared = folder / "prepared.onnx"
    onnx.save(model, source)
    # The pre-processing onnxruntime asks for before quantizing: its basic optimizations
    # fold each bias Add into its Conv, as a float export would have it, so the ceiling
    # quantizes Conv-with-bias, not Conv followed by a QLinearAdd.
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    quantize_static(
        str(prepared),
        str(target),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
    )
    return onnx.load(str(target))


def _calibration(shape, count: int = 8) -> list[dict]:
    rng = np.random.default_rng(7)
    return [
        {"image": (rng.integers(0, 256, shape) / 64.0).astype(np.float32)} for _ in range(count)
    ]


def _timed(
    contenders: Mapping[str, Callable[[], object]], repeats: int, statistic: str, threads: int
) -> dict[str, float]:
    """Seconds per call, rounds interleaved: the median, or the fastest round ("best": what a
    contender costs when the machine's other load leaves it alone, steadier when shared).
    With several threads each timed call follows an untimed run-in (``settle_seconds``)."""
    run_in = settle_seconds(threads)
    if statistic == "median":
        return interleaved_medians(contenders, repeats, settle_for=run_in)
    best = {name: float("inf") for name in contenders}
    for run in contenders.values():
        run()
    for _ in range(repeats):
        for name, run in contenders.items():
            settle(run, run_in)
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def reference_conv_stack(folder: Path, threads: int, repeats: int, statistic: str) -> dict:
    """10 x Conv3x3+ReLU, 1x3x224x224, quantized by onnxruntime: onnxruntime vs OpenVINO."""
    rng = np.random.default_rng(0)
    nodes, initializers, x, channels = [], [], "image", 3
    for i in range(10):
        weights = (rng.standard_normal([32, channels, 3, 3]) * 0.1).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weights, f"w{i}"),
            numpy_helper.from_array(np.zeros(32, np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        x, channels = f"r{i}", 32
    graph = helper.make_graph(
        nodes,
        "conv_stack",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 32, 224, 224])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    quantized = _quantize_static(model, _calibration([1, 3, 224, 224], 4), folder)
    path = folder / "reference.onnx"
    onnx.save(quantized, path)
    session, request = _session(quantized, threads), _openvino(path, threads)
    feeds = _calibration([1, 3, 224, 224], 1)[0]
    times = _timed(
        {"onnxruntime": lambda: session.run(None, feeds), "openvino": lambda: request.infer(feeds)},
        repeats,
        statistic,
        threads,
    )
    return {
        "onnxruntime_ms": times["onnxruntime"] * 1e3,
        "openvino_ms": times["openvino"] * 1e3,
        "ratio": times["onnxruntime"] / times["openvino"],
    }


def measure(
    name: str, xml: Path, float_xml: Path | None, threads: int, repeats: int, statistic: str
) -> dict:
    qdq = b2s_onnx.convert_ir(xml)
    contenders = {"qdq": qdq, "float": b2s_onnx.convert_ir(xml, int8="float")}
    shape = [d.dim_value for d in qdq.graph.input[0].type.tensor_type.shape.dim]
    feeds = {qdq.graph.input[0].name: _calibration(shape, 1)[0]["image"]}
    with tempfile.TemporaryDirectory() as folder:
        if float_xml is not None:
            calibration = [{qdq.graph.input[0].name: f["image"]} for f in _calibration(shape)]
            contenders["ceiling"] = _quantize_static(
                b2s_onnx.convert_ir(float_xml), calibration, Path(folder)
            )
        sessions = {k: _session(m, threads) for k, m in contenders.items()}
        request = _openvino(xml, threads)
        runs = {k: (lambda s=s: s.run(None, feeds)) for k, s in sessions.items()}
        runs["openvino"] = lambda: request.infer(feeds)
        times = _timed(runs, repeats, statistic, threads)
    found = coverage(xml, qdq)
    row = {"model": name, "threads": threads, **{f"{k}_ms": v * 1e3 for k, v in times.items()}}
    row["qdq/openvino"] = times["qdq"] / times["openvino"]
    row["float/openvino"] = times["float"] / times["openvino"]
    if "ceiling" in times:
        row["qdq/ceiling"] = times["qdq"] / times["ceiling"]
    row["coverage"] = f"{found.integer} on integer kernels / {found.int8_layers} INT8 layers"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--statistic", choices=("median", "best"), default="median")
    parser.add_argument(
        "--only", nargs="+", default=None, help="only models whose name contains one of these"
    )
    args = parser.parse_args()
    print(f"CPU: {isa_flags()}")
    models = {p.name: (p / "int8.xml", p / "float.xml") for p in sorted(MODELS.iterdir())}
    models.update(
        {
            n: (CORPUS / n / "model.xml", None)
            for n in CORPUS_INT8
            if (CORPUS / n / "model.xml").is_file()
        }
    )
    if args.only:
        models = {n: v for n, v in models.items() if any(part in n for part in args.only)}
    rows = []
    for threads in args.threads:
        with tempfile.TemporaryDirectory() as folder:
            reference = reference_conv_stack(Path(folder), threads, args.repeats, args.statistic)
        print(
            f"reference 10 x Conv3x3+ReLU (onnxruntime's quantizer) {threads}t: onnxruntime/"
            f"openvino {reference['ratio']:.2f} ({reference['onnxruntime_ms']:.2f} ms vs "
            f"{reference['openvino_ms']:.2f} ms)"
        )
        rows.append({"model": "reference", "threads": threads, **reference})
        for name, (xml, float_xml) in models.items():
            row = measure(name, xml, float_xml, threads, args.repeats, args.statistic)
            rows.append(row)
            ceiling = f"  qdq/ceiling {row['qdq/ceiling']:5.2f}" if "qdq/ceiling" in row else ""
            print(
                f"{name:46s} {threads}t  qdq/openvino {row['qdq/openvino']:5.2f}  "
                f"float/openvino {row['float/openvino']:5.2f}{ceiling}  {row['coverage']}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"cpu": isa_flags(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
