"""Rewrites that put a quantized layer right before a per-tensor QuantizeLinear, the form
onnxruntime's QDQ transformer turns into an integer kernel: a clamp the quantizer makes
redundant goes (``clamp-before-quantize``), and per-channel output scales move into the
layer's weights (``per-channel-output-into-weights``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.ir.int8_coverage import optimized_op_counts
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.clamp_before_quantize import ClampBeforeQuantize
from b2s_onnx.rewrites.per_axis_quantize_guard import PerAxisDequantizeGuard, PerAxisQuantizeGuard
from b2s_onnx.rewrites.per_channel_output_into_weights import PerChannelOutputIntoWeights
from b2s_onnx.rewrites.pointwise_conv_on_a_point import PointwiseConvOnAPoint
from b2s_onnx.rewrites.quantized_input_channels_to_four import QuantizedInputChannelsToFour

CHANNELS = 8


def _model(nodes, values, inputs, shape, opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in inputs],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


# -- clamp-before-quantize ------------------------------------------------------------------


def _clamp_model(clamp: str, low, high, scale, zero, dtype=np.uint8, as_attributes=False):
    """x -> Relu or Clip(low, high) -> QuantizeLinear(scale, zero) -> DequantizeLinear."""
    values = {
        "s": np.asarray(scale, np.float32),
        "z": np.full(np.shape(scale), zero, dtype),
    }
    if clamp == "Relu":
        node = helper.make_node("Relu", ["x"], ["c"], name="clamp")
        opset = 18
    elif as_attributes:
        node = helper.make_node("Clip", ["x"], ["c"], name="clamp", min=low, max=high)
        opset = 6
    else:
        values.update(lo=np.float32(low), hi=np.float32(high))
        node = helper.make_node("Clip", ["x", "lo", "hi"], ["c"], name="clamp")
        opset = 18
    axis = {"axis": 1} if np.ndim(scale) else {}
    nodes = [
        node,
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"], name="quantize", **axis),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["out"], **axis),
    ]
    return _model(nodes, values, ["x"], [1, CHANNELS, 4, 4] if axis else [64], opset)


def _probe(model: onnx.ModelProto, low: float, high: float, scale) -> np.ndarray:
    """Values around every edge that matters: the clamp's bounds, the quantizer's range
    ends and the level midpoints next to them, zero, infinities and extremes."""
    steps = np.asarray(scale, np.float32).reshape(-1)
    edges = [0.0, low, high, -3.4e38, 3.4e38, -np.inf, np.inf]
    for s in steps:
        edges += [k * float(s) for k in (-255.5, -128.5, -127.5, -0.5, 0.5, 127.5, 254.5, 255.5)]
    finite = [e for e in edges if np.isfinite(e)]
    points = [np.nextafter(np.float32(e), np.float32(d)) for e in finite for d in (-np.inf, np.inf)]
    values = np.asarray(edges + points, np.float32)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.resize(values, shape).astype(np.float32)


@pytest.mark.parametrize(
    ("clamp", "low", "high", "scale", "zero", "dtype"),
    [
        ("Relu", 0.0, np.inf, 0.02, 0, np.uint8),
        ("Relu", 0.0, np.inf, 0.02, -128, np.int8),
        ("Clip", 0.0, 6.0, 6.0 / 255, 0, np.uint8),
        ("Clip", 0.0, 6.0, 0.0231, 0, np.uint8),
        ("Clip", -1.0, 1.0, 1.0 / 128, 0, np.int8),
        ("Clip", -1.0, 1.0, 1.0 / 128, 128, np.uint8),
        ("Clip", 0.0, 6.0, np.linspace(0.005, 6.0 / 255, CHANNELS), 0, np.uint8),
    ],
    ids=[
        "relu-u8",
        "relu-i8",
        "relu6-range-6",
        "relu6-range-5.9",
        "hardtanh-i8",
        "hardtanh-u8",
        "relu6-per-axis",
    ],
)
def test_a_clamp_the_quantizer_makes_redundant_goes_with_the_same_bits(
    clamp, low, high, scale, zero, dtype
):
    model = _clamp_model(clamp, low, high, scale, zero, dtype)
    feeds = {"x": _probe(model, low, high, scale)}
    before = run_onnxruntime(model, feeds)["out"]
    report = apply_rewrites(model, [ClampBeforeQuantize()])
    assert [f.rewrite for f in report.fired] == ["clamp-before-quantize"]
    assert [n.op_type for n in model.graph.node] == ["QuantizeLinear", "DequantizeLinear"]
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["out"], before)


def test_a_clip_given_as_attributes_is_read_too():
    model = _clamp_model("Clip", 0.0, 6.0, 6.0 / 255, 0, as_attributes=True)
    report = apply_rewrites(model, [ClampBeforeQuantize()])
    assert [f.rewrite for f in report.fired] == ["clamp-before-quantize"]


@pytest.mark.parametrize(
    ("clamp", "low", "high", "scale", "zero", "reason"),
    [
        ("Relu", 0.0, np.inf, 0.02, 128, "clamps at 0.0, above the lowest level"),
        ("Clip", 0.0, 6.0, 0.03, 0, "clamps at 6.0, below the highest level"),
        ("Clip", 0.5, 6.0, 6.0 / 255, 0, "clamps at 0.5, above the lowest level"),
        ("Clip", 0.0, 6.0, np.linspace(0.005, 0.03, CHANNELS), 0, "below the highest level"),
    ],
    ids=["relu-zero-point-128", "relu6-wider-range", "clip-above-zero", "one-channel-wider"],
)
def test_a_clamp_that_changes_levels_stays_with_the_reason(clamp, low, high, scale, zero, reason):
    model = _clamp_model(clamp, low, high, scale, zero)
    report = apply_rewrites(model, [ClampBeforeQuantize()])
    assert not report.fired
    assert reason in report.declined[0].reason
    assert model.graph.node[0].op_type == clamp


def test_a_clamp_with_a_computed_bound_or_a_second_reader_stays():
    computed = _clamp_model("Clip", 0.0, 6.0, 6.0 / 255, 0)
    computed.graph.input.append(helper.make_tensor_value_info("hi", TensorProto.FLOAT, []))
    computed.graph.initializer.pop()  # "hi" is now a graph input
    report = apply_rewrites(computed, [ClampBeforeQuantize()])
    assert "computed" in report.declined[0].reason
    shared = _clamp_model("Relu", 0.0, np.inf, 0.02, 0)
    shared.graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    assert not apply_rewrites(shared, [ClampBeforeQuantize()]).fired


def _without_clamp(model: onnx.ModelProto) -> onnx.ModelProto:
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    clamp = bare.graph.node[0]
    bare.graph.node[1].input[0] = clamp.input[0]
    bare.graph.node.remove(clamp)
    return bare


@settings(max_examples=60, deadline=None)
@given(
    low=st.sampled_from([0.0, -1.0, -6.0, 0.25, -0.01]),
    high=st.sampled_from([6.0, 1.0, 4.0, 2.55, 0.99]),
    scale=st.floats(0.0009765625, 0.0625, width=32),
    zero=st.one_of(st.sampled_from([0, 128]), st.integers(0, 255)),
)
def test_the_clamp_goes_exactly_when_the_quantized_bits_do_not_need_it(low, high, scale, zero):
    """The rule decides on two bounds; on every probe value, the levels with and without
    the clamp must agree when it fires and differ somewhere when it declines."""
    model = _clamp_model("Clip", low, high, scale, zero)
    feeds = {"x": _probe(model, low, high, scale)}
    with_clamp = run_onnxruntime(model, feeds)["out"]
    without = run_onnxruntime(_without_clamp(model), feeds)["out"]
    fired = bool(apply_rewrites(model, [ClampBeforeQuantize()]).fired)
    assert fired == bool(np.array_equal(with_clamp, without))


# -- per-channel-output-into-weights -------------------------------------------------------


def _expansion_block(
    clamp: str | None = "Clip",
    output_scales=None,
    output_zero=0,
    depthwise_next: bool = True,
    input_per_channel: bool = False,
    bias: bool = True,
    guard: bool = True,
):
    """NNCF's MobileNetV2 expansion as the converter writes it: Q/DQ(x) -> Conv 1x1(int8
    weights, bias) -> [ReLU6] -> Max(-inf) -> per-axis Q/DQ -> Max(-inf) -> depthwise Conv
    -> Q/DQ."""
    rng = np.random.default_rng(3)
    c = CHANNELS
    scales = _output_scales() if output_scales is None else np.float32(output_scales)
    values = {
        "s": np.float32(0.03),
        "z": np.uint8(128),
        "sc": np.linspace(0.01, 0.03, c).astype(np.float32),
        "zc": np.full(c, 128, np.uint8),
        "w1": rng.integers(-127, 128, [c, c, 1, 1]).astype(np.int8),
        "w1s": (rng.random(c) * 0.02 + 0.005).astype(np.float32),
        "w1z": np.zeros(c, np.int8),
        "b1": np.linspace(-0.5, 0.8, c).astype(np.float32),
        "ys": scales,
        "yz": np.full(c, output_zero, np.uint8),
        "w2": rng.integers(-127, 128, [c, 1, 3, 3]).astype(np.int8),
        "w2s": (rng.random(c) * 0.02 + 0.005).astype(np.float32),
        "w2z": np.zeros(c, np.int8),
        "os": np.float32(0.05),
        "oz": np.uint8(128),
        "floor": np.float32(-np.inf),
        "lo": np.float32(0.0),
        "hi": np.float32(6.0),
    }
    into = ("sc", "zc", {"axis": 1}) if input_per_channel else ("s", "z", {})
    conv_inputs = ["xd", "w1d", "b1"] if bias else ["xd", "w1d"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", into[0], into[1]], ["xq"], **into[2]),
        helper.make_node("DequantizeLinear", ["xq", into[0], into[1]], ["xd"], **into[2]),
        helper.make_node("DequantizeLinear", ["w1", "w1s", "w1z"], ["w1d"], axis=0),
        helper.make_node("Conv", conv_inputs, ["y"], name="expand"),
    ]
    tail = "y"
    if clamp == "Clip":
        nodes.append(helper.make_node("Clip", ["y", "lo", "hi"], ["yc"], name="relu6"))
        tail = "yc"
    elif clamp == "Relu":
        nodes.append(helper.make_node("Relu", ["y"], ["yc"], name="relu"))
        tail = "yc"
    if guard:
        nodes.append(helper.make_node("Max", [tail, "floor"], ["yg"]))
        tail = "yg"
    nodes += [
        helper.make_node("QuantizeLinear", [tail, "ys", "yz"], ["yq"], name="fq", axis=1),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["yd"], axis=1),
        helper.make_node("Max", ["yd", "floor"], ["ydg"]),
        helper.make_node("DequantizeLinear", ["w2", "w2s", "w2z"], ["w2d"], axis=0),
    ]
    if depthwise_next:
        nodes.append(
            helper.make_node("Conv", ["ydg", "w2d"], ["d"], group=c, pads=[1] * 4, name="dw")
        )
    else:
        values["w2"] = rng.integers(-127, 128, [c, c, 1, 1]).astype(np.int8)
        nodes.append(helper.make_node("Conv", ["ydg", "w2d"], ["d"], name="dense"))
    nodes += [
        helper.make_node("QuantizeLinear", ["d", "os", "oz"], ["dq"]),
        helper.make_node("DequantizeLinear", ["dq", "os", "oz"], ["out"]),
    ]
    return _model(nodes, values, ["x"], [1, c, 10, 10])


def _output_scales() -> np.ndarray:
    """Per-channel ranges [0, 1.5 .. 5.9]: within ReLU6's, as NNCF calibrates them."""
    return (np.linspace(1.5, 5.9, CHANNELS) / 255).astype(np.float32)


def _block_feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(5).uniform(-3, 4, [1, CHANNELS, 10, 10]).astype(np.float32)}


@pytest.mark.parametrize("clamp", ["Clip", "Relu", None], ids=["relu6", "relu", "linear"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_per_channel_output_scales_move_into_the_weights_and_the_block_runs_on_qlinearconv(
    clamp, bias
):
    model = _expansion_block(clamp=clamp, bias=bias, output_zero=128 if clamp is None else 0)
    feeds = _block_feeds()
    before = run_onnxruntime(model, feeds)["out"]
    report = apply_rewrites(model)
    fired = [f.rewrite for f in report.fired]
    assert "per-channel-output-into-weights" in fired
    assert "per-channel-input-into-weights" in fired
    assert not any(n.op_type in ("Max", "Clip", "Relu") for n in model.graph.node)
    assert optimized_op_counts(model)["QLinearConv"] == 2
    after = run_onnxruntime(model, feeds)["out"]
    # The integers agree up to the float rounding of the changed order: a value on a
    # level's midpoint may move by one level (of the block's output scale, 0.05).
    moved = np.abs(after - before)
    assert moved.max() <= 0.05 * 2 + 1e-6
    assert np.mean(moved > 1e-6) < 0.02


def test_the_rewritten_conv_gives_the_same_integers_as_quantizing_its_float_output():
    """The per-tensor Q after the rewritten Conv must hold, channel by channel, the integers
    the per-axis Q held (read through the untouched per-axis DQ)."""
    model = _expansion_block()
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output[0].name = "yd"
    feeds = _block_feeds()
    before = run_onnxruntime(probe, feeds)["yd"]
    report = apply_rewrites(probe, [PerChannelOutputIntoWeights()])
    assert [f.rewrite for f in report.fired] == ["per-channel-output-into-weights"]
    after = run_onnxruntime(probe, feeds)["yd"]
    steps = np.abs(after - before) / _output_scales().reshape(1, -1, 1, 1)
    assert steps.max() <= 1 + 1e-4
    assert np.mean(steps > 0.5) < 0.01


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"output_scales": np.linspace(0.01, 0.04, CHANNELS)}, "below the highest level"),
        ({"clamp": "Relu", "output_zero": 128}, "above the lowest level"),
        ({"input_per_channel": True, "depthwise_next": False}, "input is quantized per channel"),
    ],
    ids=["relu6-narrower-than-range", "relu-zero-point-128", "dense-on-per-channel-input"],
)
def test_per_channel_output_scales_stay_where_the_integers_would_change(kwargs, reason):
    model = _expansion_block(**kwargs)
    report = apply_rewrites(model, [PerChannelOutputIntoWeights()])
    assert not report.fired
    assert any(reason in d.reason for d in report.declined), report.declined


def test_per_channel_zero_points_that_differ_stay_per_axis():
    model = _expansion_block(clamp=None, output_zero=128)
    zero = next(t for t in model.graph.initializer if t.name == "yz")
    zero.CopyFrom(numpy_helper.from_array(np.arange(120, 120 + CHANNELS, dtype=np.uint8), "yz"))
    report = apply_rewrites(model, [PerChannelOutputIntoWeights()])
    assert "zero points differ" in report.declined[0].reason


def test_a_conv_output_read_elsewhere_keeps_its_float_values():
    model = _expansion_block()
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    report = apply_rewrites(model, [PerChannelOutputIntoWeights()])
    assert not report.fired


# -- quantized-input-channels-to-four ------------------------------------------------------


def _first_layer(channels=3, reader="quantize", transpose=False, weight_zero=0, group=1):
    """An image's first layer: x -> [Transpose from NHWC] -> Q/DQ -> Conv 3x3/2 -> Q/DQ."""
    rng = np.random.default_rng(9)
    values = {
        "s": np.float32(0.02),
        "z": np.uint8(128),
        "w": rng.integers(-127, 128, [16, channels // group, 3, 3]).astype(np.int8),
        "ws": (rng.random(16) * 0.01 + 0.002).astype(np.float32),
        "wz": np.full(16, weight_zero, np.int8),
        "b": np.linspace(-0.3, 0.3, 16).astype(np.float32),
        "os": np.float32(0.04),
        "oz": np.uint8(0),
    }
    nodes = []
    source = "x"
    if transpose:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]))
        source = "xt"
    nodes += [
        helper.make_node("QuantizeLinear", [source, "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        helper.make_node(
            "Conv",
            ["xd", "wd", "b"],
            ["c"],
            name="first",
            pads=[1] * 4,
            strides=[2, 2],
            group=group,
        ),
    ]
    if reader == "quantize":
        nodes += [
            helper.make_node("QuantizeLinear", ["c", "os", "oz"], ["cq"]),
            helper.make_node("DequantizeLinear", ["cq", "os", "oz"], ["out"]),
        ]
    else:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["out"]))
    shape = [1, 20, 20, channels] if transpose else [1, channels, 20, 20]
    return _model(nodes, values, ["x"], shape)


@pytest.mark.parametrize("channels", [1, 2, 3])
@pytest.mark.parametrize("weight_zero", [0, -5], ids=["symmetric", "zero-point-5"])
def test_a_first_layer_reads_its_bytes_padded_to_four_channels_with_the_same_bits(
    channels, weight_zero
):
    model = _first_layer(channels, weight_zero=weight_zero)
    feeds = {"x": np.random.default_rng(2).uniform(-2, 3, [1, channels, 20, 20]).astype(np.float32)}
    before = run_onnxruntime(model, feeds)["out"]
    report = apply_rewrites(model)
    assert "quantized-input-channels-to-four" in [f.rewrite for f in report.fired]
    assert [n.op_type for n in model.graph.node].count("Pad") == 1
    assert optimized_op_counts(model)["QLinearConv"] == 1
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["out"], before)


@pytest.mark.parametrize(
    "kwargs",
    [{"reader": "float"}, {"channels": 4}, {"channels": 3, "group": 3}],
    ids=["read-in-float", "four-channels", "depthwise"],
)
def test_layers_with_nothing_to_gain_are_not_padded(kwargs):
    model = _first_layer(**kwargs)
    report = apply_rewrites(model, [QuantizedInputChannelsToFour()])
    assert not report.fired
    assert not report.declined


def test_a_channels_last_input_is_not_padded_with_the_reason():
    model = _first_layer(transpose=True)
    report = apply_rewrites(model, [QuantizedInputChannelsToFour()])
    assert not report.fired
    assert "through a Transpose" in report.declined[0].reason


# -- per-axis guards where nothing could fuse ------------------------------------------------


def _hard_swish_block(depthwise_reader: str = "hswish"):
    """MobileNetV3 as NNCF and the converter write it: ConvInteger-style float expansion ->
    HSwish (x * HardSigmoid(x)) -> Max -> per-axis Q/DQ -> Max -> depthwise Conv -> reader."""
    rng = np.random.default_rng(4)
    c = CHANNELS
    values = {
        "s": np.float32(0.03),
        "z": np.uint8(128),
        "w1": rng.integers(-127, 128, [c, c, 1, 1]).astype(np.int8),
        "w1s": (rng.random(c) * 0.02 + 0.005).astype(np.float32),
        "w1z": np.zeros(c, np.int8),
        "ys": np.linspace(0.01, 0.03, c).astype(np.float32),
        "yz": np.full(c, 128, np.uint8),
        "w2": rng.integers(-127, 128, [c, 1, 3, 3]).astype(np.int8),
        "w2s": (rng.random(c) * 0.02 + 0.005).astype(np.float32),
        "w2z": np.zeros(c, np.int8),
        "os": np.float32(0.05),
        "oz": np.uint8(128),
        "floor": np.float32(-np.inf),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w1", "w1s", "w1z"], ["w1d"], axis=0),
        helper.make_node("Conv", ["xd", "w1d"], ["y"], name="expand"),
        helper.make_node("HardSigmoid", ["y"], ["gate"], alpha=1 / 6),
        helper.make_node("Mul", ["y", "gate"], ["h"]),
        helper.make_node("Max", ["h", "floor"], ["hg"], name="guard_q"),
        helper.make_node("QuantizeLinear", ["hg", "ys", "yz"], ["hq"], axis=1),
        helper.make_node("DequantizeLinear", ["hq", "ys", "yz"], ["hd"], axis=1, name="dq"),
        helper.make_node("Max", ["hd", "floor"], ["hdg"], name="guard_dq"),
        helper.make_node("DequantizeLinear", ["w2", "w2s", "w2z"], ["w2d"], axis=0),
        helper.make_node("Conv", ["hdg", "w2d"], ["d"], group=c, pads=[1] * 4, name="dw"),
    ]
    if depthwise_reader == "hswish":
        nodes += [
            helper.make_node("HardSigmoid", ["d"], ["dgate"], alpha=1 / 6),
            helper.make_node("Mul", ["d", "dgate"], ["out"]),
        ]
    else:  # quantized again, through a Relu onnxruntime folds into the QuantizeLinear
        values["oz"] = np.uint8(0)
        nodes += [
            helper.make_node("Relu", ["d"], ["dr"]),
            helper.make_node("QuantizeLinear", ["dr", "os", "oz"], ["dq"]),
            helper.make_node("DequantizeLinear", ["dq", "os", "oz"], ["out"]),
        ]
    return _model(nodes, values, ["x"], [1, c, 10, 10])


def test_guards_go_where_hswish_and_a_float_read_depthwise_layer_start_no_group():
    model = _hard_swish_block()
    feeds = _block_feeds()
    before = run_onnxruntime(model, feeds)["out"]
    report = apply_rewrites(model, [PerAxisQuantizeGuard(), PerAxisDequantizeGuard()])
    assert sorted(f.rewrite for f in report.fired) == [
        "per-axis-dequantize-guard",
        "per-axis-quantize-guard",
    ]
    assert "Max" not in [n.op_type for n in model.graph.node]
    # onnxruntime runs it (no refusing fusion formed), with the same bits.
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["out"], before)


def test_the_guard_after_a_per_axis_dequantize_stays_before_a_conv_quantized_again():
    model = _hard_swish_block(depthwise_reader="quantize")
    report = apply_rewrites(model, [PerAxisDequantizeGuard()])
    assert not report.fired
    assert "guard_dq" in [n.name for n in model.graph.node]
    run_onnxruntime(model, _block_feeds())  # the guard keeps it runnable
    unguarded = onnx.ModelProto()
    unguarded.CopyFrom(model)
    guard = next(n for n in unguarded.graph.node if n.name == "guard_dq")
    next(n for n in unguarded.graph.node if n.name == "dw").input[0] = "hd"
    unguarded.graph.node.remove(guard)
    with pytest.raises(Exception, match="zero point"):
        run_onnxruntime(unguarded, _block_feeds())


# -- pointwise-conv-on-a-point ---------------------------------------------------------------


def _head(bias=True, reader="float", spatial=1, group=1, pads=None, auto_pad=None):
    """After a global pooling: Q/DQ([N, 64, s, s]) -> Conv 1x1 (int8 weights) -> reader."""
    rng = np.random.default_rng(6)
    values = {
        "s": np.float32(0.03),
        "z": np.uint8(128),
        "w": rng.integers(-127, 128, [40, 64 // group, 1, 1]).astype(np.int8),
        "ws": (rng.random(40) * 0.01 + 0.002).astype(np.float32),
        "wz": np.zeros(40, np.int8),
        "b": np.linspace(-0.4, 0.4, 40).astype(np.float32),
        "os": np.float32(0.05),
        "oz": np.uint8(128),
    }
    attributes = {"group": group}
    if pads is not None:
        attributes["pads"] = pads
    if auto_pad is not None:
        attributes["auto_pad"] = auto_pad
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        helper.make_node(
            "Conv", ["xd", "wd", "b"] if bias else ["xd", "wd"], ["c"], name="head", **attributes
        ),
    ]
    if reader == "quantize":
        nodes += [
            helper.make_node("QuantizeLinear", ["c", "os", "oz"], ["cq"]),
            helper.make_node("DequantizeLinear", ["cq", "os", "oz"], ["out"]),
        ]
    else:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["out"]))
    return _model(nodes, values, ["x"], [2, 64, spatial, spatial])


def _head_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """OpenVINO's formula: exact int32 sums times ``s_x * s_w[o]``, plus the bias."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    q = np.clip(np.rint(x / values["s"]) + 128, 0, 255).astype(np.int64) - 128
    w = values["w"].astype(np.int64).reshape(40, 64)
    sums = q.reshape(2, 64) @ w.T
    y = sums.astype(np.float32) * (values["s"] * values["ws"]).astype(np.float32)
    if "b" in {i for n in model.graph.node for i in n.input}:
        y = y + values["b"]
    return (1 / (1 + np.exp(-y))).reshape(2, 40, 1, 1)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("auto_pad", [None, "SAME_UPPER"], ids=["explicit", "same-upper"])
def test_a_pointwise_conv_on_a_point_runs_as_matmul_integer_to_float(bias, auto_pad):
    model = _head(bias=bias, auto_pad=auto_pad)
    x = np.random.default_rng(8).uniform(-3, 3, [2, 64, 1, 1]).astype(np.float32)
    expected = _head_reference(model, x)
    report = apply_rewrites(model)
    assert "pointwise-conv-on-a-point" in [f.rewrite for f in report.fired]
    counts = optimized_op_counts(model)
    assert counts["MatMulIntegerToFloat"] == 1
    assert not counts["Conv"]
    assert not counts["ConvInteger"]
    np.testing.assert_allclose(
        run_onnxruntime(model, {"x": x})["out"], expected, rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"reader": "quantize"}, None),
        ({"spatial": 3}, None),
        ({"group": 4}, "grouped"),
        ({"pads": [0, 0, 1, 1]}, "padded"),
    ],
    ids=["quantized-again", "a-map", "grouped", "padded"],
)
def test_pointwise_convs_left_to_other_kernels(kwargs, reason):
    model = _head(**kwargs)
    report = apply_rewrites(model, [PointwiseConvOnAPoint()])
    assert not report.fired
    if reason is None:
        assert not report.declined
    else:
        assert reason in report.declined[0].reason
