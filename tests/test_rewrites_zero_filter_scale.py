"""`zero-filter-scale`: a QDQ Conv whose zero filter has weight scale 0 (or near it) and a
bias: onnxruntime's QLinearConv would put the bias on a grid of x_scale * 0 and output 0
for that channel; rescaled, the fused graph computes the bias, bit for bit what the
unfused graph computes, and every other channel keeps its bits."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from b2s_onnx.ir.int8_coverage import optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import CONVERTED_MODEL_REWRITES
from b2s_onnx.rewrites.zero_filter_scale import LIVE_FILTER, ZeroFilterScale
from tests.helpers import assert_same_bits, float_model, rewritten_copy, run_unoptimized

NAME = ZeroFilterScale.name
CHANNELS = 8
SHAPE = [1, 4, 7, 9]


def _model(dead_scale=0.0, dead_weights=True, per_tensor=False, reader="QuantizeLinear"):
    """x -> Q/DQ -> Conv(DQ(int8 W), bias) -> [Q/DQ | Relu] -> y, channel 1's filter all
    zeros with scale ``dead_scale``."""
    rng = np.random.default_rng(1)
    q = rng.integers(-127, 128, (CHANNELS, SHAPE[1], 3, 3)).astype(np.int8)
    if dead_weights:
        q[1] = 0
    scales = rng.uniform(0.002, 0.004, CHANNELS).astype(np.float32)
    scales[1] = dead_scale
    if per_tensor:
        q[:] = 0
        scales = np.float32(dead_scale)
    values = {
        "s": np.float32(0.05),
        "z": np.uint8(128),
        "wq": q,
        "ws": scales,
        "wz": np.zeros(CHANNELS, np.int8) if not per_tensor else np.int8(0),
        "b": rng.uniform(0.1, 0.5, CHANNELS).astype(np.float32),
        "ys": np.float32(0.02),
        "yz": np.uint8(128),
    }
    axis = {} if per_tensor else {"axis": 0}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], **axis),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
    ]
    if reader == "QuantizeLinear":
        nodes += [
            helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
            helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"]),
        ]
    else:
        del values["ys"], values["yz"]
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return onnx.shape_inference.infer_shapes(float_model(nodes, values, SHAPE, opset=19))


def _feeds():
    return {"x": (np.random.default_rng(0).standard_normal(SHAPE) * 2).astype(np.float32)}


@pytest.mark.parametrize("dead_scale", [0.0, 1e-30, 1e-12])
def test_a_zero_filter_with_a_vanishing_scale_keeps_its_bias_in_the_fused_kernel(dead_scale):
    model = _model(dead_scale)
    feeds = _feeds()
    expected = run_unoptimized(model, feeds)
    # As written, onnxruntime's fused QLinearConv loses channel 1's bias.
    assert not np.array_equal(run_onnxruntime(model, feeds)["y"][:, 1], expected[:, 1])
    report, rewritten = rewritten_copy(model, ZeroFilterScale())
    assert [(f.rewrite, f.detail) for f in report.fired] == [(NAME, "1 zero filters rescaled")]
    fused = run_onnxruntime(rewritten, feeds)["y"]
    assert_same_bits(fused[:, 1], expected[:, 1])
    others = [c for c in range(CHANNELS) if c != 1]
    assert_same_bits(fused[:, others], run_onnxruntime(model, feeds)["y"][:, others])


def test_an_ir_with_a_zero_filter_of_scale_0_converts_to_openvinos_outputs(tmp_path):
    """OpenVINO's INT8 run outputs the bias for the dead channel; so does the conversion,
    whose Conv onnxruntime runs as a QLinearConv (16 -> 32 channels)."""
    ov = pytest.importorskip("openvino")
    ops = pytest.importorskip("openvino.opset13")
    import b2s_onnx

    rng = np.random.default_rng(4)
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    shape, channels, step = [1, 16, 7, 9], 32, 0.0157
    data = ops.parameter(shape, np.float32, name="x")
    low, high = -128 * 0.03, 127 * 0.03  # zero on a level: a QDQ form exists
    quantized = ops.fake_quantize(data, const(low), const(high), const(low), const(high), 256)
    q = rng.integers(-127, 128, (channels, shape[1], 3, 3)).astype(np.int8)
    q[1] = 0
    scales = rng.uniform(0.0005, 0.001, (channels, 1, 1, 1)).astype(np.float32)
    scales[1] = 0
    weights = ops.multiply(ops.convert(ops.constant(q), np.float32), const(scales))
    conv = ops.convolution(quantized, weights, [1, 1], [1, 1], [1, 1], [1, 1])
    biased = ops.add(conv, const(rng.uniform(0.1, 0.5, (1, channels, 1, 1))))
    low, high = -128 * step, 127 * step
    out = ops.fake_quantize(biased, const(low), const(high), const(low), const(high), 256)
    xml = tmp_path / "dead.xml"
    ov.save_model(ov.Model([out], [data]), xml, compress_to_fp16=False)
    feeds = {"x": (rng.standard_normal(shape) * 2).astype(np.float32)}
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = np.asarray(compiled(feeds)[0])
    converted = b2s_onnx.convert_ir(xml)
    assert "QLinearConv" in {n.op_type for n in optimized_graph(converted).node}
    got = next(iter(run_onnxruntime(converted, feeds).values()))
    assert np.abs(got - expected)[:, 1].max() <= step * 1.001
    # The live channels as close as OpenVINO's own float simulation is to its INT8 run.
    simulation = ov.Core().compile_model(
        xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "LP_TRANSFORMS_MODE": False}
    )
    spread = np.abs(np.asarray(simulation(feeds)[0]) - expected).max()
    assert np.abs(got - expected).max() <= spread + step * 1.001


def test_a_layer_of_zero_filters_with_one_zero_scale_gets_scales_per_channel():
    model = _model(0.0, per_tensor=True)
    feeds = _feeds()
    report, rewritten = rewritten_copy(model, ZeroFilterScale())
    assert [f.detail for f in report.fired] == [f"{CHANNELS} zero filters rescaled"]
    assert_same_bits(run_onnxruntime(rewritten, feeds)["y"], run_unoptimized(model, feeds))


@pytest.mark.parametrize(
    ("case", "declined"),
    [
        ({"dead_scale": 0.003}, None),  # a normal scale: nothing to repair
        ({"reader": "Relu"}, None),  # read in float: no QLinearConv, the bias added in float
        (
            {"dead_scale": 1e-30, "dead_weights": False},
            LIVE_FILTER,
        ),
    ],
    ids=["normal-scale", "read-in-float", "live-filter"],
)
def test_what_is_no_zero_filter_to_repair_is_left_alone(case, declined):
    report, _ = rewritten_copy(_model(**case), ZeroFilterScale())
    assert not report.fired
    assert [d.reason for d in report.declined] == ([declined] if declined else [])


def test_it_runs_after_the_rewrites_that_form_quantized_convs():
    names = [r.name for r in CONVERTED_MODEL_REWRITES]
    for former in (
        "crelu-as-stacked-conv",
        "channel-scale-as-depthwise-conv",
        "pad-channels-to-block",
    ):
        assert names.index(former) < names.index(NAME)


def _matmul(dead_scale=0.0):
    """x -> Q/DQ -> MatMul(DQ(int8 W [K, N], per column)) -> Add(bias [N]) -> Q/DQ -> y,
    column 1 all zeros with scale ``dead_scale`` (onnxruntime fuses it into QGemm)."""
    rng = np.random.default_rng(2)
    rows, columns = 32, 16
    q = rng.integers(-127, 128, (rows, columns)).astype(np.int8)
    q[:, 1] = 0
    scales = rng.uniform(0.002, 0.004, columns).astype(np.float32)
    scales[1] = dead_scale
    values = {
        "s": np.float32(0.05),
        "z": np.uint8(128),
        "wq": q,
        "ws": scales,
        "wz": np.zeros(columns, np.int8),
        "b": rng.uniform(0.1, 0.5, columns).astype(np.float32),
        "ys": np.float32(0.02),
        "yz": np.uint8(128),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=1),
        helper.make_node("MatMul", ["xd", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["c"]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"]),
    ]
    return onnx.shape_inference.infer_shapes(float_model(nodes, values, [4, rows], opset=19))


def test_a_zero_column_of_a_quantized_matmul_with_a_bias_keeps_its_bias_in_qgemm():
    model = _matmul()
    feeds = {"x": (np.random.default_rng(3).standard_normal([4, 32]) * 2).astype(np.float32)}
    expected = run_unoptimized(model, feeds)
    assert "QGemm" in {n.op_type for n in optimized_graph(model).node}
    assert not np.array_equal(run_onnxruntime(model, feeds)["y"][:, 1], expected[:, 1])
    report, rewritten = rewritten_copy(model, ZeroFilterScale())
    assert [(f.rewrite, f.detail) for f in report.fired] == [(NAME, "1 zero filters rescaled")]
    fused = run_onnxruntime(rewritten, feeds)["y"]
    assert_same_bits(fused[:, 1], expected[:, 1])
    others = [c for c in range(16) if c != 1]
    assert_same_bits(fused[:, others], run_onnxruntime(model, feeds)["y"][:, others])
