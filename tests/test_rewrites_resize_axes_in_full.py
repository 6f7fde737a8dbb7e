"""`resize-axes-in-full`: a Resize with ``axes`` gets scales or sizes for every axis, which
onnxruntime's default session loads where it refused the ``axes`` form (an 8-bit Resize
between QLinearConvs), computing the same bits."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from b2s_onnx.rewrites import LOADING_REWRITES, apply_rewrites
from b2s_onnx.rewrites.resize_axes_in_full import ResizeAxesInFull
from tests.helpers import ORT_ERRORS, assert_same_bits, assert_well_formed, float_model

NAME = ResizeAxesInFull.name
SHAPE = [1, 16, 12, 20]


def _session(model: onnx.ModelProto, level: ort.GraphOptimizationLevel):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 4
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _quantized_conv(x: str, name: str, nodes: list, initializers: list) -> str:
    """Conv + Relu between QuantizeLinear/DequantizeLinear pairs: a QLinearConv in
    onnxruntime, which its layout transformation runs in NHWC."""
    weights = (np.random.default_rng(len(nodes)).standard_normal([16, 16, 3, 3]) * 0.1).astype(
        np.float32
    )
    initializers.append(numpy_helper.from_array(weights, f"{name}_w"))
    nodes += [
        helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_c"], pads=[1] * 4),
        helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"]),
        helper.make_node("QuantizeLinear", [f"{name}_r", "s", "z"], [f"{name}_q"]),
        helper.make_node("DequantizeLinear", [f"{name}_q", "s", "z"], [f"{name}_d"]),
    ]
    return f"{name}_d"


def _quantized_upsampling(operand: str, value: np.ndarray, mode: str = "linear"):
    """QLinearConv -> 8-bit Resize on axes [2, 3] -> QLinearConv."""
    initializers = [
        numpy_helper.from_array(np.float32(0.05), "s"),
        numpy_helper.from_array(np.uint8(0), "z"),
        numpy_helper.from_array(value, "operand"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
    ]
    before = _quantized_conv("xd", "a", nodes, initializers)
    inputs = [before, "", "operand"] if operand == "scales" else [before, "", "", "operand"]
    nodes += [
        helper.make_node("Resize", inputs, ["r"], name="up", mode=mode, axes=[2, 3]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
        helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"]),
    ]
    after = _quantized_conv("rd", "b", nodes, initializers)
    nodes.append(helper.make_node("Identity", [after], ["y"]))
    model = float_model(nodes, {}, SHAPE)
    model.graph.initializer.extend(initializers)
    return model


def _rewritten(model: onnx.ModelProto) -> tuple:
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten, LOADING_REWRITES)
    return report, rewritten


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value or 6 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = (rng.random(dims) * 4).astype(np.float32)
    return feeds


@pytest.mark.parametrize(
    ("operand", "value"),
    [("sizes", np.asarray([24, 40], np.int64)), ("scales", np.asarray([2, 2], np.float32))],
)
def test_an_8_bit_resize_between_qlinearconvs_loads_in_the_default_session(operand, value):
    model = _quantized_upsampling(operand, value)
    with pytest.raises(ORT_ERRORS):  # onnxruntime's own refusal, loading or running
        _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, _feeds(model))
    report, rewritten = _rewritten(model)
    assert [(f.rewrite, f.node) for f in report.fired] == [(NAME, "up")]
    resize = next(n for n in rewritten.graph.node if n.op_type == "Resize")
    assert all(a.name != "axes" for a in resize.attribute)
    assert_well_formed(rewritten)
    feeds = _feeds(model)
    expected = _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED).run(None, feeds)
    actual = _session(rewritten, ort.GraphOptimizationLevel.ORT_ENABLE_ALL).run(None, feeds)
    assert_same_bits(actual[0], expected[0])


def _float_resize(inputs: list[str], shape: list, **attributes) -> onnx.ModelProto:
    nodes = [helper.make_node("Resize", ["x", *inputs], ["y"], name="up", **attributes)]
    return float_model(nodes, {}, shape)


@pytest.mark.parametrize(
    ("axes", "operand", "value"),
    [
        ([2, 3], "sizes", [7, 9]),
        ([-1], "scales", [2.5]),
        ([2], "scales", [0.5]),
        ([3, 2], "sizes", [30, 5]),
    ],
)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_constant_operands_on_any_axes_keep_every_bit(axes, operand, value, mode, dynamic):
    """With unknown dims the sizes of the axes not listed come from the input's shape."""
    dtype = np.int64 if operand == "sizes" else np.float32
    inputs = ["", "", "v"] if operand == "sizes" else ["", "v"]
    shape = [1, None, 6, None] if dynamic else [1, 4, 6, 8]
    model = _float_resize(inputs, shape, mode=mode, axes=axes)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype), "v"))
    report, rewritten = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    feeds = {"x": np.random.default_rng(1).random([1, 4, 6, 8]).astype(np.float32)}
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    expected = _session(model, level).run(None, feeds)[0]
    assert_same_bits(_session(rewritten, level).run(None, feeds)[0], expected)
    if not dynamic:
        assert [n.op_type for n in rewritten.graph.node] == ["Resize"]


def test_operands_known_only_at_run_time_are_completed_at_run_time():
    model = _float_resize(["", "", "sizes"], [1, None, 6, 8], mode="nearest", axes=[2, 3])
    model.graph.input.append(helper.make_tensor_value_info("sizes", TensorProto.INT64, [2]))
    report, rewritten = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    assert_well_formed(rewritten)
    feeds = {
        "x": np.random.default_rng(2).random([1, 3, 6, 8]).astype(np.float32),
        "sizes": np.asarray([11, 5], np.int64),
    }
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    expected = _session(model, level).run(None, feeds)[0]
    actual = _session(rewritten, level).run(None, feeds)[0]
    assert actual.shape == (1, 3, 11, 5)
    assert_same_bits(actual, expected)


def test_a_keep_aspect_ratio_policy_is_declined():
    """The policy picks one scale over the listed axes: listing all would change it."""
    model = _float_resize(
        ["", "", "v"], [1, 4, 6, 8], axes=[2, 3], keep_aspect_ratio_policy="not_larger"
    )
    model.graph.initializer.append(numpy_helper.from_array(np.asarray([12, 12], np.int64), "v"))
    report, rewritten = _rewritten(model)
    assert not report.fired
    assert "keep_aspect_ratio_policy" in report.declined[0].reason
    assert rewritten == model


def test_a_resize_without_axes_is_left_alone():
    model = _float_resize(["", "v"], [1, 4, 6, 8], mode="nearest")
    model.graph.initializer.append(numpy_helper.from_array(np.ones(4, np.float32) * 2, "v"))
    report, rewritten = _rewritten(model)
    assert not report.fired
    assert not report.declined
    assert rewritten == model


def test_an_int8_ir_upsampling_between_quantized_convolutions_converts_and_loads(tmp_path):
    """NNCF's road-segmentation pattern: bilinear Interpolate on axes [2, 3] between
    FakeQuantized convolutions. Converted also without fuse (the rewrite is not one of the
    optional forms); both load in the default session and agree with OpenVINO."""
    ov = pytest.importorskip("openvino")
    ops = pytest.importorskip("openvino.opset13")
    rng = np.random.default_rng(3)

    def fq(x, low, high):
        c = lambda v: ops.constant(np.float32(v))  # noqa: E731
        return ops.fake_quantize(x, c(low), c(high), c(low), c(high), 256)

    def conv(x):
        w = ops.constant((rng.standard_normal([8, 8, 3, 3]) * 0.1).astype(np.float32))
        wq = fq(w, -0.4, 0.4)
        return ops.relu(ops.convolution(fq(x, 0, 4), wq, [1, 1], [1, 1], [1, 1], [1, 1]))

    data = ops.parameter([1, 8, 24, 40], np.float32, name="image")
    up = ops.interpolate(
        conv(data),
        ops.constant(np.asarray([48, 80], np.int64)),
        "linear",
        "sizes",
        coordinate_transformation_mode="align_corners",
        axes=ops.constant(np.asarray([2, 3], np.int64)),
    )
    xml = tmp_path / "int8.xml"
    ov.save_model(ov.Model([conv(fq(up, 0, 4))], [data], "up"), xml, compress_to_fp16=False)
    feeds = {"image": (rng.random([1, 8, 24, 40]) * 4).astype(np.float32)}
    # OpenVINO's float simulation of the FakeQuantizes: its INT8 plugin moves these
    # asymmetric weight ranges by up to 0.5 on its own (the converted model is as far from
    # it in the float form as in QDQ).
    config = {"INFERENCE_PRECISION_HINT": "f32", "LP_TRANSFORMS_MODE": False}
    compiled = ov.Core().compile_model(xml, "CPU", config)
    expected = np.asarray(compiled(feeds)[compiled.outputs[0]])
    for fuse in (True, False):
        converted = b2s_onnx.convert_ir(xml, fuse=fuse)
        resize = [n for n in converted.graph.node if n.op_type == "Resize"]
        assert resize
        assert all(a.name != "axes" for n in resize for a in n.attribute)
        session = _session(converted, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        (actual,) = session.run(None, feeds)
        np.testing.assert_allclose(actual, expected, atol=0.01)
