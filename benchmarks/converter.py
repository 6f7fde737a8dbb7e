"""How the converter itself scales: ``lower`` on models with many custom nodes, against
``onnx.load`` + ``onnx.save`` of the same model, peak memory on a ~1 GB model, and
``convert_ir`` of a ~100 MB IR against OpenVINO's own ``read_model`` + ``compile_model``.

    python -m benchmarks.converter                  # 1k..10k nodes, a 1 GB model, a 100 MB IR
    python -m benchmarks.converter --skip-large --skip-ir
    python -m benchmarks.converter --counts --skip-large   # only the IR comparison
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from benchmarks._machine import isa_flag_list

DOMAIN = "org.openvinotoolkit"


def chain_model(nodes: int) -> onnx.ModelProto:
    """SpaceToBatch and BatchToSpace alternating ``nodes`` times: shapes stay [1, 4, 4, 2]."""
    graph_nodes = []
    current = "x"
    for i in range(nodes):
        op = "SpaceToBatch" if i % 2 == 0 else "BatchToSpace"
        ends = ("pads_begin", "pads_end") if op == "SpaceToBatch" else ("crops", "crops")
        output = f"t{i}" if i < nodes - 1 else "y"
        graph_nodes.append(
            helper.make_node(
                op, [current, "blocks", ends[0], ends[1]], [output], domain=DOMAIN, name=f"n{i}"
            )
        )
        current = output
    inits = [
        numpy_helper.from_array(np.array(v, np.int64), name)
        for name, v in (
            ("blocks", [1, 2, 2, 1]),
            ("pads_begin", [0, 0, 0, 0]),
            ("pads_end", [0, 0, 0, 0]),
            ("crops", [0, 0, 0, 0]),
        )
    ]
    out_shape = [1, 4, 4, 2] if nodes % 2 == 0 else [4, 2, 2, 2]
    graph = helper.make_graph(
        graph_nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    model.ir_version = 8
    return model


def _best(function, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def node_scaling(counts: list[int]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for count in counts:
            path = Path(folder) / f"chain{count}.onnx"
            onnx.save(chain_model(count), path)
            model = onnx.load(path)
            lower_s = _best(lambda m=model: b2s_onnx.lower(m))
            io_s = _best(lambda p=path: onnx.save(onnx.load(p), Path(folder) / "copy.onnx"))
            rows.append(
                {
                    "nodes": count,
                    "lower_s": lower_s,
                    "load_save_s": io_s,
                    "ratio": lower_s / io_s,
                    "us_per_node": lower_s / count * 1e6,
                }
            )
            print(
                f"{count:>7} nodes: lower {lower_s:7.3f} s, load+save {io_s:6.3f} s, "
                f"ratio {lower_s / io_s:5.2f}, {lower_s / count * 1e6:6.1f} us/node",
                flush=True,
            )
    return rows


def large_model(megabytes: int) -> dict:
    """Peak memory of ``b2s-onnx lower`` on a model with ~``megabytes`` MB of external data."""
    with tempfile.TemporaryDirectory() as folder:
        elements = megabytes * 2**20 // 8
        weights = np.ones((2, elements), np.float32)
        nodes = [
            helper.make_node("Add", ["x", "w"], ["a"]),
            helper.make_node(
                "BatchToSpace", ["a", "blocks", "crops", "crops"], ["y"], domain=DOMAIN, name="b2s"
            ),
        ]
        graph = helper.make_graph(
            nodes,
            "large",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, elements])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * elements])],
            [
                numpy_helper.from_array(weights, "w"),
                numpy_helper.from_array(np.array([1, 2], np.int64), "blocks"),
                numpy_helper.from_array(np.array([0, 0], np.int64), "crops"),
            ],
        )
        del weights
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
        )
        model.ir_version = 8
        source = Path(folder) / "large.onnx"
        onnx.save(model, source, save_as_external_data=True, location="large.onnx.data")
        del model
        size = sum(f.stat().st_size for f in Path(folder).iterdir())
        del graph, nodes
        exe = Path(sys.executable).with_name("b2s-onnx")
        # Measured from a small wrapper process: a child forked from this one would count
        # the memory this process still holds as its own.
        probe = (
            "import resource, subprocess, sys, time; t = time.perf_counter(); "
            "subprocess.run(sys.argv[1:], check=True); "
            "print(time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
        )
        command = [str(exe), "lower", str(source), "-o", str(Path(folder) / "out.onnx"), "-q"]
        out = subprocess.run(
            [sys.executable, "-c", probe, *command], check=True, capture_output=True, text=True
        ).stdout.split()
        seconds, peak = float(out[0]), int(out[1])
        start = time.perf_counter()
        onnx.save(
            onnx.load(source),
            Path(folder) / "copy.onnx",
            save_as_external_data=True,
            location="copy.onnx.data",
        )
        io_seconds = time.perf_counter() - start
        row = {
            "model_bytes": size,
            "peak_rss_bytes": peak,
            "peak_over_size": peak / size,
            "lower_s": seconds,
            "load_save_s": io_seconds,
        }
        print(
            f"{size / 2**30:.2f} GiB model: b2s-onnx lower {seconds:.1f} s "
            f"(load+save {io_seconds:.1f} s), peak RSS {peak / 2**30:.2f} GiB = "
            f"{peak / size:.2f}x the model"
        )
        return row


def conv_stack_ir(folder: Path, megabytes: int, compress: bool = False) -> Path:
    """An IR of 3x3 convolutions (256 channels, bias, ReLU) holding ~``megabytes`` MB of f32
    weights, with a SpaceToBatch/BatchToSpace dilated block in the middle: the shape of a
    real vision backbone, saved uncompressed as ``openvino.save_model`` writes it."""
    import openvino as ov
    import openvino.opset13 as ops

    channels = 256
    per_layer = channels * channels * 9 * 4
    layers = max(2, round(megabytes * 2**20 / per_layer))
    rng = np.random.default_rng(0)
    x = ops.parameter([1, channels, 16, 16], np.float32, name="image")
    current = x
    for index in range(layers):
        if index == layers // 2:
            blocks = np.array([1, 1, 2, 2])
            current = ops.space_to_batch(current, blocks, np.array([0, 0, 2, 2]), [0, 0, 2, 2])
        weights = (rng.standard_normal((channels, channels, 3, 3)) * 0.02).astype(np.float32)
        current = ops.convolution(current, weights, [1, 1], [1, 1], [1, 1], [1, 1])
        bias = rng.standard_normal((1, channels, 1, 1)).astype(np.float32)
        current = ops.relu(ops.add(current, bias))
        if index == layers // 2:
            current = ops.batch_to_space(current, blocks, [0, 0, 2, 2], [0, 0, 2, 2])
    xml = folder / ("stack_fp16.xml" if compress else "stack.xml")
    ov.save_model(ov.Model([current], [x]), xml, compress_to_fp16=compress)
    return xml


def _seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def ir_versus_openvino(megabytes: int, repeats: int, compress: bool = False) -> dict:
    """Median seconds of ``convert_ir`` + saving the ONNX file, and of OpenVINO's
    ``read_model`` + ``compile_model`` on CPU, for the same ~``megabytes`` MB of f32
    weights (``compress``: stored as f16 in the IR, as OpenVINO saves by default)."""
    import openvino as ov

    from b2s_onnx.ir.convert import convert_ir_model

    with tempfile.TemporaryDirectory() as folder:
        xml = conv_stack_ir(Path(folder), megabytes, compress)
        size = xml.stat().st_size + xml.with_suffix(".bin").stat().st_size
        written = []

        def ours() -> None:
            # A new file each time, as a user converting once writes: replacing the last
            # run's output would add the cost of freeing it.
            target = Path(folder) / f"stack{len(written)}.onnx"
            convert_ir_model(xml).save(target)
            written.append(target)

        def openvino() -> None:
            core = ov.Core()
            core.compile_model(core.read_model(xml), "CPU")

        # Interleaved, so that both see the same load on a shared machine.
        pairs = []
        for _ in range(repeats):
            pairs.append((_seconds(ours), _seconds(openvino)))
            written[-1].unlink()
    convert_s = float(np.median([p[0] for p in pairs]))
    openvino_s = float(np.median([p[1] for p in pairs]))
    row = {
        "ir_bytes": size,
        "fp16_weights": compress,
        "convert_s": convert_s,
        "openvino_read_compile_s": openvino_s,
        "ratio": convert_s / openvino_s,
        "median_pair_ratio": float(np.median([a / b for a, b in pairs])),
        "cpu_isa": isa_flag_list(),
        "repeats": repeats,
    }
    print(
        f"{size / 2**20:.0f} MB IR{' (f16 weights)' if compress else ''}: "
        f"b2s-onnx convert+save {convert_s:.2f} s, OpenVINO "
        f"read_model+compile_model {openvino_s:.2f} s, ratio {convert_s / openvino_s:.2f} "
        f"(median of per-run ratios {row['median_pair_ratio']:.2f}) "
        f"(medians of {repeats}); CPU: {' '.join(row['cpu_isa'])}"
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description="converter speed and memory")
    parser.add_argument("--counts", type=int, nargs="*", default=[1000, 2500, 5000, 10000])
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-ir", action="store_true")
    parser.add_argument("--ir-megabytes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {"scaling": node_scaling(args.counts)}
    if not args.skip_large:
        results["large"] = large_model(args.megabytes)
    if not args.skip_ir:
        results["ir"] = [
            ir_versus_openvino(args.ir_megabytes, args.repeats, compress)
            for compress in (False, True)
        ]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
