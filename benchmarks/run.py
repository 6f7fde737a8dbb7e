"""Latency of lowered graphs in onnxruntime, side by side with peers and the floor.

For every case, in one process and interleaved round by round (so machine noise hits all
contenders alike), medians of many repeats of:
- ours:    ``b2s_onnx.lower`` (the planner's choice);
- naive:   the spec's Reshape -> Transpose -> Reshape -> Slice (Pad first for
           SpaceToBatch), nothing simplified: what a straightforward lowering produces;
- openvino: OpenVINO's native CPU kernel for the op (if the package is installed),
           f32 inference precision, same thread count;
- floor:   onnxruntime copying the same bytes (Identity from input to output).
Reported as ratios, never as absolute claims: this machine is shared and noisy.

    python -m benchmarks                       # the full matrix, 1 and 2 threads
    python -m benchmarks --quick               # a few cases, fewer repeats
    python -m benchmarks --json results.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.ops import OP_MODULES
from b2s_onnx.parity.runtime import make_session
from benchmarks._machine import interleaved_medians, settle_seconds

DTYPES = {
    "f32": (TensorProto.FLOAT, np.float32),
    "f16": (TensorProto.FLOAT16, np.float16),
    "u8": (TensorProto.UINT8, np.uint8),
}


@dataclass(frozen=True)
class Case:
    name: str
    op_type: str
    shape: tuple[int, ...]
    index: dict | None = None
    attributes: dict | None = None


def _b2s(blocks, begin, end):
    return {"block_shape": blocks, "crops_begin": begin, "crops_end": end}


def _s2b(blocks, begin, end):
    return {"block_shape": blocks, "pads_begin": begin, "pads_end": end}


def matrix(scale: int) -> list[Case]:
    """Cases of ~50 MB float32 (scale 4) or ~1 MB (scale 1)."""
    n, hw = (64, 56) if scale == 4 else (16, 32)
    c = 64 if scale == 4 else 16
    return [
        Case("b2s nchw", "BatchToSpace", (n, c, hw, hw), _b2s([1, 1, 2, 2], [0] * 4, [0] * 4)),
        Case(
            "b2s nchw crops",
            "BatchToSpace",
            (n, c, hw, hw),
            _b2s([1, 1, 2, 2], [0, 0, 1, 1], [0, 0, 1, 1]),
        ),
        Case("b2s nhwc", "BatchToSpace", (n, hw, hw, c), _b2s([1, 2, 2, 1], [0] * 4, [0] * 4)),
        Case(
            "b2s nhwc crops",
            "BatchToSpace",
            (n, hw, hw, c),
            _b2s([1, 2, 2, 1], [0, 1, 1, 0], [0, 1, 1, 0]),
        ),
        Case("b2s 3d", "BatchToSpace", (n, c * hw, hw), _b2s([1, 1, 4], [0] * 3, [0] * 3)),
        Case(
            "b2s 3d crops",
            "BatchToSpace",
            (n, c * hw, hw),
            _b2s([1, 1, 4], [0, 0, 2], [0, 0, 1]),
        ),
        Case(
            "b2s 5d",
            "BatchToSpace",
            (n, c // 4, 4, hw, hw),
            _b2s([1, 1, 2, 2, 2], [0] * 5, [0] * 5),
        ),
        Case(
            "b2s 5d crops",
            "BatchToSpace",
            (n, c // 4, 4, hw, hw),
            _b2s([1, 1, 2, 2, 2], [0, 0, 1, 0, 1], [0, 0, 1, 1, 0]),
        ),
        Case(
            "s2b nchw",
            "SpaceToBatch",
            (n // 4, c, hw * 2, hw * 2),
            _s2b([1, 1, 2, 2], [0] * 4, [0] * 4),
        ),
        Case(
            "s2b nhwc pads",
            "SpaceToBatch",
            (n // 4, hw * 2 - 2, hw * 2 - 2, c),
            _s2b([1, 2, 2, 1], [0, 1, 1, 0], [0, 1, 1, 0]),
        ),
        Case(
            "d2s 4d dcr",
            "DepthToSpace",
            (n // 4, c * 4, hw, hw),
            attributes={"block_size": 2, "mode": "blocks_first"},
        ),
        Case(
            "d2s 4d crd",
            "DepthToSpace",
            (n // 4, c * 4, hw, hw),
            attributes={"block_size": 2, "mode": "depth_first"},
        ),
        Case(
            "d2s 5d dcr",
            "DepthToSpace",
            (n // 8, c * 8, 2, hw // 2, hw),
            attributes={"block_size": 2, "mode": "blocks_first"},
        ),
        Case(
            "d2s 5d crd",
            "DepthToSpace",
            (n // 8, c * 8, 2, hw // 2, hw),
            attributes={"block_size": 2, "mode": "depth_first"},
        ),
    ]


def _graph(nodes, inits, shape, elem_type) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info("data", elem_type, list(shape))],
        [helper.make_tensor_value_info("output", elem_type, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def naive_model(case: Case, elem_type: int) -> onnx.ModelProto:
    """The spec's steps verbatim: no unit-axis dropping, no merging, no planning."""
    shape = list(case.shape)
    rank = len(shape)
    if case.op_type == "BatchToSpace":
        blocks = case.index["block_shape"]
        batch = shape[0] // int(np.prod(blocks))
        k = rank - 1
        split = [*blocks[1:], batch, *shape[1:]]
        perm = [k] + [a for i in range(k) for a in (k + 1 + i, i)]
        merged = [batch] + [shape[i] * blocks[i] for i in range(1, rank)]
        nodes = [
            helper.make_node("Reshape", ["data", "s1"], ["a"]),
            helper.make_node("Transpose", ["a"], ["b"], perm=perm),
            helper.make_node("Reshape", ["b", "s2"], ["c"]),
            helper.make_node("Slice", ["c", "st", "en"], ["output"]),
        ]
        ends = [m - e for m, e in zip(merged, case.index["crops_end"], strict=True)]
        inits = [
            _ints("s1", split),
            _ints("s2", merged),
            _ints("st", case.index["crops_begin"]),
            _ints("en", ends),
        ]
    elif case.op_type == "SpaceToBatch":
        blocks = case.index["block_shape"]
        padded = [
            d + b + e
            for d, b, e in zip(shape, case.index["pads_begin"], case.index["pads_end"], strict=True)
        ]
        split = [padded[0]]
        for i in range(1, rank):
            split += [padded[i] // blocks[i], blocks[i]]
        perm = [2 * i for i in range(1, rank)] + [0] + [2 * i - 1 for i in range(1, rank)]
        merged = [padded[0] * int(np.prod(blocks))] + [
            padded[i] // blocks[i] for i in range(1, rank)
        ]
        nodes = [
            helper.make_node("Pad", ["data", "p"], ["z"]),
            helper.make_node("Reshape", ["z", "s1"], ["a"]),
            helper.make_node("Transpose", ["a"], ["b"], perm=perm),
            helper.make_node("Reshape", ["b", "s2"], ["output"]),
        ]
        inits = [
            _ints("p", case.index["pads_begin"] + case.index["pads_end"]),
            _ints("s1", split),
            _ints("s2", merged),
        ]
    else:
        bs, mode = case.attributes["block_size"], case.attributes["mode"]
        n, channels, *spatial = shape
        k = len(spatial)
        depth = channels // bs**k
        if mode == "blocks_first":
            split = [n, *([bs] * k), depth, *spatial]
            perm = [0, k + 1] + [a for i in range(k) for a in (k + 2 + i, 1 + i)]
        else:
            split = [n, depth, *([bs] * k), *spatial]
            perm = [0, 1] + [a for i in range(k) for a in (k + 2 + i, 2 + i)]
        nodes = [
            helper.make_node("Reshape", ["data", "s1"], ["a"]),
            helper.make_node("Transpose", ["a"], ["b"], perm=perm),
            helper.make_node("Reshape", ["b", "s2"], ["output"]),
        ]
        inits = [_ints("s1", split), _ints("s2", [n, depth, *(d * bs for d in spatial)])]
    return _graph(nodes, inits, shape, elem_type)


def _openvino(case: Case, data: np.ndarray, threads: int) -> Callable[[], object] | None:
    try:
        import openvino as ov
        import openvino.opset15 as ops
    except ImportError:
        return None
    parameter = ops.parameter(list(data.shape), data.dtype)
    if case.op_type in ("BatchToSpace", "SpaceToBatch"):
        build = ops.batch_to_space if case.op_type == "BatchToSpace" else ops.space_to_batch
        node = build(
            parameter, *(ops.constant(np.asarray(v, np.int64)) for v in case.index.values())
        )
    else:
        build = ops.depth_to_space if case.op_type == "DepthToSpace" else ops.space_to_depth
        node = build(parameter, case.attributes["mode"], case.attributes["block_size"])
    compiled = ov.Core().compile_model(
        ov.Model([node], [parameter]),
        "CPU",
        {
            "INFERENCE_PRECISION_HINT": "f32",
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
        },
    )
    request = compiled.create_infer_request()
    return lambda: request.infer([data])


def measure(case: Case, dtype: str, threads: int, repeats: int) -> dict:
    elem_type, np_type = DTYPES[dtype]
    model = single_op_model(
        case.op_type, list(case.shape), elem_type, index=case.index, attributes=case.attributes
    )
    ours = b2s_onnx.lower(model, threads=threads)
    rng = np.random.default_rng(0)
    data = (
        rng.integers(0, 255, case.shape) if dtype == "u8" else rng.standard_normal(case.shape)
    ).astype(np_type)
    floor = _graph([helper.make_node("Identity", ["data"], ["output"])], [], case.shape, elem_type)
    sessions = {
        "ours": make_session(ours, threads),
        "naive": make_session(naive_model(case, elem_type), threads),
        "floor": make_session(floor, threads),
    }
    module = OP_MODULES[case.op_type]
    if case.index:
        expected = module.reference(data, *(np.asarray(v) for v in case.index.values()))
    else:
        expected = module.reference(data, case.attributes["block_size"], case.attributes["mode"])
    for name in ("ours", "naive"):
        got = sessions[name].run(None, {"data": data})[0]
        assert got.tobytes() == expected.tobytes(), f"{name} is wrong for {case.name}"
    runs: dict[str, Callable[[], object]] = {
        name: (lambda s=s: s.run(None, {"data": data})) for name, s in sessions.items()
    }
    peer = _openvino(case, data, threads)
    if peer is not None:
        runs["openvino"] = peer
    seconds = interleaved_medians(runs, repeats, settle_for=settle_seconds(threads))
    ms = {name: value * 1e3 for name, value in seconds.items()}
    result = {
        "case": case.name,
        "dtype": dtype,
        "threads": threads,
        "megabytes": data.nbytes / 1e6,
        "median_ms": ms,
        "ours_ops": [n.op_type for n in ours.graph.node],
        "ours_over_floor": ms["ours"] / ms["floor"],
        "ours_over_naive": ms["ours"] / ms["naive"],
    }
    if "openvino" in ms:
        result["ours_over_openvino"] = ms["ours"] / ms["openvino"]
    return result


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description="lowered data-movement ops vs peers")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--sizes", nargs="+", default=["50MB", "1MB"], choices=["50MB", "1MB"])
    parser.add_argument(
        "--repeats",
        type=int,
        default=15,
        help="repeats for ~50 MB cases (~1 MB cases run 10x as many)",
    )
    parser.add_argument("--quick", action="store_true", help="f32 only, 1 thread, 7 repeats")
    parser.add_argument("--cases", nargs="+", default=None, help="case names to keep")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.threads, args.dtypes, args.repeats = [1], ["f32"], 7
    print(
        f"{'case':<16}{'dtype':>5}{'thr':>4}{'MB':>7}{'ours':>8}{'naive':>8}{'ov':>8}"
        f"{'floor':>7}{'/ov':>7}{'/naive':>7}{'/floor':>7}  ours' ops"
    )
    results = []
    for threads in args.threads:
        for size in args.sizes:
            for case in matrix(4 if size == "50MB" else 1):
                if args.cases and case.name not in args.cases:
                    continue
                for dtype in args.dtypes:
                    repeats = args.repeats * (1 if size == "50MB" else 10)
                    r = measure(case, dtype, threads, repeats)
                    results.append(r)
                    m = r["median_ms"]
                    ov = f"{m['openvino']:8.2f}" if "openvino" in m else f"{'-':>8}"
                    ov_ratio = f"{r['ours_over_openvino']:7.2f}" if "openvino" in m else f"{'-':>7}"
                    ops = ">".join(op for op in r["ours_ops"] if op != "Reshape")
                    print(
                        f"{case.name:<16}{dtype:>5}{threads:>4}{r['megabytes']:7.1f}"
                        f"{m['ours']:8.2f}{m['naive']:8.2f}{ov}{m['floor']:7.2f}{ov_ratio}"
                        f"{r['ours_over_naive']:7.2f}{r['ours_over_floor']:7.2f}  {ops}",
                        flush=True,
                    )
    for key, label in (
        ("ours_over_openvino", "ours/openvino"),
        ("ours_over_naive", "ours/naive"),
        ("ours_over_floor", "ours/floor"),
    ):
        values = [r[key] for r in results if key in r]
        if values:
            print(
                f"{label:>14}: geomean {_geomean(values):.2f}, worst {max(values):.2f}, "
                f"best {min(values):.2f} over {len(values)} cases"
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
