"""Converted models in onnxruntime against OpenVINO running the IR: are users paying for
converting? Also the profiler view that shows the next slow pattern.

For every model (the shared IR corpus; classic architectures outside it, from the sample
models the ``onnx`` package ships, through OpenVINO's ONNX frontend; and generated models
covering the patterns the rewrites in ``b2s_onnx.rewrites`` target), in one process,
interleaved round by round:
- fused:    ``b2s_onnx.convert_ir`` (the default, with rewrites) in onnxruntime;
- unfused:  ``convert_ir(fuse=False)`` in onnxruntime;
- openvino: the IR on OpenVINO's CPU plugin, f32 inference precision, same threads.
Ratios only (this machine is shared and noisy); the CPU's ISA flags are printed with them.

The ceiling: from onnxruntime's profiler, the time the fused model spends in its compute
kernels (convolutions and matrix multiplications, with the activations onnxruntime fuses
into them) per run, as a latency against OpenVINO's whole model. No graph that keeps the
model's convolutions and MatMuls can run faster than those kernels alone; where that ratio
is above 1.0, onnxruntime's kernels, not the graph we write, set the limit.

    python -m benchmarks.models                    # all models, 1 and 2 threads
    python -m benchmarks.models --profile          # also onnxruntime's top ops per model
    python -m benchmarks.models --only palm --threads 1 --repeats 30
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

import b2s_onnx
from benchmarks._machine import interleaved_medians, isa_flags, settle_seconds
from models.recurrent import lstm_over_time
from models.transformer import encoder

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"


def _session(
    model, threads: int, profile: bool = False, blocked: bool = True
) -> ort.InferenceSession:
    """``blocked=False`` stops at onnxruntime's extended optimizations: no NCHWc layout."""
    options = ort.SessionOptions()
    if not blocked:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_profiling = profile
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _conv_stack(ops, data, act: Callable, channels: int, layers: int = 4):
    rng = np.random.default_rng(0)
    x = data
    for _ in range(layers):
        weights = (
            rng.standard_normal([channels, x.get_output_partial_shape(0)[1].get_length(), 3, 3])
            * 0.05
        )
        x = ops.convolution(
            x, ops.constant(weights.astype(np.float32)), [1, 1], [1, 1], [1, 1], [1, 1]
        )
        x = ops.add(
            x, ops.constant((rng.standard_normal([1, channels, 1, 1]) * 0.1).astype(np.float32))
        )
        x = act(ops, x, channels)
    return x


def _csp_stem(ops, data, rng):
    """YOLOv4's CSPDarknet53 up to its second cross-stage block, Mish after every
    convolution: element-wise chains over activations of up to 22 MB."""

    def conv(x, out, kernel=3, stride=1):
        channels = x.get_output_partial_shape(0)[1].get_length()
        scale = np.sqrt(2 / (channels * kernel * kernel))
        weights = rng.standard_normal([out, channels, kernel, kernel]) * scale
        pad = [kernel // 2] * 2
        y = ops.convolution(
            x, ops.constant(weights.astype(np.float32)), [stride] * 2, pad, pad, [1, 1]
        )
        bias = rng.standard_normal([1, out, 1, 1]) * 0.1
        return ops.mish(ops.add(y, ops.constant(bias.astype(np.float32))))

    def cross_stage(x, half, hidden, blocks, out):
        route, body = conv(x, half, 1), conv(x, half, 1)
        for _ in range(blocks):
            body = ops.add(body, conv(conv(body, hidden, 1), half))
        return conv(ops.concat([conv(body, half, 1), route], 1), out, 1)

    x = cross_stage(conv(conv(data, 32), 64, stride=2), 64, 32, 1, 64)
    x = cross_stage(conv(x, 128, stride=2), 64, 64, 2, 128)
    return x


def _regnet(ops, data, rng, widths, depths, group_width: int, squeeze: bool):
    """A RegNetX (``squeeze=False``) or RegNetY network at 224x224 as PyTorch's export
    writes it to IR (batch norms folded into the convolutions): stages of residual
    bottlenecks of ratio 1, each a 1x1 convolution, a grouped 3x3 one of ``group_width``
    channels a group (stride 2 in a stage's first block), an optional squeeze-excite gate
    and another 1x1 convolution. Groups of 8 channels in odd numbers (RegNetX-200MF's 3, 7
    and 19) are what onnxruntime runs outside its blocked layout."""

    def conv(x, out, kernel=1, stride=1, group=1, act=True):
        channels = x.get_output_partial_shape(0)[1].get_length()
        scale = np.sqrt(2 / (channels // group * kernel * kernel))
        pad = [kernel // 2] * 2
        if group == 1:
            weights = rng.standard_normal([out, channels, kernel, kernel]) * scale
            y = ops.convolution(
                x, ops.constant(weights.astype(np.float32)), [stride] * 2, pad, pad, [1, 1]
            )
        else:
            weights = rng.standard_normal([group, out // group, channels // group, kernel, kernel])
            y = ops.group_convolution(
                x,
                ops.constant((weights * scale).astype(np.float32)),
                [stride] * 2,
                pad,
                pad,
                [1, 1],
            )
        y = ops.add(y, ops.constant((rng.standard_normal([1, out, 1, 1]) * 0.1).astype(np.float32)))
        return ops.relu(y) if act else y

    x = conv(data, 32, 3, 2)
    for width, depth in zip(widths, depths, strict=True):
        for block in range(depth):
            stride = 2 if block == 0 else 1
            channels = x.get_output_partial_shape(0)[1].get_length()
            y = conv(conv(x, width), width, 3, stride, width // group_width)
            if squeeze:
                hidden = max(1, channels // 4)
                pooled = ops.reduce_mean(y, ops.constant(np.asarray([2, 3], np.int64)), True)
                gate = ops.sigmoid(conv(conv(pooled, hidden), width, act=False))
                y = ops.multiply(y, gate)
            y = conv(y, width, act=False)
            shortcut = (
                x if stride == 1 and channels == width else conv(x, width, 1, stride, act=False)
            )
            x = ops.relu(ops.add(y, shortcut))
    return x


def _generated(folder: Path) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """IRs that isolate one pattern each, written with OpenVINO's own API."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(1)
    slopes = rng.uniform(0.05, 0.3, 64).astype(np.float32)

    def spelled(o, x, c):
        negative = o.relu(o.negative(x))
        return o.add(o.relu(x), o.multiply(o.constant(-slopes[:c].reshape(1, c, 1, 1)), negative))

    activations = {
        "prelu-scalar": lambda o, x, c: o.prelu(x, o.constant(np.asarray([0.1], np.float32))),
        "prelu-channel": lambda o, x, c: o.prelu(x, o.constant(slopes[:c])),
        "prelu-spelled": spelled,
        "hswish": lambda o, x, c: o.hswish(x),
        "hsigmoid": lambda o, x, c: o.hsigmoid(x),
        "clamp": lambda o, x, c: o.clamp(x, 0.0, 6.0),
        "swish": lambda o, x, c: o.swish(x),
        "mish": lambda o, x, c: o.mish(x),
        "gelu": lambda o, x, c: o.gelu(x, "erf"),
        "gelu-tanh": lambda o, x, c: o.gelu(x, "tanh"),
        "elu": lambda o, x, c: o.elu(x, 1.0),
        "lrn": lambda o, x, c: o.lrn(x, o.constant(np.asarray([1], np.int64)), 1e-4, 0.75, 1.0, 5),
    }
    models = {}
    for name, act in activations.items():
        data = ops.parameter([1, 32, 56, 56], np.float32, name="data")
        models[name] = (ov.Model([_conv_stack(ops, data, act, 64)], [data]), [1, 32, 56, 56])
    # Learned per-channel slopes (MTCNN's span -1.3 to 1.3) on 24 channels, which
    # onnxruntime's blocked layout pads: no blocked form, no Max(x, x * s).
    learned = np.random.default_rng(2).uniform(-0.7, 1.3, 24).astype(np.float32)
    data = ops.parameter([1, 32, 56, 56], np.float32, name="data")
    models["prelu-learned"] = (
        ov.Model(
            [_conv_stack(ops, data, lambda o, x, c: o.prelu(x, o.constant(learned)), 24)], [data]
        ),
        [1, 32, 56, 56],
    )
    # A decoder step: nearest 2x upsampling, then a 3x3 Conv (UNet, FPN-style necks).
    data = ops.parameter([1, 64, 64, 64], np.float32, name="data")
    upsampled = ops.interpolate(
        data,
        ops.constant(np.asarray([2.0, 2.0], np.float32)),
        "nearest",
        "scales",
        axes=ops.constant(np.asarray([2, 3], np.int64)),
    )
    decoded = _conv_stack(ops, upsampled, lambda o, x, c: o.relu(x), 32, 1)
    models["upsample-conv"] = (ov.Model([decoded], [data]), [1, 64, 64, 64])
    data = ops.parameter([1, 16, 256, 256], np.float32, name="data")
    head = ops.convolution(
        data,
        ops.constant(rng.standard_normal([4, 16, 1, 1]).astype(np.float32) * 0.1),
        [1, 1],
        [0, 0],
        [0, 0],
        [1, 1],
    )
    models["softmax-channel"] = (ov.Model([ops.softmax(head, 1)], [data]), [1, 16, 256, 256])
    data = ops.parameter([1, 36, 180, 320], np.float32, name="data")
    up = ops.convolution_backprop_data(
        data, ops.constant(rng.standard_normal([36, 4, 3, 3]).astype(np.float32) * 0.1), [3, 3]
    )
    up = ops.add(up, ops.constant(np.asarray([0.1, 0.2, 0.3, 0.4], np.float32).reshape(1, 4, 1, 1)))
    models["deconv-bias"] = (ov.Model([ops.relu(up)], [data]), [1, 36, 180, 320])

    data = ops.parameter([1, 32, 128, 224], np.float32, name="data")
    pooled = ops.avg_pool(
        _conv_stack(ops, data, lambda o, x, c: o.relu(x), 48, 2),
        [2, 2],
        [0, 0],
        [0, 0],
        [2, 2],
        False,
        "ceil",
    )
    models["avgpool-ceil"] = (
        ov.Model([_conv_stack(ops, pooled, lambda o, x, c: o.relu(x), 48, 2)], [data]),
        [1, 32, 128, 224],
    )
    data = ops.parameter([1, 1, 360, 640], np.float32, name="data")
    wide = _conv_stack(ops, data, lambda o, x, c: x, 36, 1)
    up = ops.convolution_backprop_data(
        wide, ops.constant(rng.standard_normal([36, 4, 3, 3]).astype(np.float32) * 0.1), [3, 3]
    )
    models["conv-upsampling"] = (ov.Model([ops.relu(up)], [data]), [1, 1, 360, 640])

    # A super-resolution shape: convs with per-channel PReLU, a sub-pixel (DepthToSpace)
    # output, and a bicubic upsampling of the input added to it.
    # "-spelled": the sub-pixel step as PyTorch's exports before DepthToSpace wrote it,
    # Reshape -> Transpose -> Reshape.
    for name, spelled in (("bicubic-skip", False), ("bicubic-skip-spelled", True)):
        data = ops.parameter([1, 3, 180, 320], np.float32, name="data")
        body = _conv_stack(ops, data, activations["prelu-channel"], 32, 3)
        body = ops.convolution(
            body,
            ops.constant(rng.standard_normal([48, 32, 3, 3]).astype(np.float32) * 0.05),
            [1, 1],
            [1, 1],
            [1, 1],
            [1, 1],
        )
        if spelled:
            split = ops.reshape(body, ops.constant(np.asarray([1, 3, 4, 4, 180, 320])), False)
            moved = ops.transpose(split, ops.constant(np.asarray([0, 1, 4, 2, 5, 3])))
            body = ops.reshape(moved, ops.constant(np.asarray([1, 3, 720, 1280])), False)
        else:
            body = ops.depth_to_space(body, "depth_first", 4)
        upsampled = ops.interpolate(
            data,
            ops.constant(np.asarray([720, 1280], np.int64)),
            "cubic",
            "sizes",
            axes=ops.constant(np.asarray([2, 3], np.int64)),
            coordinate_transformation_mode="half_pixel",
        )
        models[name] = (ov.Model([ops.add(body, upsampled)], [data]), [1, 3, 180, 320])
    # RegNets: grouped convolutions of 8 (odd counts: 3, 7, 19, 13 groups) and 24 channels.
    for name, widths, depths, group_width, squeeze in (
        ("regnetx-200mf", [24, 56, 152, 368], [1, 1, 4, 7], 8, False),
        ("regnety-400mf", [48, 104, 208, 440], [1, 3, 6, 6], 8, True),
        ("regnetx-600mf", [48, 96, 240, 528], [1, 3, 5, 7], 24, False),
    ):
        data = ops.parameter([1, 3, 224, 224], np.float32, name="data")
        net = _regnet(ops, data, rng, widths, depths, group_width, squeeze)
        models[name] = (ov.Model([net], [data]), [1, 3, 224, 224])
    data = ops.parameter([1, 3, 416, 416], np.float32, name="data")
    models["cspdarknet-mish"] = (ov.Model([_csp_stem(ops, data, rng)], [data]), [1, 3, 416, 416])
    data = ops.parameter([1, 128, 256], np.float32, name="data")
    models["transformer-encoder"] = (ov.Model([encoder(ops, data, rng)], [data]), [1, 128, 256])
    data = ops.parameter([1, 50, 32], np.float32, name="data")
    sequence, last_hidden, _ = lstm_over_time(
        ops,
        data,
        64,
        lambda *shape: ops.constant((rng.standard_normal(shape) * 0.2).astype(np.float32)),
    )
    models["keras-lstm"] = (ov.Model([sequence, last_hidden], [data]), [1, 50, 32])

    found = {}
    for name, (model, shape) in models.items():
        xml = folder / f"{name}.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        found[name] = (xml, {"data": rng.standard_normal(shape).astype(np.float32)})
    return found


def _architectures(folder: Path) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """Classic architectures outside the corpus: the sample models the ``onnx`` package
    ships (AlexNet, DenseNet-121, GoogLeNet, Inception-v2, ResNet-50, ShuffleNet,
    SqueezeNet, VGG-19, ZFNet-512) as OpenVINO's ONNX frontend writes them to IR."""
    import onnx
    import openvino as ov

    found = {}
    for path in sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("*.onnx")):
        model = onnx.load(path, load_external_data=False)
        weights = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(0)
        feeds = {
            i.name: rng.standard_normal(
                [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
            ).astype(np.float32)
            for i in model.graph.input
            if i.name not in weights
        }
        name = path.stem.removeprefix("light_")
        xml = folder / f"{name}.xml"
        ov.save_model(ov.convert_model(path), xml, compress_to_fp16=False)
        found[name] = (xml, feeds)
    return found


def _keras() -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """The Keras recurrent layers of ``models/keras`` as OpenVINO's TensorFlow frontend
    wrote them (a while-loop per layer)."""
    import openvino as ov

    found = {}
    for xml in sorted((Path(__file__).resolve().parents[1] / "models" / "keras").glob("*.xml")):
        rng = np.random.default_rng(0)
        feeds = {
            value.get_any_name(): rng.standard_normal(list(value.get_shape())).astype(np.float32)
            for value in ov.Core().read_model(xml).inputs
        }
        found[f"keras3-{xml.stem}"] = (xml, feeds)
    return found


def _corpus() -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    found = {}
    manifest = CORPUS / "MANIFEST.json"
    if not manifest.is_file():
        return found
    for entry in json.loads(manifest.read_text()):
        rng = np.random.default_rng(0)
        feeds = {
            i["name"]: rng.integers(0, 256, i["shape_used"]).astype(np.float32)
            for i in entry["inputs"]
        }
        found[entry["name"]] = (CORPUS / entry["name"] / "model.xml", feeds)
    return found


#: onnxruntime kernels that compute convolutions (after its fusions and layout changes).
#: The compute kernels of the ceiling: convolutions and matrix multiplications, float and
#: integer, in the forms onnxruntime's optimizer leaves them.
COMPUTE_KERNELS = (
    "Conv",
    "FusedConv",
    "ConvTranspose",
    "QLinearConv",
    "ConvInteger",
    "MatMul",
    "FusedMatMul",
    "Gemm",
    "FusedGemm",
    "QGemm",
    "QLinearMatMul",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
)


#: Ops that run subgraphs: the kernels inside them are timed within their own event.
CONTROL_FLOW = ("Scan", "Loop", "If")


def _profile(
    model, feeds, threads: int, rounds: int = 5, count: int = 6, warmup: int = 2
) -> tuple[str, float]:
    """onnxruntime's top ops by kernel time (a Scan's body counted in the Scan), and the
    compute kernels' (``COMPUTE_KERNELS``) time per run in seconds, from the runs after
    ``warmup`` (the first run prepacks weights). Absolute, not a share of the profile: the
    profiler times every node inside a subgraph too, which inflates a Scan's event."""
    session = _session(model, threads, profile=True)
    for _ in range(warmup + rounds):
        session.run(None, feeds)
    trace = Path(session.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    runs = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    ][warmup:]
    nodes = [
        e
        for e in events
        if e.get("cat") == "Node"
        and e["name"].endswith("_kernel_time")
        and any(start <= e["ts"] <= end for start, end in runs)
    ]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in nodes if e["args"]["op_name"] in CONTROL_FLOW]
    totals: collections.Counter = collections.Counter()
    for event in nodes:
        nested = any(start < event["ts"] < end for start, end in spans)
        if not nested or event["args"]["op_name"] in CONTROL_FLOW:
            totals[event["args"]["op_name"]] += event["dur"]
    whole = sum(totals.values()) or 1
    top = ", ".join(f"{op} {100 * t / whole:.0f}%" for op, t in totals.most_common(count))
    return top, sum(totals[op] for op in COMPUTE_KERNELS) * 1e-6 / max(len(runs), 1)


def measure(
    name: str, xml: Path, feeds, threads: int, repeats: int, profile: bool, unblocked: bool = False
) -> dict:
    import openvino as ov

    fused = b2s_onnx.convert_ir(xml)
    unfused = b2s_onnx.convert_ir(xml, fuse=False)
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(xml),
        "CPU",
        {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1},
    )
    request = compiled.create_infer_request()
    sessions = {"fused": _session(fused, threads), "unfused": _session(unfused, threads)}
    if unblocked:
        sessions["unblocked"] = _session(fused, threads, blocked=False)
    runs: dict[str, Callable] = {
        key: (lambda session=session: session.run(None, feeds)) for key, session in sessions.items()
    }
    runs["openvino"] = lambda: request.infer(feeds)
    times = interleaved_medians(runs, repeats, settle_for=settle_seconds(threads))
    row = {
        "model": name,
        "threads": threads,
        "quantized": _quantized(xml),
        **{f"{k}_ms": v * 1e3 for k, v in times.items()},
    }
    for key in sessions:
        row[f"{key}/openvino"] = times[key] / times["openvino"]
    top, kernel_seconds = _profile(fused, feeds, threads)
    # The ceiling for any graph that keeps these convolutions and MatMuls: their kernels alone.
    row["kernels_ms"] = kernel_seconds * 1e3
    row["kernels/openvino"] = kernel_seconds / times["openvino"]
    if profile:
        row["top_ops"] = top
    return row


def _quantized(xml: Path) -> bool:
    """Whether the IR holds INT8 layers (FakeQuantize): such a model's target is the INT8
    benchmark's, not the FP32/FP16 geomean's."""
    return 'type="FakeQuantize"' in Path(xml).read_text(errors="replace")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


#: Table groups, in order: (row group, first column's title, geomean lines or not).
GROUPS = (
    ("corpus", "model", True),
    ("architecture", "architecture", True),
    ("pattern", "pattern", False),
)


def markdown(rows: list[dict], threads: list[int]) -> str:
    """The README table: corpus models at the lowest thread count, both latencies and the
    ratio, then the geomean per thread count; the architectures (with their geomeans) and
    the generated patterns follow in tables of their own."""
    first = min(threads)
    lines = []
    for group, title, geomeans in GROUPS:
        picked = [r for r in rows if r["threads"] == first and r["group"] == group]
        if not picked:
            continue
        lines += [
            f"| {title} | onnxruntime ms | OpenVINO ms | ratio | ratio without rewrites "
            "| onnxruntime's conv and matmul kernels alone / OpenVINO |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['model']} | {r['fused_ms']:.2f} | {r['openvino_ms']:.2f} | "
            f"{r['fused/openvino']:.2f} | {r['unfused/openvino']:.2f} | "
            f"{r['kernels/openvino']:.2f} |"
            for r in picked
        ]
        if geomeans:
            for count in threads:
                plural = "s" if count > 1 else ""
                ratios = [
                    r["fused/openvino"]
                    for r in rows
                    if r["threads"] == count and r["group"] == group
                ]
                lines.append(
                    f"| **geomean, {count} thread{plural}** | | | **{_geomean(ratios):.2f}** | | |"
                )
                floats = [
                    r["fused/openvino"]
                    for r in rows
                    if r["threads"] == count and r["group"] == group and not r.get("quantized")
                ]
                if len(floats) != len(ratios):
                    lines.append(
                        f"| **geomean of the FP32/FP16 models, {count} thread{plural}** | | | "
                        f"**{_geomean(floats):.2f}** | | |"
                    )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", nargs="*", default=None, help="substrings of model names")
    parser.add_argument("--profile", action="store_true", help="print onnxruntime's top ops")
    parser.add_argument(
        "--unblocked",
        action="store_true",
        help="also time the fused model without onnxruntime's NCHWc layout (where it is the cause)",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    args = parser.parse_args()

    print(f"CPU: {isa_flags()}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        models = {
            "corpus": _corpus(),
            "architecture": _architectures(Path(folder)),
            "pattern": {**_generated(Path(folder)), **_keras()},
        }
        listed = [(g, name, *found) for g, group in models.items() for name, found in group.items()]
        for group, name, xml, feeds in listed:
            if args.only and not any(part in name for part in args.only):
                continue
            for threads in args.threads:
                try:
                    row = measure(
                        name, xml, feeds, threads, args.repeats, args.profile, args.unblocked
                    )
                except Exception as exc:  # a model we cannot convert yet is a row, not a crash
                    print(f"{name:46s} {threads}t  skipped: {str(exc)[:90]}")
                    continue
                row["group"] = group
                rows.append(row)
                print(
                    f"{name:46s} {threads}t  fused {row['fused_ms']:8.2f} ms  "
                    f"unfused {row['unfused_ms']:8.2f} ms  openvino {row['openvino_ms']:8.2f} ms  "
                    f"fused/ov {row['fused/openvino']:5.2f}  "
                    f"unfused/ov {row['unfused/openvino']:5.2f}  "
                    f"kernels/ov {row['kernels/openvino']:5.2f}"
                    + (f"  no-NCHWc/ov {row['unblocked/openvino']:5.2f}" if args.unblocked else ""),
                    flush=True,
                )
                if "top_ops" in row:
                    print(f"{'':46s}     onnxruntime top ops: {row['top_ops']}")
    for group, _, geomeans in GROUPS:
        for threads in args.threads if geomeans else []:
            ratios = [
                r["fused/openvino"] for r in rows if r["threads"] == threads and r["group"] == group
            ]
            floats = [
                r["fused/openvino"]
                for r in rows
                if r["threads"] == threads and r["group"] == group and not r["quantized"]
            ]
            if not ratios:
                continue  # none of the group's models was selected
            print(
                f"{group} geomean fused/openvino at {threads} thread(s): "
                f"{_geomean(ratios):.2f} over {len(ratios)} models, "
                f"{_geomean(floats):.2f} over the {len(floats)} FP32/FP16 ones"
            )
    if args.markdown:
        args.markdown.write_text(markdown(rows, args.threads))
    if args.json:
        args.json.write_text(json.dumps({"cpu": isa_flags(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
