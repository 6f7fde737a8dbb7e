"""INT8 IRs as QDQ: FakeQuantize becomes QuantizeLinear/DequantizeLinear exactly where the
levels allow, compressed weights stay integers, onnxruntime runs the layers on integer
kernels, and the outputs agree with OpenVINO's INT8 results as well as OpenVINO's own
float simulation does."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.ir.converters.quantize import QdqPlan, qdq_plan
from b2s_onnx.ir.int8_coverage import coverage, int8_layers, optimized_graph, optimized_op_counts
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.per_axis_quantize_guard import PerAxisQuantizeGuard

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "models" / "int8"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"


# -- the plan ---------------------------------------------------------------------------


def test_symmetric_256_levels_become_uint8_with_zero_point_128():
    plan = qdq_plan(256, -1.28, 1.27, -1.28, 1.27)
    assert isinstance(plan, QdqPlan)
    assert plan.zero_point == 128
    assert plan.scale_in == pytest.approx(0.01)
    assert plan.clip is None
    assert plan.axis is None


def test_ranges_differing_between_input_and_output_keep_one_zero_point():
    plan = qdq_plan(256, 0.0, 2.55, 0.0, 5.1)
    assert isinstance(plan, QdqPlan)
    assert plan.scale_out == pytest.approx(2 * plan.scale_in)


def test_fewer_levels_clamp_before_quantizing():
    plan = qdq_plan(255, -1.27, 1.27, -1.27, 1.27)
    assert isinstance(plan, QdqPlan)
    assert plan.clip is not None


def test_per_channel_ranges_quantize_along_their_axis():
    low = np.asarray([0.0, -1.28, 0.0], np.float32).reshape(1, 3, 1, 1)
    high = np.asarray([2.55, 1.27, 5.1], np.float32).reshape(1, 3, 1, 1)
    plan = qdq_plan(256, low, high, low, high)
    assert isinstance(plan, QdqPlan)
    assert plan.axis == -3
    assert list(plan.zero_point) == [0, 128, 0]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ((256, 1.0, 2.0, 1.0, 2.0), "does not fit uint8"),
        ((256, -0.43, 1.0, -0.43, 1.0), "zero is not one of the levels"),
        ((1024, 0.0, 1.0, 0.0, 1.0), "does not fit 8 bits"),
        ((256, 1.0, 1.0, 1.0, 1.0), "empty or inverted"),
        ((256, np.ones((1, 2, 2)), np.full((1, 2, 2), 2.0), 1.0, 2.0), "several axes"),
    ],
)
def test_fake_quantize_without_an_exact_qdq_form_says_why(args, reason):
    assert reason in qdq_plan(*args)


# -- one FakeQuantize against OpenVINO's ------------------------------------------------


def _fake_quantize_ir(tmp_path, levels, low, high, out_low=None, out_high=None):
    data = ops.parameter([2, 3, 8, 8], np.float32, name="data")
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    out_low = low if out_low is None else out_low
    out_high = high if out_high is None else out_high
    fq = ops.fake_quantize(data, const(low), const(high), const(out_low), const(out_high), levels)
    xml = tmp_path / "fq.xml"
    ov.save_model(ov.Model([fq], [data]), xml, compress_to_fp16=False)
    return xml


def _openvino(xml, feeds, **config):
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32", **config})
    return [np.asarray(compiled(feeds)[port]) for port in compiled.outputs]


FQ_CASES = {
    "u8 256 levels": (256, 0.0, 2.55),
    "symmetric 256": (256, -1.28, 1.27),
    "255 levels": (255, -1.27, 1.27),
    "16 levels": (16, 0.0, 1.5),
    "rescaled output": (256, 0.0, 2.55, 0.0, 1.0),
}


@pytest.mark.parametrize("case", FQ_CASES.values(), ids=FQ_CASES.keys())
def test_fake_quantize_as_qdq_matches_openvino_to_the_level(tmp_path, case):
    xml = _fake_quantize_ir(tmp_path, *case)
    converted = b2s_onnx.convert_ir(xml)
    assert "QuantizeLinear" in [n.op_type for n in converted.graph.node]
    rng = np.random.default_rng(0)
    feeds = {"data": (rng.standard_normal([2, 3, 8, 8]) * 2).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (theirs,) = _openvino(xml, feeds)
    step = (
        np.asarray(case[4] if len(case) > 3 else case[2])
        - np.asarray(case[3] if len(case) > 3 else case[1])
    ) / (case[0] - 1)
    # (q - k) * s and q * s + low differ in the last bit; a rounding tie or a one-ulp
    # difference before rounding may move a value by one level, never more, and rarely.
    difference = np.abs(ours - theirs)
    assert np.all(difference <= step * 1.001)
    assert np.mean(difference > step / 2) < 0.01


def test_per_channel_activation_ranges_become_a_per_axis_pair_matching_openvino(tmp_path):
    low = np.asarray([0.0, -1.28, 0.0]).reshape(1, 3, 1, 1)
    high = np.asarray([2.55, 1.27, 5.1]).reshape(1, 3, 1, 1)
    xml = _fake_quantize_ir(tmp_path, 256, low, high)
    converted = b2s_onnx.convert_ir(xml)
    # On a graph input no fusable group precedes the pair: only the guard after it stays.
    assert [n.op_type for n in converted.graph.node] == [
        "QuantizeLinear",
        "DequantizeLinear",
        "Max",
    ]
    rng = np.random.default_rng(0)
    feeds = {"data": (rng.standard_normal([2, 3, 8, 8]) * 2).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (theirs,) = _openvino(xml, feeds)
    step = ((high - low) / 255).astype(np.float32)
    assert np.all(np.abs(ours - theirs) <= step * 1.001)


def _weights_i8(channels_out: int, channels_in: int, group: bool):
    rng = np.random.default_rng(channels_out)
    shape = [channels_out, 1, 1, 3, 3] if group else [channels_out, channels_in, 3, 3]
    q = ops.constant(rng.integers(-127, 128, shape).astype(np.int8))
    scale = np.full([channels_out] + [1] * (len(shape) - 1), 0.01, np.float32)
    return ops.multiply(ops.convert(q, "f32"), ops.constant(scale))


@pytest.mark.parametrize("second", ["conv", "depthwise"])
def test_per_channel_ranges_between_quantized_convolutions_run_and_match_openvino(tmp_path, second):
    """The patterns onnxruntime 1.31 fuses into integer kernels that fail at run time:
    DQ -> Conv -> per-axis Q, and per-axis DQ -> Conv -> Q. The first Conv's output scales
    move into its weights (a per-tensor Q: QLinearConv); before a depthwise Conv
    requantized after it, the input's scales move into the weights too, and the block runs
    as two QLinearConvs. Before a dense Conv, which no integer kernel runs on per-channel
    input scales, the guard after the per-axis DQ must hold."""
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    data = ops.parameter([1, 16, 12, 12], np.float32, name="data")
    x = ops.fake_quantize(data, const(0), const(2.55), const(0), const(2.55), 256)
    x = ops.convolution(x, _weights_i8(16, 16, False), [1, 1], [1, 1], [1, 1], [1, 1])
    # Signed ranges with zero on a level (-128 s .. 127 s), as NNCF writes them.
    high = np.linspace(1.0, 4.0, 16).reshape(1, 16, 1, 1)
    low = -high * 128 / 127
    x = ops.fake_quantize(x, const(low), const(high), const(low), const(high), 256)
    if second == "depthwise":
        x = ops.group_convolution(x, _weights_i8(16, 1, True), [1, 1], [1, 1], [1, 1], [1, 1])
    else:
        x = ops.convolution(x, _weights_i8(16, 16, False), [1, 1], [1, 1], [1, 1], [1, 1])
    x = ops.fake_quantize(x, const(-4 * 128 / 127), const(4), const(-4 * 128 / 127), const(4), 256)
    xml = tmp_path / "per_axis.xml"
    ov.save_model(ov.Model([x], [data]), xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    ops_written = [n.op_type for n in converted.graph.node]
    assert ops_written.count("QuantizeLinear") == 3
    counts = optimized_op_counts(converted)
    if second == "depthwise":
        assert "Max" not in ops_written
        assert counts["QLinearConv"] == 2
        assert coverage(xml, converted).integer == 2
    else:
        assert ops_written.count("Max") == 1, "the guard before the dense Conv stays"
        assert counts["QLinearConv"] == 1
        assert counts["Conv"] == 1
    feeds = {"data": np.random.default_rng(1).uniform(0, 2.5, [1, 16, 12, 12]).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (simulated,) = _openvino(xml, feeds, LP_TRANSFORMS_MODE=False)
    step = 8 / 255
    assert np.mean(np.abs(ours - simulated) > 2 * step) < 0.01


def test_int8_float_keeps_the_arithmetic_form(tmp_path):
    xml = _fake_quantize_ir(tmp_path, 256, 0.0, 2.55)
    converted = b2s_onnx.convert_ir(xml, int8="float")
    assert "QuantizeLinear" not in [n.op_type for n in converted.graph.node]
    with pytest.raises(B2SError, match="int8='fast'"):
        b2s_onnx.convert_ir(xml, int8="fast")


# -- NNCF's INT8 networks -----------------------------------------------------------------

#: Integer kernels each network must get (QLinearConv, QGemm, ConvInteger and
#: MatMulIntegerToFloat for layers whose output is not quantized again): every INT8 layer
#: but hard_swish_block's two depthwise layers read in float. depthwise_separable's
#: depthwise Conv, whose input NNCF quantized per channel, runs as QLinearConv with those
#: scales folded into its weights'.
#: encoder: its twelve weight MatMuls (transposed weights) and both attention score
#: MatMuls; the Softmax x V products stay float, as NNCF leaves them unquantized.
EXPECTED_INTEGER = {
    "conv_stack": 3,
    "depthwise_separable": 3,
    "residual_block": 3,
    "concat_branches": 3,
    "pooling": 3,
    "classifier": 4,
    "ssd_head": 4,
    "encoder": 14,
    "inverted_residual": 11,
    # 2 of its 8: the depthwise layers, read in float by HSwish (docs/int8.md).
    "hard_swish_block": 6,
    # Every layer, including those reading a MaxPool, Split or Concat of quantized tensors.
    "yolo_tiny": 11,
    # Its grouped layers too: ConvInteger at 32x32, a merged QLinearConv at 16x16.
    "grouped_stage": 10,
    # Its CReLU layers (a convolution joined with its negation) as QLinearConvs.
    "crelu_block": 8,
}


#: Networks without MatMuls, whose INT8 layers OpenVINO's runtime model lists one by one
#: (it fuses attention MatMuls into one node).
CONVOLUTIONAL = sorted(set(EXPECTED_INTEGER) - {"encoder", "classifier"})


@pytest.mark.parametrize("name", CONVOLUTIONAL)
def test_int8_layers_are_the_layers_openvino_runs_in_int8(name):
    """The coverage's count of INT8 layers (a FakeQuantize on the data input, or on every
    branch reaching it through MaxPool, Split, Concat, ...) against the precision OpenVINO's
    CPU plugin reports for each convolution of the compiled model."""
    xml = MODELS / name / "int8.xml"
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    in_int8 = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) in ("Convolution", "GroupConvolution", "Deconvolution"):
            in_int8 += info["runtimePrecision"].astype(str) in ("u8", "i8")
    assert int8_layers(xml) == in_int8


def test_a_convolution_on_a_padded_quantized_tensor_is_an_int8_layer(tmp_path):
    """NASNet's ZeroPadding2D: a Pad between the FakeQuantize and the Convolution keeps
    the input's precision in OpenVINO (its runtime precision says u8), so it counts."""
    rng = np.random.default_rng(2)
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    data = ops.parameter([1, 4, 10, 10], np.float32, name="image")
    quantized = ops.fake_quantize(data, const(0), const(4), const(0), const(4), 256)
    padded = ops.pad(quantized, np.asarray([0, 0, 1, 1]), np.asarray([0, 0, 1, 1]), "constant")
    weights = const(rng.standard_normal([8, 4, 3, 3]) * 0.1)
    weights = ops.fake_quantize(weights, const(-0.5), const(0.5), const(-0.5), const(0.5), 255)
    conv = ops.convolution(padded, weights, [1, 1], [0, 0], [0, 0], [1, 1])
    xml = tmp_path / "pad.xml"
    ov.save_model(ov.Model([ops.relu(conv)], [data]), xml, compress_to_fp16=False)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    precisions = [
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Convolution"
    ]
    assert precisions == ["u8"]
    assert int8_layers(xml) == 1


def _image(seed: int, shape=(1, 3, 128, 128)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": (rng.integers(0, 256, shape) / 64.0).astype(np.float32)}


def _input_shape(model: onnx.ModelProto) -> list[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("name", sorted(EXPECTED_INTEGER))
def test_nncf_networks_run_on_integer_kernels(name):
    xml = MODELS / name / "int8.xml"
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    found = coverage(xml, converted)
    assert found.integer >= EXPECTED_INTEGER[name], found
    float_form = b2s_onnx.convert_ir(xml, int8="float")
    assert "QuantizeLinear" not in {n.op_type for n in float_form.graph.node}
    assert not coverage(xml, float_form).integer


@pytest.mark.parametrize("name", sorted(EXPECTED_INTEGER))
def test_nncf_networks_agree_with_openvino_int8_as_its_float_simulation_does(name):
    xml = MODELS / name / "int8.xml"
    converted = b2s_onnx.convert_ir(xml)
    names = [o.name for o in converted.graph.output]
    for seed in range(2):
        feeds = _image(seed, _input_shape(converted))
        ours = run_onnxruntime(converted, feeds)
        int8 = _openvino(xml, feeds)
        simulated = _openvino(xml, feeds, LP_TRANSFORMS_MODE=False)
        for name_out, theirs, sim in zip(names, int8, simulated, strict=True):
            scale = max(float(np.abs(theirs).max()), 1e-6)
            ours_error = float(np.abs(ours[name_out] - theirs).max())
            sim_error = float(np.abs(sim - theirs).max())
            assert ours_error <= max(2 * sim_error, 0.02 * scale), (name_out, ours_error, sim_error)


@pytest.mark.parametrize("how", ["transpose_b", "transpose_layer"])
def test_matmul_on_transposed_compressed_weights_keeps_them_integer(tmp_path, how):
    """MatMul(transpose_b) on ``i8 -> Convert -> Multiply`` weights (how NNCF writes a
    transformer's linear layers): the converter transposes the constant, and the integers
    must follow it, per output column, or onnxruntime runs a float Gemm (or quantizes the
    float weights again itself, per tensor). Likewise through a Transpose layer."""
    rng = np.random.default_rng(3)
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    data = ops.parameter([1, 8, 16], np.float32, name="data")
    x = ops.fake_quantize(data, const(-2.56), const(2.54), const(-2.56), const(2.54), 256)
    q = ops.constant(rng.integers(-127, 128, [24, 16]).astype(np.int8))
    scales = np.linspace(0.005, 0.02, 24, dtype=np.float32).reshape(24, 1)
    weights = ops.multiply(ops.convert(q, "f32"), ops.constant(scales))
    if how == "transpose_b":
        y = ops.matmul(x, weights, False, True)
    else:
        y = ops.matmul(x, ops.transpose(weights, ops.constant(np.asarray([1, 0]))), False, False)
    xml = tmp_path / "matmul_t.xml"
    ov.save_model(ov.Model([y], [data]), xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    producers = {out: n for n in converted.graph.node for out in n.output}
    matmul = next(n for n in converted.graph.node if n.op_type == "MatMul")
    dequantize = producers[matmul.input[1]]
    assert dequantize.op_type == "DequantizeLinear"
    inits = {t.name: numpy_helper.to_array(t) for t in converted.graph.initializer}
    assert inits[dequantize.input[0]].dtype == np.int8
    assert inits[dequantize.input[0]].shape == (16, 24)
    assert inits[dequantize.input[1]].shape == (24,)
    assert next(a.i for a in dequantize.attribute if a.name == "axis") == 1
    counts = optimized_op_counts(converted)
    assert counts["MatMulIntegerToFloat"] == 1
    assert not counts["MatMul"]
    feeds = {"data": rng.uniform(-2.5, 2.5, [1, 8, 16]).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (simulated,) = _openvino(xml, feeds, LP_TRANSFORMS_MODE=False)
    np.testing.assert_allclose(ours, simulated, rtol=1e-5, atol=1e-5)


def _corpus_int8_xml() -> Path:
    xml = CORPUS / "person-attributes-recognition-crossroad-0230" / "model.xml"
    if not xml.is_file():
        pytest.skip("shared/ir-corpus not present")
    return xml


def test_corpus_int8_model_runs_its_quantized_convolutions_on_integer_kernels():
    xml = _corpus_int8_xml()
    found = coverage(xml, b2s_onnx.convert_ir(xml))
    # 58 layers OpenVINO runs in INT8: 42 quantized again (QLinearConv), 12 read in float
    # (ConvInteger), and 4 on a Concat of branches quantized with different scales, split
    # by branch into ConvIntegers (conv-on-branches, counted once each).
    assert found.int8_layers == 58, found
    assert found.integer_kernels["QLinearConv"] >= 42, found
    assert found.integer == 58, found
    assert not found.float_kernels, found


def test_corpus_int8_model_agrees_with_openvino_int8_as_its_float_simulation_does():
    xml = _corpus_int8_xml()
    converted = b2s_onnx.convert_ir(xml)
    data = converted.graph.input[0]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    ours_error: dict[str, float] = {}
    simulation_error: dict[str, float] = {}
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feeds = {data.name: rng.integers(0, 256, shape).astype(np.float32)}
        ours = run_onnxruntime(converted, feeds)
        int8 = _openvino(xml, feeds)
        simulated = _openvino(xml, feeds, LP_TRANSFORMS_MODE=False)
        for output, theirs, sim in zip(converted.graph.output, int8, simulated, strict=True):
            name = output.name
            ours_error[name] = max(
                ours_error.get(name, 0.0), float(np.abs(ours[name] - theirs).max())
            )
            simulation_error[name] = max(
                simulation_error.get(name, 0.0), float(np.abs(sim - theirs).max())
            )
    for name, error in ours_error.items():
        assert error <= 2 * simulation_error[name], (name, error, simulation_error[name])


# -- rewrites that keep unquantized outputs on integer kernels ----------------------------


def _qdq_model(nodes, initializers, shape, opset=18) -> onnx.ModelProto:
    """x -> QuantizeLinear(u8, scale 0.05, zero point 7) -> DequantizeLinear -> ``nodes``."""
    prefix = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
    ]
    values = {"x_scale": np.float32(0.05), "x_zero": np.uint8(7), **initializers}
    graph = helper.make_graph(
        prefix + nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(shape))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _weights(shape, axis, zero=0, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "w_q": rng.integers(-127, 128, shape).astype(np.int8),
        "w_scale": (rng.random(shape[axis]) * 0.01 + 0.001).astype(np.float32),
        "w_zero": np.full(shape[axis], zero, np.int8),
    }


def _conv_model(group=1, bias=True, reader="none", zero=0, strides=(1, 1), channels=4, inputs=4):
    values = _weights([channels, inputs // group, 3, 3], 0, zero)
    conv_inputs = ["x_dq", "w_dq"]
    if bias:
        values["b"] = np.linspace(-1, 1, channels).astype(np.float32)
        conv_inputs.append("b")
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=0),
        helper.make_node(
            "Conv", conv_inputs, ["c"], name="conv", pads=[1, 0, 1, 2], group=group, strides=strides
        ),
    ]
    if reader == "quantize":
        values.update(y_scale=np.float32(0.1), y_zero=np.uint8(128))
        nodes += [
            helper.make_node("QuantizeLinear", ["c", "y_scale", "y_zero"], ["c_q"]),
            helper.make_node("DequantizeLinear", ["c_q", "y_scale", "y_zero"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return _qdq_model(nodes, values, [1, inputs, 7, 6])


def _integer_conv_reference(model: onnx.ModelProto, feeds) -> np.ndarray:
    """OpenVINO's formula: the exact int32 sums, times scale_x * scale_w, plus the bias."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    group = next((a.i for a in conv.attribute if a.name == "group"), 1)
    strides = next((list(a.ints) for a in conv.attribute if a.name == "strides"), [1, 1])
    x = np.clip(np.round(feeds["x"] / values["x_scale"]) + 7, 0, 255).astype(np.int64) - 7
    x = np.pad(x, [(0, 0), (0, 0), (1, 1), (0, 2)])
    w = values["w_q"].astype(np.int64) - values["w_zero"].reshape(-1, 1, 1, 1)
    out_c, per_group, kh, kw = w.shape
    rows = (x.shape[2] - kh) // strides[0] + 1
    cols = (x.shape[3] - kw) // strides[1] + 1
    sums = np.zeros((1, out_c, rows, cols), np.int64)
    for o in range(out_c):
        g = o // (out_c // group)
        for i in range(rows):
            for j in range(cols):
                r, c = i * strides[0], j * strides[1]
                window = x[0, g * per_group : (g + 1) * per_group, r : r + kh, c : c + kw]
                sums[0, o, i, j] = np.sum(window * w[o])
    scale = (np.float32(values["x_scale"]) * values["w_scale"]).astype(np.float32)
    y = sums.astype(np.float32) * scale.reshape(1, -1, 1, 1)
    if "b" in values:
        y = y + values["b"].reshape(1, -1, 1, 1)
    return np.maximum(y, np.float32(0))


def _image_feeds(shape):
    return {"x": (np.random.default_rng(3).standard_normal(shape) * 4).astype(np.float32)}


@pytest.mark.parametrize("group", [1, 2], ids=["dense", "grouped"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("zero", [0, -3], ids=["symmetric", "zero-point-3"])
def test_conv_not_quantized_again_becomes_conv_integer_with_openvinos_arithmetic(group, bias, zero):
    model = _conv_model(group=group, bias=bias, zero=zero, strides=(1, 2))
    feeds = _image_feeds([1, 4, 7, 6])
    before = run_onnxruntime(model, feeds)["y"]
    expected = _integer_conv_reference(model, feeds)
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert [f.rewrite for f in report.fired].count("conv-integer") == 1
    assert "Conv" not in [n.op_type for n in model.graph.node]
    assert optimized_op_counts(model)["ConvInteger"] == 1
    after = run_onnxruntime(model, feeds)["y"]
    # Scaling the exact integer sums is OpenVINO's arithmetic: the same bits.
    assert after.tobytes() == expected.astype(np.float32).tobytes()
    # The float Conv it replaces rounds each product: within float rounding of it.
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * np.abs(before).max())


@pytest.mark.parametrize("rank", [1, 3], ids=["conv1d", "conv3d"])
def test_1d_and_3d_convs_read_in_float_become_conv_integer_with_openvinos_arithmetic(rank):
    """A quantized Conv1d (audio, text) or Conv3d read in float: ConvInteger, as 2-D ones."""
    rng = np.random.default_rng(rank)
    spatial = [11] if rank == 1 else [5, 6, 4]
    w_q = rng.integers(-127, 128, [6, 4] + [3] * rank).astype(np.int8)
    w_scale = rng.uniform(0.01, 0.02, 6).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
        helper.make_node("Conv", ["x_dq", "w", "b"], ["c"], pads=[1] * 2 * rank),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    values = {"w_q": w_q, "w_scale": w_scale, "w_zero": np.zeros(6, np.int8), "b": bias}
    model = _qdq_model(nodes, values, [1, 4, *spatial])
    feeds = _image_feeds([1, 4, *spatial])
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("conv-integer") == 1
    assert optimized_op_counts(model)["ConvInteger"] == 1
    x = np.clip(np.round(feeds["x"] / np.float32(0.05)) + 7, 0, 255).astype(np.int64) - 7
    x = np.pad(x, [(0, 0), (0, 0)] + [(1, 1)] * rank)
    windows = np.lib.stride_tricks.sliding_window_view(
        x, [3] * rank, axis=tuple(range(2, 2 + rank))
    )
    letters = "xyz"[:rank]
    sums = np.einsum(
        f"nk{letters}{letters.upper()},ok{letters.upper()}->no{letters}",
        windows,
        w_q.astype(np.int64),
    )
    scale = (np.float32(0.05) * w_scale).astype(np.float32).reshape(1, -1, *[1] * rank)
    expected = np.maximum(sums.astype(np.float32) * scale + bias.reshape(1, -1, *[1] * rank), 0)
    assert run_onnxruntime(model, feeds)["y"].tobytes() == expected.astype(np.float32).tobytes()


def test_depthwise_conv_read_in_float_stays_float_on_weights_dequantized_once():
    model = _conv_model(group=4)
    feeds = _image_feeds([1, 4, 7, 6])
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    assert "conv-integer" not in report.counts()
    assert any("depthwise" in d.reason for d in report.declined)
    assert report.counts().get("float-weights-for-float-layers") == 1
    counts = optimized_op_counts(model)
    assert counts["DequantizeLinear"] == 1, counts
    after = run_onnxruntime(model, feeds)["y"]
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * np.abs(before).max())


def test_conv_read_by_one_quantize_is_left_for_qlinearconv():
    # 16 output channels: above what few-channels-as-conv-integer takes.
    model = _conv_model(reader="quantize", channels=16)
    report = apply_rewrites(model)
    assert not {"conv-integer", "few-channels-as-conv-integer"} & set(report.counts())
    assert optimized_op_counts(model)["QLinearConv"] == 1


def test_conv_with_per_channel_weight_zero_points_is_declined_with_the_reason():
    model = _conv_model()
    zero = next(t for t in model.graph.initializer if t.name == "w_zero")
    zero.CopyFrom(numpy_helper.from_array(np.asarray([0, 1, 0, 2], np.int8), "w_zero"))
    report = apply_rewrites(model)
    assert "conv-integer" not in report.counts()
    assert any("zero points differ" in d.reason for d in report.declined)


def _matmul_model(reader="none"):
    values = {**_weights([16, 8], 1), "b": np.linspace(-1, 1, 8).astype(np.float32)[None]}
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["y" if reader == "none" else "a"], name="add"),
    ]
    if reader == "quantize":
        values.update(y_scale=np.float32(0.1), y_zero=np.uint8(128))
        nodes += [
            helper.make_node("QuantizeLinear", ["a", "y_scale", "y_zero"], ["a_q"]),
            helper.make_node("DequantizeLinear", ["a_q", "y_scale", "y_zero"], ["y"]),
        ]
    return _qdq_model(nodes, values, [5, 16])


def test_matmul_bias_not_quantized_again_keeps_the_integer_matmul():
    model = _matmul_model()
    feeds = _image_feeds([5, 16])
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("matmul-bias-as-sum") == 1
    counts = optimized_op_counts(model)
    assert counts["MatMulIntegerToFloat"] == 1, counts
    assert not counts["Gemm"], counts
    after = run_onnxruntime(model, feeds)["y"]
    # Integer sums scaled once against onnxruntime's float Gemm: float rounding apart.
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * np.abs(before).max())


def test_matmul_bias_read_by_one_quantize_is_left_for_qgemm():
    model = _matmul_model(reader="quantize")
    report = apply_rewrites(model)
    assert "matmul-bias-as-sum" not in report.counts()
    assert optimized_op_counts(model)["QGemm"] == 1


def _float_input_conv_model(input_op: str):
    """A Conv on int8 weights whose input is ``input_op``'s float output (Relu) or a
    dequantized tensor (Identity of the DequantizeLinear keeps it dequantized)."""
    values = _weights([4, 4, 3, 3], 0)
    nodes = [
        helper.make_node(input_op, ["x_dq"], ["conv_in"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], axis=0),
        helper.make_node("Conv", ["conv_in", "w_dq"], ["y"], name="conv", pads=[1] * 4),
    ]
    if input_op == "Identity":
        nodes = nodes[1:]
        nodes[-1].input[0] = "x_dq"
    return _qdq_model(nodes, values, [1, 4, 7, 6])


def _dequantize_in_onnxruntime(values: dict[str, np.ndarray]) -> np.ndarray:
    node = helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0)
    graph = helper.make_graph(
        [node],
        "dq",
        [],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(values[k], k) for k in ("w_q", "w_scale", "w_zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return run_onnxruntime(model, {})["w"]


def test_float_layer_gets_its_weights_dequantized_once_to_the_same_bits():
    model = _float_input_conv_model("Relu")
    feeds = _image_feeds([1, 4, 7, 6])
    before = run_onnxruntime(model, feeds)["y"]
    original = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("float-weights-for-float-layers") == 1
    assert "DequantizeLinear" not in [n.op_type for n in model.graph.node[2:]]
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    folded = next(
        numpy_helper.to_array(t) for t in model.graph.initializer if t.name == conv.input[1]
    )
    assert folded.tobytes() == _dequantize_in_onnxruntime(original).tobytes()
    after = run_onnxruntime(model, feeds)["y"]
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * np.abs(before).max())


def test_layer_on_a_dequantized_input_keeps_its_integer_weights():
    model = _float_input_conv_model("Identity")
    report = apply_rewrites(model)
    assert "float-weights-for-float-layers" not in report.counts()
    assert optimized_op_counts(model)["ConvInteger"] == 1


def _residual_add_model(readers: tuple[str, ...]):
    """Two dequantized tensors added, the sum read by ``readers`` ("q0", "q128", "neg")."""
    values = {
        "b_q": np.random.default_rng(1).integers(0, 256, [1, 4, 7, 6]).astype(np.uint8),
        "b_scale": np.float32(0.03),
        "b_zero": np.uint8(100),
        "scale_q0": np.float32(0.04),
        "zero_q0": np.uint8(0),
        "scale_q128": np.float32(0.07),
        "zero_q128": np.uint8(128),
    }
    nodes = [
        helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero"], ["b_dq"]),
        helper.make_node("Add", ["x_dq", "b_dq"], ["sum"], name="add"),
    ]
    outputs = []
    for reader in readers:
        if reader == "neg":
            nodes.append(helper.make_node("Neg", ["sum"], ["neg"]))
            outputs.append("neg")
            continue
        nodes += [
            helper.make_node(
                "QuantizeLinear", ["sum", f"scale_{reader}", f"zero_{reader}"], [f"{reader}_q"]
            ),
            helper.make_node(
                "DequantizeLinear",
                [f"{reader}_q", f"scale_{reader}", f"zero_{reader}"],
                [f"{reader}_dq"],
            ),
        ]
        outputs.append(f"{reader}_dq")
    nodes.append(helper.make_node("Concat", outputs, ["y"], axis=1))
    return _qdq_model(nodes, values, [1, 4, 7, 6])


@pytest.mark.parametrize("readers", [("q0", "q128"), ("q0", "q128", "neg")], ids=["two", "three"])
def test_add_read_by_several_quantizers_gets_one_integer_add_each(readers):
    model = _residual_add_model(readers)
    feeds = _image_feeds([1, 4, 7, 6])
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("add-per-quantize") == 1
    assert optimized_op_counts(model)["QLinearAdd"] == 2
    after = run_onnxruntime(model, feeds)["y"]
    # QLinearAdd rounds the rescaled sum once: a value on a rounding edge may move one
    # level (0.07 at most here), never more.
    difference = np.abs(after - before)
    assert difference.max() <= 0.07 * 1.001
    assert np.mean(difference > 1e-6) < 0.05


def test_add_read_by_one_quantizer_is_left_to_onnxruntime():
    model = _residual_add_model(("q0",))
    report = apply_rewrites(model)
    assert "add-per-quantize" not in report.counts()
    assert optimized_op_counts(model)["QLinearAdd"] == 1


# -- the SSD head's detections ----------------------------------------------------------


def _ssd_detections(boxes: np.ndarray, scores: np.ndarray, threshold: float = 0.3):
    """SSD decoding of the head's maps (2 anchors of sizes 0.1 and 0.2 on each cell of the
    64 x 64 grid, variances 0.1 and 0.2): {(anchor, label): corner box} for every
    non-background class scoring at least ``threshold``."""
    side = 64
    cell = np.arange(side * side * 2) // 2
    size = np.where(np.arange(side * side * 2) % 2 == 0, 0.1, 0.2)
    centre_y, centre_x = (cell // side + 0.5) / side, (cell % side + 0.5) / side
    d = boxes.reshape(-1, 4).astype(np.float64)
    cx, cy = centre_x + 0.1 * d[:, 0] * size, centre_y + 0.1 * d[:, 1] * size
    w, h = size * np.exp(0.2 * d[:, 2]), size * np.exp(0.2 * d[:, 3])
    corners = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    anchors, labels = np.nonzero(scores.reshape(-1, 3)[:, 1:] >= threshold)
    return {(int(a), int(c) + 1): corners[a] for a, c in zip(anchors, labels, strict=True)}


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inner = np.clip(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0, None)
    overlap = inner[0] * inner[1]
    area = lambda box: (box[2] - box[0]) * (box[3] - box[1])  # noqa: E731
    return float(overlap / (area(a) + area(b) - overlap))


def _matched(reference: dict, candidate: dict) -> int:
    return sum(
        1 for key, box in reference.items() if key in candidate and _iou(box, candidate[key]) >= 0.9
    )


def test_ssd_head_detections_match_openvino_int8_as_its_float_simulation_does():
    xml = MODELS / "ssd_head" / "int8.xml"
    converted = b2s_onnx.convert_ir(xml)
    names = [o.name for o in converted.graph.output]
    total = ours_matched = simulation_matched = 0
    for seed in range(2):
        feeds = _image(seed)
        ours = run_onnxruntime(converted, feeds)
        theirs = _ssd_detections(*_openvino(xml, feeds))
        simulated = _ssd_detections(*_openvino(xml, feeds, LP_TRANSFORMS_MODE=False))
        total += len(theirs)
        ours_matched += _matched(theirs, _ssd_detections(*(ours[n] for n in names)))
        simulation_matched += _matched(theirs, simulated)
    assert total > 100
    assert ours_matched >= min(0.98 * total, simulation_matched), (
        ours_matched,
        simulation_matched,
        total,
    )


def test_matmul_with_weights_dequantized_per_row_is_declined_with_the_reason():
    model = _matmul_model()
    for tensor in model.graph.initializer:
        if tensor.name == "w_scale":
            tensor.CopyFrom(numpy_helper.from_array(np.full(16, 0.01, np.float32), "w_scale"))
        if tensor.name == "w_zero":
            tensor.CopyFrom(numpy_helper.from_array(np.zeros(16, np.int8), "w_zero"))
    dequantize = next(n for n in model.graph.node if n.output[0] == "w_dq")
    dequantize.attribute[0].i = 0
    report = apply_rewrites(model)
    assert "matmul-bias-as-sum" not in report.counts()
    assert any("per column" in d.reason for d in report.declined)


def _pool_model(pool: str, then: str = "quantize") -> onnx.ModelProto:
    """A dequantized tensor pooled, then quantized again (or, ``then="float"``, output)."""
    attrs = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}
    nodes = [helper.make_node(pool, ["x_dq"], ["p" if then == "quantize" else "y"], **attrs)]
    values = {}
    if then == "quantize":
        nodes += [
            helper.make_node("QuantizeLinear", ["p", "p_scale", "p_zero"], ["p_q"]),
            helper.make_node("DequantizeLinear", ["p_q", "p_scale", "p_zero"], ["y"]),
        ]
        values = {"p_scale": np.float32(0.04), "p_zero": np.uint8(3)}
    return _qdq_model(nodes, values, [1, 8, 9, 10])


def test_average_pool_between_dequantize_and_quantize_stays_float_with_the_same_bits():
    import onnxruntime as ort

    model = _pool_model("AveragePool")
    feeds = _image_feeds([1, 8, 9, 10])
    options = ort.SessionOptions()  # no QDQ fusion: the float pool between the conversions
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    unfused = ort.InferenceSession(model.SerializeToString(), options)
    (reference,) = unfused.run(["y"], feeds)
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("average-pool-in-float") == 1
    counts = optimized_op_counts(model)
    assert "QLinearAveragePool" not in counts
    assert counts["AveragePool"] == 1
    assert run_onnxruntime(model, feeds)["y"].tobytes() == reference.tobytes()


@pytest.mark.parametrize("then", ["float", "global"])
def test_average_pools_the_rewrite_must_leave_alone(then):
    """An output read in float (no QuantizeLinear), and GlobalAveragePool (onnxruntime's
    integer kernel is the faster one there)."""
    if then == "global":
        nodes = [
            helper.make_node("GlobalAveragePool", ["x_dq"], ["p"]),
            helper.make_node("QuantizeLinear", ["p", "x_scale", "x_zero"], ["p_q"]),
            helper.make_node("DequantizeLinear", ["p_q", "x_scale", "x_zero"], ["y"]),
        ]
        model = _qdq_model(nodes, {}, [1, 8, 9, 10])
    else:
        model = _pool_model("AveragePool", then="float")
    assert "average-pool-in-float" not in apply_rewrites(model).counts()


def test_max_pool_of_a_dequantized_tensor_runs_on_the_integers():
    """A Conv after a MaxPool keeps its integer weights and becomes QLinearConv."""
    weights = _weights([6, 8, 3, 3], 0)
    nodes = [
        helper.make_node("MaxPool", ["x_dq"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
        helper.make_node("Conv", ["m", "w"], ["c"]),
        helper.make_node("QuantizeLinear", ["c", "x_scale", "x_zero"], ["c_q"]),
        helper.make_node("DequantizeLinear", ["c_q", "x_scale", "x_zero"], ["y"]),
    ]
    model = _qdq_model(nodes, weights, [1, 8, 10, 10])
    feeds = _image_feeds([1, 8, 10, 10])
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("dequantize-after-movement") == 1
    assert "float-weights-for-float-layers" not in report.counts()
    counts = optimized_op_counts(model)
    assert counts["QLinearConv"] == 1
    assert "Conv" not in counts
    # QLinearConv requantizes in integers: within a level of the float Conv + Q.
    np.testing.assert_allclose(run_onnxruntime(model, feeds)["y"], before, atol=0.05 + 1e-6)


# -- per-axis QuantizeLinear/DequantizeLinear and onnxruntime's fusions -------------------


def _per_axis_around_conv(per_axis_in: bool, per_axis_out: bool, guards: bool):
    """x -> Q/DQ -> Conv(DQ weights) -> Q/DQ, either pair per-axis, optionally guarded."""
    channels = 16
    rng = np.random.default_rng(0)
    constants = {
        "s": np.asarray(0.02, np.float32),
        "z": np.asarray(128, np.uint8),
        "wq": rng.integers(-127, 128, [channels, channels, 3, 3]).astype(np.int8),
        "ws": np.full(channels, 0.01, np.float32),
        "wz": np.zeros(channels, np.int8),
        "sc": np.linspace(0.01, 0.05, channels).astype(np.float32),
        "zc": np.full(channels, 128, np.uint8),
        "floor": np.asarray(-np.inf, np.float32),
    }
    into = ("sc", "zc", {"axis": 1}) if per_axis_in else ("s", "z", {})
    out = ("sc", "zc", {"axis": 1}) if per_axis_out else ("s", "z", {})
    nodes = [
        helper.make_node("QuantizeLinear", ["x", into[0], into[1]], ["xq"], **into[2]),
        helper.make_node("DequantizeLinear", ["xq", into[0], into[1]], ["xd"], **into[2]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node("Conv", ["xd", "w"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["y", out[0], out[1]], ["yq"], **out[2]),
        helper.make_node("DequantizeLinear", ["yq", out[0], out[1]], ["out"], **out[2]),
    ]
    # Guards where the converter writes them: after a per-axis DequantizeLinear, before a
    # per-axis QuantizeLinear.
    if guards and per_axis_out:
        nodes.insert(4, helper.make_node("Max", ["y", "floor"], ["yg"]))
        nodes[5].input[0] = "yg"
    if guards and per_axis_in:
        nodes.insert(2, helper.make_node("Max", ["xd", "floor"], ["xg"]))
        nodes[4].input[0] = "xg"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, channels, 8, 8])],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


@pytest.mark.parametrize(("per_axis_in", "per_axis_out"), [(False, True), (True, False)])
def test_onnxruntime_still_fuses_per_axis_pairs_into_kernels_that_fail(per_axis_in, per_axis_out):
    """Why the converter guards per-axis pairs: without the guards onnxruntime 1.31 builds a
    QLinearConv that refuses to run. If this starts passing, the guards can go."""
    feeds = {"x": np.random.default_rng(1).uniform(0, 2, [1, 16, 8, 8]).astype(np.float32)}
    with pytest.raises(Exception, match="zero point"):
        run_onnxruntime(_per_axis_around_conv(per_axis_in, per_axis_out, False), feeds)
    (guarded,) = run_onnxruntime(
        _per_axis_around_conv(per_axis_in, per_axis_out, True), feeds
    ).values()
    assert guarded.shape == (1, 16, 8, 8)


def test_the_guard_before_a_per_axis_quantize_goes_only_where_nothing_could_fuse():
    model = _per_axis_around_conv(False, True, True)
    # The guard rule alone: with every rewrite, the Conv's output scales would move into its
    # weights and the quantizer would no longer be per axis (per-channel-output-into-weights).
    report = apply_rewrites(model, [PerAxisQuantizeGuard()])
    assert "per-axis-quantize-guard" not in [f.rewrite for f in report.fired]
    assert "Max" in [n.op_type for n in model.graph.node]
    # A bias added after the Conv's integer sums: no group ends there, the guard goes.
    biased = _per_axis_around_conv(False, True, True)
    bias = numpy_helper.from_array(np.full([1, 16, 1, 1], 0.5, np.float32), "bias")
    biased.graph.initializer.append(bias)
    conv = next(n for n in biased.graph.node if n.op_type == "Conv")
    conv.input[0] = "x"  # a float input: the Conv is no QDQ group either
    guard = next(n for n in biased.graph.node if n.op_type == "Max" and n.input[0] == "y")
    biased.graph.node.insert(
        list(biased.graph.node).index(guard), helper.make_node("Add", ["y", "bias"], ["yb"])
    )
    guard.input[0] = "yb"
    report = apply_rewrites(biased)
    assert [f.rewrite for f in report.fired].count("per-axis-quantize-guard") == 1
    feeds = {"x": np.random.default_rng(1).uniform(0, 2, [1, 16, 8, 8]).astype(np.float32)}
    assert run_onnxruntime(biased, feeds)["out"].shape == (1, 16, 8, 8)


# -- per-channel-input-into-weights ------------------------------------------------------


def _depthwise_on_per_axis(multiplier=1, zero=128, reader="quantize", shared=False, scalar_w=False):
    """x -> per-axis Q/DQ -> guard -> depthwise Conv(DQ weights, bias) -> ``reader``, as the
    converter writes NNCF's per-channel input ranges before a depthwise convolution."""
    channels, rng = 16, np.random.default_rng(4)
    outputs = channels * multiplier
    zeros = np.full(channels, zero, np.uint8) if np.isscalar(zero) else np.asarray(zero, np.uint8)
    constants = {
        "sc": np.linspace(0.01, 0.05, channels).astype(np.float32),
        "zc": zeros,
        "floor": np.asarray(-np.inf, np.float32),
        "wq": rng.integers(-127, 128, [outputs, 1, 3, 3]).astype(np.int8),
        "ws": np.float32(0.004)
        if scalar_w
        else np.linspace(0.002, 0.01, outputs, dtype=np.float32),
        "wz": np.int8(0) if scalar_w else np.zeros(outputs, np.int8),
        "b": np.linspace(-0.5, 0.5, outputs).astype(np.float32),
        "ys": np.float32(0.02),
        "yz": np.uint8(128),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sc", "zc"], ["xq"], axis=1),
        helper.make_node("DequantizeLinear", ["xq", "sc", "zc"], ["xd"], axis=1),
        helper.make_node("Max", ["xd", "floor"], ["xg"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node("Conv", ["xg", "w", "b"], ["y"], name="dw", group=channels, pads=[1] * 4),
    ]
    if reader == "quantize":
        nodes += [
            helper.make_node("QuantizeLinear", ["y", "ys", "yz"], ["yq"]),
            helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"]),
        ]
    else:
        nodes.append(helper.make_node("Relu", ["y"], ["out"]))
    outputs_info = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, outputs, 9, 7])]
    if shared:
        nodes.append(helper.make_node("Relu", ["xg"], ["side"]))
        side = helper.make_tensor_value_info("side", TensorProto.FLOAT, [1, channels, 9, 7])
        outputs_info.append(side)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 9, 7])],
        outputs_info,
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _per_axis_feeds():
    return {"x": np.random.default_rng(5).uniform(-2, 2, [1, 16, 9, 7]).astype(np.float32)}


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("zero", [0, 128])
@pytest.mark.parametrize("scalar_w", [False, True], ids=["per-channel-w", "per-tensor-w"])
def test_depthwise_conv_on_per_channel_input_runs_as_qlinearconv(multiplier, zero, scalar_w):
    model = _depthwise_on_per_axis(multiplier, zero, scalar_w=scalar_w)
    feeds = _per_axis_feeds()
    before = run_onnxruntime(model, feeds)["out"]
    assert "QLinearConv" not in optimized_op_counts(model)
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("per-channel-input-into-weights") == 1
    assert "Max" not in [n.op_type for n in model.graph.node], "the guard is no longer needed"
    counts = optimized_op_counts(model)
    assert counts["QLinearConv"] == 1, counts
    assert "Conv" not in counts, counts
    after = run_onnxruntime(model, feeds)["out"]
    # The same integer sums, requantized by onnxruntime: a value on a rounding boundary (its
    # bias is rounded to the sums' grid) may move by one output level.
    difference = np.abs(after - before)
    assert difference.max() <= 0.02 * 1.001
    assert np.mean(difference > 0) < 0.02


def test_per_channel_input_shared_with_another_reader_keeps_its_dequantization():
    model = _depthwise_on_per_axis(shared=True)
    feeds = _per_axis_feeds()
    before = run_onnxruntime(model, feeds)
    report = apply_rewrites(model)
    assert report.counts().get("per-channel-input-into-weights") == 1
    produced = {name for n in model.graph.node for name in n.output}
    assert {"xd", "xg"} <= produced, "the per-axis pair and its guard stay for the other reader"
    after = run_onnxruntime(model, feeds)
    assert after["side"].tobytes() == before["side"].tobytes()
    assert optimized_op_counts(model)["QLinearConv"] == 1


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"reader": "relu"}, "read in float"),
        ({"zero": [0] * 8 + [128] * 8}, "zero points differ"),
    ],
    ids=["read-in-float", "zero-points-differ"],
)
def test_per_channel_input_is_left_per_axis_where_no_qlinearconv_can_form(kwargs, reason):
    model = _depthwise_on_per_axis(**kwargs)
    feeds = _per_axis_feeds()
    before = run_onnxruntime(model, feeds)["out"]
    report = apply_rewrites(model)
    assert "per-channel-input-into-weights" not in report.counts()
    assert any(
        d.rewrite == "per-channel-input-into-weights" and reason in d.reason
        for d in report.declined
    ), report.declined
    assert "Max" in [n.op_type for n in model.graph.node]
    np.testing.assert_allclose(run_onnxruntime(model, feeds)["out"], before, rtol=0, atol=1e-5)


# -- concat-before-dequantize -------------------------------------------------------------


def _dequantized_concat(scales=(0.02, 0.02), zeros=(128, 128), reader="Conv", shared=False):
    """Two u8 branches, each dequantized per tensor, concatenated along the channels."""
    rng = np.random.default_rng(3)
    constants = {
        "qa": rng.integers(0, 256, [1, 3, 5, 4]).astype(np.uint8),
        "qb": rng.integers(0, 256, [1, 5, 5, 4]).astype(np.uint8),
        "sa": np.float32(scales[0]),
        "sb": np.float32(scales[1]),
        "za": np.uint8(zeros[0]),
        "zb": np.uint8(zeros[1]),
        "w": rng.standard_normal([2, 8, 3, 3]).astype(np.float32),
        "qs": np.float32(0.05),
        "qz": np.uint8(128),
    }
    nodes = [
        helper.make_node("Identity", ["x"], ["unused"]),
        helper.make_node("DequantizeLinear", ["qa", "sa", "za"], ["a"]),
        helper.make_node("DequantizeLinear", ["qb", "sb", "zb"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["joined"], axis=1, name="concat"),
    ]
    if reader == "Conv":
        nodes.append(helper.make_node("Conv", ["joined", "w"], ["y"], pads=[1, 1, 1, 1]))
    elif reader == "Quantize":
        nodes += [
            helper.make_node("QuantizeLinear", ["joined", "qs", "qz"], ["jq"]),
            helper.make_node("DequantizeLinear", ["jq", "qs", "qz"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("Sigmoid", ["joined"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if shared:
        outputs.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        outputs,
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(
    ("scales", "zeros", "reader", "form", "guard"),
    [
        ((0.02, 0.02), (128, 128), "Conv", "per-tensor", False),
        ((0.02, 0.05), (128, 120), "Conv", "per-axis", False),
        ((0.02, 0.05), (128, 120), "Sigmoid", "per-axis", True),
    ],
)
def test_a_concat_of_dequantized_branches_concatenates_the_bytes_with_the_same_bits(
    scales, zeros, reader, form, guard
):
    model = _dequantized_concat(scales, zeros, reader)
    feeds = {"x": np.zeros([1], np.float32)}
    before = run_onnxruntime(model, feeds)["y"]
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten)
    assert ("concat-before-dequantize", form) in [(f.rewrite, f.detail) for f in report.fired]
    ops_after = [n.op_type for n in rewritten.graph.node]
    assert ops_after.count("DequantizeLinear") == 1
    assert ("Max" in ops_after) == guard
    after = run_onnxruntime(rewritten, feeds)["y"]
    if reader == "Sigmoid":
        assert before.tobytes() == after.tobytes()
    else:  # the Conv may now run on the integers (conv-integer): OpenVINO's arithmetic
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-4)


def test_a_concat_read_by_a_quantize_is_left_alone():
    report = apply_rewrites(_dequantized_concat(reader="Quantize"))
    assert "concat-before-dequantize" not in [f.rewrite for f in report.fired]


def test_a_branch_read_elsewhere_keeps_its_dequantization_for_that_reader():
    """A YOLO route: the Concat reads the bytes, the other reader still the float values."""
    model = _dequantized_concat(shared=True, reader="Sigmoid")
    feeds = {"x": np.zeros([1], np.float32)}
    before = run_onnxruntime(model, feeds)
    report = apply_rewrites(model)
    assert ("concat-before-dequantize", "per-tensor") in [
        (f.rewrite, f.detail) for f in report.fired
    ]
    concat = next(n for n in model.graph.node if n.op_type == "Concat")
    assert list(concat.input) == ["qa", "qb"]
    # "a" (a graph output here) keeps its DequantizeLinear; "b" lost its own.
    produced = {o: n.op_type for n in model.graph.node for o in n.output}
    assert produced["a"] == "DequantizeLinear"
    assert "b" not in produced
    after = run_onnxruntime(model, feeds)
    for name in ("y", "a"):
        assert before[name].tobytes() == after[name].tobytes()


def test_a_split_of_a_dequantized_tensor_splits_the_integers():
    """A CSP route's Split: each half dequantized after it, so the Conv on one half runs on
    an integer kernel; the same bits everywhere."""
    weights = _weights([6, 4, 3, 3], 0)
    nodes = [
        helper.make_node("Split", ["x_dq", "halves"], ["h0", "h1"], axis=1),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
        helper.make_node("Conv", ["h1", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h0"], ["r"]),
        helper.make_node("ReduceSum", ["r"], ["s"], keepdims=1),
        helper.make_node("Add", ["c", "s"], ["y"]),
    ]
    model = _qdq_model(nodes, {**weights, "halves": np.asarray([4, 4], np.int64)}, [1, 8, 6, 6])
    feeds = _image_feeds([1, 8, 6, 6])
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert ("dequantize-after-movement", "after Split") in [
        (f.rewrite, f.detail) for f in report.fired
    ]
    split = next(n for n in model.graph.node if n.op_type == "Split")
    assert split.input[0] == "x_q"
    assert "ConvInteger" in optimized_op_counts(model)
    np.testing.assert_allclose(run_onnxruntime(model, feeds)["y"], before, rtol=1e-5, atol=1e-4)


def test_yolov5s_sppf_pools_and_concat_reach_the_conv_as_integers():
    """SPPF: three 5x5 pools in a row, the input and every pool's output concatenated,
    read by a 1x1 Conv whose output is read in float. The DequantizeLinear moves past each
    pool (kept for the Concat), the Concat runs on the integers, the Conv becomes a
    ConvInteger, and the pools run in float (onnxruntime's 8-bit pool is a slow loop
    here), quantized after: no float Conv left and no 8-bit MaxPool."""
    weights = _weights([6, 16, 1, 1], 0)
    pool = {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}
    nodes = [
        helper.make_node("MaxPool", ["x_dq"], ["m0"], **pool),
        helper.make_node("MaxPool", ["m0"], ["m1"], **pool),
        helper.make_node("MaxPool", ["m1"], ["m2"], **pool),
        helper.make_node("Concat", ["x_dq", "m0", "m1", "m2"], ["cat"], axis=1),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
        helper.make_node("Conv", ["cat", "w"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    model = _qdq_model(nodes, weights, [1, 4, 13, 13])
    feeds = _image_feeds([1, 4, 13, 13])
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    moved = [f.node for f in report.fired if f.rewrite == "dequantize-after-movement"]
    assert len(moved) == 3
    assert report.counts().get("max-pool-in-float") == 3
    graph = optimized_graph(model)
    producers = {o: n for n in graph.node for o in n.output}
    counts = collections.Counter(n.op_type for n in graph.node)
    assert counts["ConvInteger"] == 1
    assert counts["Conv"] == 0
    for node in graph.node:
        if node.op_type == "MaxPool":  # on floats: the input, or a guarded dequantization
            producer = producers.get(node.input[0])
            assert producer is None or producer.op_type == "Max", node.input[0]
    np.testing.assert_allclose(run_onnxruntime(model, feeds)["y"], before, rtol=1e-5, atol=1e-5)


# -- conv-on-branches ------------------------------------------------------------------


def _conv_on_branches(group=1):
    """Three uint8 branches (2, 3 and 3 channels) with their own scales and zero points,
    concatenated, dequantized per channel and guarded (as concat-before-dequantize writes
    them), read by a 3x3 Conv on per-channel int8 weights with a bias."""
    rng = np.random.default_rng(5)
    channels = [2, 3, 3]
    scales = [0.02, 0.05, 0.03]
    zeros = [128, 120, 0]
    per_channel_scale = np.concatenate(
        [np.full(c, s, np.float32) for c, s in zip(channels, scales, strict=True)]
    )
    per_channel_zero = np.concatenate(
        [np.full(c, z, np.uint8) for c, z in zip(channels, zeros, strict=True)]
    )
    values = {
        "scale": per_channel_scale,
        "zero": per_channel_zero,
        "minus_inf": np.float32(-np.inf),
        "w_q": rng.integers(-127, 128, [4, 8 // group, 3, 3]).astype(np.int8),
        "w_scale": (rng.random(4) * 0.01 + 0.001).astype(np.float32),
        "w_zero": np.zeros(4, np.int8),
        "bias": rng.standard_normal(4).astype(np.float32),
    }
    inputs = [
        helper.make_tensor_value_info(f"q{i}", TensorProto.UINT8, [1, c, 6, 7])
        for i, c in enumerate(channels)
    ]
    nodes = [
        helper.make_node("Concat", ["q0", "q1", "q2"], ["joined"], axis=1),
        helper.make_node("DequantizeLinear", ["joined", "scale", "zero"], ["dq"], axis=1),
        helper.make_node("Max", ["dq", "minus_inf"], ["guarded"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
        helper.make_node(
            "Conv", ["guarded", "w", "bias"], ["y"], name="conv", pads=[1, 1, 1, 1], group=group
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    feeds = {
        f"q{i}": rng.integers(0, 256, [1, c, 6, 7]).astype(np.uint8) for i, c in enumerate(channels)
    }
    return onnx.shape_inference.infer_shapes(model), feeds


def test_a_conv_on_differently_scaled_branches_runs_as_one_conv_integer_per_branch():
    model, feeds = _conv_on_branches()
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert ("conv-on-branches", "3 branches") in [(f.rewrite, f.detail) for f in report.fired]
    counts = optimized_op_counts(model)
    assert counts["ConvInteger"] == 3
    assert "Conv" not in counts
    assert "FusedConv" not in counts
    # Each branch's int32 sum is exact; only their float sum rounds.
    np.testing.assert_allclose(run_onnxruntime(model, feeds)["y"], before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("group", "change", "reason"),
    [
        (2, None, "a grouped Conv"),
        (1, "two scales", "branch q1 is not quantized with one scale"),
        (1, "int8", "the branches are not uint8"),
    ],
)
def test_conv_on_branches_declines_what_it_cannot_split(group, change, reason):
    model, _ = _conv_on_branches(group)
    if change == "two scales":  # a branch whose channels have two scales
        scale = next(t for t in model.graph.initializer if t.name == "scale")
        values = numpy_helper.to_array(scale).copy()
        values[3] = 0.07
        scale.CopyFrom(numpy_helper.from_array(values, "scale"))
    elif change == "int8":  # int8 bytes: no ConvInteger form (conv-integer takes uint8)
        zero = next(t for t in model.graph.initializer if t.name == "zero")
        zero.CopyFrom(numpy_helper.from_array(np.zeros(8, np.int8), "zero"))
        for value in model.graph.input:
            value.type.tensor_type.elem_type = TensorProto.INT8
    report = apply_rewrites(model)
    assert "conv-on-branches" not in report.counts()
    assert reason in [d.reason for d in report.declined if d.rewrite == "conv-on-branches"]
