"""Atrous (dilated) convolutions as TensorFlow writes them: SpaceToBatch -> Conv ->
BatchToSpace. Ratios, in one run, interleaved round by round, medians:
- fused:    ``b2s_onnx.convert_ir`` (one dilated Conv) in onnxruntime;
- unfused:  ``convert_ir(fuse=False)``: the pattern lowered literally, in onnxruntime;
- openvino: the IR on OpenVINO's CPU plugin (f32 inference precision, same threads).

    python -m benchmarks.atrous                   # every pattern, 1 and 2 threads
    python -m benchmarks.atrous --only depthwise --threads 1

Rows marked "dyn" have unknown height and width: the pads and crops are computed at run
time, OpenVINO keeps SpaceToBatch/BatchToSpace, and the fused graph carries a run-time
guard. Pool rows are TensorFlow's dilated pooling; ASPP is DeepLab's head (1x1 conv,
separable atrous convs at rates 6/12/18, image pooling, concat, projection). The machine
may be shared: many repeats, timed round by round in turn, medians.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import b2s_onnx
from benchmarks._machine import interleaved_medians, isa_flags, settle_seconds
from benchmarks.atrous_irs import AtrousGraph, atrous_ir_model
from benchmarks.models import _session


@dataclass(frozen=True)
class Pattern:
    name: str
    channels: int
    size: int
    spatial: int = 2
    depthwise: bool = False
    nhwc: bool = False
    rate: int = 2
    kernel: int = 3
    #: Built as OpenVINO's TensorFlow frontend writes it (dynamic H/W, pools, ASPP).
    graph: AtrousGraph | None = None


def _frontend(name: str, channels: int, size: int, **fields) -> Pattern:
    graph = AtrousGraph(channels=channels, size=size, separable=False, **fields)
    return Pattern(name, channels, size, nhwc=graph.nhwc, graph=graph)


PATTERNS = [
    Pattern("depthwise 256x65x65", 256, 65, depthwise=True),
    Pattern("depthwise 128x129x129", 128, 129, depthwise=True),
    Pattern("depthwise 128x129x129 nhwc", 128, 129, depthwise=True, nhwc=True),
    Pattern("full 256x65x65", 256, 65),
    Pattern("full 128x129x129 nhwc", 128, 129, nhwc=True),
    Pattern("1-D 128x4097 rate 4", 128, 4097, spatial=1, rate=4),
    Pattern("3-D 32x33x33x33", 32, 33, spatial=3),
    _frontend("depthwise 256x65x65 dyn nhwc", 256, 65, dynamic=True),
    _frontend("depthwise 128x129x129 dyn nchw", 128, 129, dynamic=True, nhwc=False),
    _frontend("full 256x65x65 dyn nhwc", 256, 65, dynamic=True, branch="full"),
    _frontend("maxpool 256x65x65 nhwc", 256, 65, branch="maxpool"),
    _frontend("avgpool 256x65x65 dyn nhwc", 256, 65, dynamic=True, branch="avgpool"),
    _frontend("ASPP 256x65x65 nhwc 6/12/18", 256, 65, aspp=True, rates=(6, 12, 18)),
    _frontend("ASPP 256x65x65 dyn nhwc", 256, 65, aspp=True, rates=(6, 12, 18), dynamic=True),
]


def atrous_ir(pattern: Pattern, folder: Path) -> Path:
    """The IR OpenVINO's TensorFlow frontend writes for ``tf.nn.atrous_conv2d`` ('SAME')."""
    import openvino as ov
    import openvino.opset13 as ops

    if pattern.graph is not None:
        xml = folder / f"{pattern.name.replace(' ', '_').replace('/', '_')}.xml"
        ov.save_model(atrous_ir_model(pattern.graph), xml, compress_to_fp16=False)
        return xml

    rank = pattern.spatial + 2
    rate, kernel, size = pattern.rate, pattern.kernel, pattern.size
    base = (kernel - 1) * rate // 2
    extra = (rate - (size + 2 * base) % rate) % rate
    spatial_axes = list(range(1, rank - 1)) if pattern.nhwc else list(range(2, rank))

    def vector(value, filler=0):
        values = [filler] * rank
        for axis in spatial_axes:
            values[axis] = value
        return ops.constant(np.asarray(values, np.int64))

    shape = [1, *[size] * pattern.spatial, pattern.channels]
    if not pattern.nhwc:
        shape = [1, pattern.channels, *[size] * pattern.spatial]
    data = ops.parameter(shape, np.float32, name="data")
    x = ops.space_to_batch(data, vector(rate, 1), vector(base), vector(base + extra))
    if pattern.nhwc:
        x = ops.transpose(x, ops.constant(np.asarray([0, rank - 1, *range(1, rank - 1)])))
    rng = np.random.default_rng(0)
    ones, zeros = [1] * pattern.spatial, [0] * pattern.spatial
    c = pattern.channels
    if pattern.depthwise:
        weights = rng.standard_normal([c, 1, 1, *[kernel] * pattern.spatial]) * 0.1
        x = ops.group_convolution(
            x, ops.constant(weights.astype(np.float32)), ones, zeros, zeros, ones
        )
    else:
        weights = rng.standard_normal([c, c, *[kernel] * pattern.spatial]) * 0.05
        x = ops.convolution(x, ops.constant(weights.astype(np.float32)), ones, zeros, zeros, ones)
    bias = rng.standard_normal([1, c, *ones]).astype(np.float32)
    x = ops.relu(ops.add(x, ops.constant(bias)))
    if pattern.nhwc:
        x = ops.transpose(x, ops.constant(np.asarray([0, *range(2, rank), 1])))
    x = ops.batch_to_space(x, vector(rate, 1), vector(0), vector(extra))
    xml = folder / f"{pattern.name.replace(' ', '_')}.xml"
    ov.save_model(ov.Model([x], [data]), xml, compress_to_fp16=False)
    return xml


def measure(pattern: Pattern, folder: Path, threads: int, repeats: int) -> dict:
    import openvino as ov

    xml = atrous_ir(pattern, folder)
    fused = _session(b2s_onnx.convert_ir(xml), threads)
    unfused = _session(b2s_onnx.convert_ir(xml, fuse=False), threads)
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1}
    request = core.compile_model(core.read_model(xml), "CPU", config).create_infer_request()
    shape = fused.get_inputs()[0].shape
    if pattern.graph is not None:  # dynamic H/W: run at the pattern's size
        spatial = [pattern.size] * 2
        shape = [1, *spatial, pattern.channels] if pattern.nhwc else [1, pattern.channels, *spatial]
    feeds = {"data": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    times = interleaved_medians(
        {
            "fused": lambda: fused.run(None, feeds),
            "unfused": lambda: unfused.run(None, feeds),
            "openvino": lambda: request.infer(feeds),
        },
        repeats,
        settle_for=settle_seconds(threads),
    )
    return {
        "pattern": pattern.name,
        "threads": threads,
        **{f"{k}_ms": v * 1e3 for k, v in times.items()},
        "unfused/fused": times["unfused"] / times["fused"],
        "fused/openvino": times["fused"] / times["openvino"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--only", nargs="*", default=None, help="substrings of pattern names")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    print(f"CPU: {isa_flags()}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for pattern in PATTERNS:
            if args.only and not any(part in pattern.name for part in args.only):
                continue
            for threads in args.threads:
                row = measure(pattern, Path(folder), threads, args.repeats)
                rows.append(row)
                print(
                    f"{pattern.name:30s} {threads}t  fused {row['fused_ms']:8.2f} ms  "
                    f"unfused {row['unfused_ms']:8.2f} ms  openvino {row['openvino_ms']:8.2f} ms  "
                    f"unfused/fused {row['unfused/fused']:5.2f}  "
                    f"fused/openvino {row['fused/openvino']:5.2f}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps({"cpu": isa_flags(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
