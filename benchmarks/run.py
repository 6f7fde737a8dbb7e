"""Latency of lowered graphs in onnxruntime, side by side with a peer and the floor.

For each case, in one process and interleaved round by round (so machine noise hits all
contenders alike): our lowered model in onnxruntime; OpenVINO's native CPU kernel for the
same op (if the ``openvino`` package is installed); and the floor, a plain copy of the
same bytes (an onnxruntime Identity from input to output, and numpy's copy). Reported
as medians of many repeats and as ratios, never as absolute claims.

    python -m benchmarks                 # the default matrix, 1 thread
    python -m benchmarks --threads 1 2 --repeats 50 --json results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.parity.runtime import make_session


@dataclass(frozen=True)
class Case:
    name: str
    op_type: str
    shape: list[int]
    index: dict | None = None
    attributes: dict | None = None
    elem_type: int = TensorProto.FLOAT


CASES = [
    Case(
        "b2s_nhwc_crops",
        "BatchToSpace",
        [64, 56, 56, 64],
        index={"block_shape": [1, 2, 2, 1], "crops_begin": [0, 1, 1, 0], "crops_end": [0, 1, 1, 0]},
    ),
    Case(
        "b2s_nchw",
        "BatchToSpace",
        [64, 64, 56, 56],
        index={"block_shape": [1, 1, 2, 2], "crops_begin": [0, 0, 0, 0], "crops_end": [0, 0, 0, 0]},
    ),
    Case(
        "b2s_nchw_crops",
        "BatchToSpace",
        [64, 64, 56, 56],
        index={"block_shape": [1, 1, 2, 2], "crops_begin": [0, 0, 1, 1], "crops_end": [0, 0, 1, 1]},
    ),
    Case(
        "s2b_nhwc_pads",
        "SpaceToBatch",
        [16, 110, 110, 64],
        index={"block_shape": [1, 2, 2, 1], "pads_begin": [0, 1, 1, 0], "pads_end": [0, 1, 1, 0]},
    ),
    Case(
        "d2s_4d_dcr",
        "DepthToSpace",
        [16, 256, 56, 56],
        attributes={"block_size": 2, "mode": "blocks_first"},
    ),
    Case(
        "d2s_5d_crd",
        "DepthToSpace",
        [4, 64, 16, 28, 28],
        attributes={"block_size": 2, "mode": "depth_first"},
    ),
]


@dataclass
class Timings:
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds)

    def median_ms(self, name: str) -> float:
        return statistics.median(self.samples[name]) * 1e3


def _identity_model(shape: list[int], elem_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "copy",
        [helper.make_tensor_value_info("x", elem_type, shape)],
        [helper.make_tensor_value_info("y", elem_type, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _openvino_runner(case: Case, data: np.ndarray, threads: int) -> Callable[[], object] | None:
    try:
        import openvino as ov
        import openvino.opset15 as ov_ops
    except ImportError:
        return None
    parameter = ov_ops.parameter(list(data.shape), data.dtype)
    if case.op_type in ("BatchToSpace", "SpaceToBatch"):
        fn = ov_ops.batch_to_space if case.op_type == "BatchToSpace" else ov_ops.space_to_batch
        node = fn(parameter, *(ov_ops.constant(np.array(v, np.int64)) for v in case.index.values()))
    else:
        fn = ov_ops.depth_to_space if case.op_type == "DepthToSpace" else ov_ops.space_to_depth
        node = fn(parameter, case.attributes["mode"], case.attributes["block_size"])
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


def measure(case: Case, threads: int, repeats: int) -> dict:
    model = single_op_model(
        case.op_type, case.shape, case.elem_type, index=case.index, attributes=case.attributes
    )
    lowered = b2s_onnx.lower(model)
    data = np.random.default_rng(0).standard_normal(case.shape).astype(np.float32)
    ours = make_session(lowered, threads)
    floor = make_session(_identity_model(case.shape, case.elem_type), threads)
    target = np.empty_like(data)
    contenders: dict[str, Callable[[], object]] = {
        "ours": lambda: ours.run(None, {"data": data}),
        "copy_ort": lambda: floor.run(None, {"x": data}),
        "copy_numpy": lambda: np.copyto(target, data),
    }
    openvino = _openvino_runner(case, data, threads)
    if openvino is not None:
        contenders["openvino"] = openvino
    timings = Timings()
    for _ in range(3):
        for run in contenders.values():
            run()
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            timings.add(name, time.perf_counter() - start)
    medians = {name: timings.median_ms(name) for name in contenders}
    floor_ms = min(medians["copy_ort"], medians["copy_numpy"])
    result = {
        "case": case.name,
        "threads": threads,
        "megabytes": data.nbytes / 1e6,
        "lowered_ops": [n.op_type for n in lowered.graph.node],
        "median_ms": medians,
        "ours_over_floor": medians["ours"] / floor_ms,
    }
    if "openvino" in medians:
        result["ours_over_openvino"] = medians["ours"] / medians["openvino"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--cases", nargs="+", default=None, help="case names to run")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    cases = [c for c in CASES if args.cases is None or c.name in args.cases]
    results = []
    header = (
        f"{'case':<16}{'thr':>4}{'MB':>7}{'ours ms':>9}{'copy ms':>9}{'ov ms':>8}"
        f"{'ours/copy':>10}{'ours/ov':>9}  lowering"
    )
    print(header)
    for threads in args.threads:
        for case in cases:
            r = measure(case, threads, args.repeats)
            results.append(r)
            m = r["median_ms"]
            ov_ms = f"{m['openvino']:8.2f}" if "openvino" in m else f"{'-':>8}"
            ov_ratio = f"{r['ours_over_openvino']:9.2f}" if "openvino" in m else f"{'-':>9}"
            print(
                f"{case.name:<16}{threads:>4}{r['megabytes']:7.1f}{m['ours']:9.2f}"
                f"{min(m['copy_ort'], m['copy_numpy']):9.2f}{ov_ms}"
                f"{r['ours_over_floor']:10.2f}{ov_ratio}  {'>'.join(r['lowered_ops'])}",
                flush=True,
            )
    ratios = [r["ours_over_floor"] for r in results]
    print(f"geometric mean ours/copy: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
