"""`grouped-conv-integer`: a quantized grouped Conv with 2-8 channels a group, quantized
again, runs as ConvInteger (onnxruntime's grouped QLinearConv is 2-8x slower there), with
OpenVINO's arithmetic; wider groups and depthwise Convs keep QLinearConv."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.ir.int8_coverage import optimized_op_counts
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.grouped_conv_integer import GroupedConvInteger

NAME = GroupedConvInteger.name
X_SCALE, X_ZERO = np.float32(0.05), np.uint8(7)
Y_SCALE, Y_ZERO = np.float32(0.04), np.uint8(120)


def _model(channels: int, groups: int, bias: bool = True, size=(30, 28)) -> onnx.ModelProto:
    """x -> Q -> DQ -> grouped Conv 3x3 (int8 weights per channel) -> Q -> DQ -> y. The
    default map is larger than `quantized-grouped-conv-in-blocks` takes (784 positions)."""
    rng = np.random.default_rng(channels * 7 + groups)
    per_group = channels // groups
    values = {
        "x_scale": X_SCALE,
        "x_zero": X_ZERO,
        "y_scale": Y_SCALE,
        "y_zero": Y_ZERO,
        "w_q": rng.integers(-127, 128, [channels, per_group, 3, 3]).astype(np.int8),
        "w_scale": rng.uniform(0.005, 0.01, channels).astype(np.float32),
        "w_zero": np.zeros(channels, np.int8),
    }
    inputs = ["x_dq", "w"]
    if bias:
        values["b"] = rng.standard_normal(channels).astype(np.float32)
        inputs.append("b")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
        helper.make_node("Conv", inputs, ["c"], name="conv", group=groups, pads=[1] * 4),
        helper.make_node("QuantizeLinear", ["c", "y_scale", "y_zero"], ["c_q"]),
        helper.make_node("DequantizeLinear", ["c_q", "y_scale", "y_zero"], ["y"]),
    ]
    shape = [1, channels, *size]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": (np.random.default_rng(3).standard_normal(dims) * 3).astype(np.float32)}


def _openvino_formula(model: onnx.ModelProto, feeds) -> np.ndarray:
    """OpenVINO's order: exact int32 sums, times scale_x * scale_w, plus the float bias,
    then the output quantization."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    groups = next(a.i for a in conv.attribute if a.name == "group")
    x = np.clip(np.round(feeds["x"] / X_SCALE) + X_ZERO, 0, 255).astype(np.int64) - int(X_ZERO)
    x = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    w = values["w_q"].astype(np.int64)
    channels, per_group = w.shape[:2]
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    sums = np.zeros((1, channels, *windows.shape[2:4]), np.int64)
    for o in range(channels):
        g = o // (channels // groups)
        patch = windows[0, g * per_group : (g + 1) * per_group]
        sums[0, o] = np.einsum("cyxij,cij->yx", patch, w[o])
    scale = (X_SCALE * values["w_scale"]).astype(np.float32).reshape(1, -1, 1, 1)
    y = sums.astype(np.float32) * scale
    if "b" in values:
        y = y + values["b"].reshape(1, -1, 1, 1)
    q = np.clip(np.round(y / Y_SCALE) + Y_ZERO, 0, 255)
    return ((q - Y_ZERO) * Y_SCALE).astype(np.float32)


@pytest.mark.parametrize(("channels", "groups"), [(32, 8), (64, 32), (64, 8), (24, 3)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_narrow_groups_run_as_conv_integer_with_openvinos_arithmetic(channels, groups, bias):
    model = _model(channels, groups, bias)
    feeds = _feeds(model)
    before = run_onnxruntime(model, feeds)["y"]
    expected = _openvino_formula(model, feeds)
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get(NAME) == 1
    counts = optimized_op_counts(model)
    assert counts["ConvInteger"] == 1
    assert counts["QLinearConv"] == 0
    after = run_onnxruntime(model, feeds)["y"]
    np.testing.assert_array_equal(after, expected)
    # QLinearConv rounds its bias to int32 first: at most one output step apart.
    assert np.abs(after - before).max() <= Y_SCALE * 1.001


@pytest.mark.parametrize(("channels", "groups"), [(64, 4), (128, 8)])
def test_groups_of_16_channels_or_more_keep_qlinearconv(channels, groups):
    model = _model(channels, groups)
    report = apply_rewrites(model)
    assert NAME not in report.counts()
    assert any(d.rewrite == NAME and "channels a group" in d.reason for d in report.declined)
    assert optimized_op_counts(model)["QLinearConv"] == 1


def test_depthwise_keeps_qlinearconv():
    model = _model(32, 32)
    report = apply_rewrites(model)
    assert NAME not in report.counts()
    assert optimized_op_counts(model)["QLinearConv"] == 1
