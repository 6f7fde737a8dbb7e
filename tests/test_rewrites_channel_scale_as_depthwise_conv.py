"""`channel-scale-as-depthwise-conv`: ``DQ -> Mul(per-channel constant) -> Q`` becomes a
1x1 depthwise Conv that onnxruntime fuses into one QLinearConv; bit for bit unfused, within
a level fused; the coverage does not count it as an IR layer."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.ir.int8_coverage import layers_computed, optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites.channel_scale_as_depthwise_conv import (
    SHIFT_TOO_FINE,
    ChannelScaleAsDepthwiseConv,
)
from tests.helpers import MAX_RUNTIME_IR_VERSION, assert_same_bits, rewritten_copy, run_unoptimized

NAME = ChannelScaleAsDepthwiseConv.name
SHAPE = [1, 6, 9, 11]
OUTPUT_SCALE = 0.0311


def _model(
    scale_shape=(1, 6, 1, 1), output="per-tensor", reader="QuantizeLinear", shift_shape=None
):
    """x -> Q -> DQ -> Mul(a) -> [Add(b)] -> [Q -> DQ | reader] -> y; ``a`` has negative
    entries and a zero (scales as a real network has them: rounding ties are rare)."""
    a = np.random.default_rng(7).uniform(-1.5, 2.5, int(np.prod(scale_shape)))
    a = a.astype(np.float32)
    if a.size > 1:
        a[1] = 0
    per_axis = output == "per-channel"
    values = {
        "z": np.uint8(100),
        "a": a.reshape(scale_shape),
        "ys": np.full(6, OUTPUT_SCALE, np.float32) if per_axis else np.float32(OUTPUT_SCALE),
        "s": np.float32(0.0517),
        "yz": np.full(6, 128, np.uint8) if per_axis else np.uint8(128),
    }
    axis = {"axis": 1} if per_axis else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Mul", ["d", "a"], ["m"], name="scale"),
    ]
    if shift_shape is not None:
        shift = np.random.default_rng(8).uniform(-0.7, 0.7, int(np.prod(shift_shape)))
        values["b"] = shift.astype(np.float32).reshape(shift_shape)
        nodes.append(helper.make_node("Add", ["m", "b"], ["shifted"], name="shift"))
        nodes[-2].output[0], nodes[-1].input[0], nodes[-1].output[0] = "m0", "m0", "m"
    if reader == "QuantizeLinear":
        nodes += [
            helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["mq"], **axis),
            helper.make_node("DequantizeLinear", ["mq", "ys", "yz"], ["y"], **axis),
        ]
    else:
        del values["ys"], values["yz"]
        nodes.append(helper.make_node(reader, ["m"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model):
    return rewritten_copy(model, ChannelScaleAsDepthwiseConv())


def test_a_channel_scale_between_quantizations_becomes_one_qlinearconv():
    model = _model()
    report, rewritten = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [(NAME, "6 channels")]
    fused = collections.Counter(n.op_type for n in optimized_graph(rewritten).node)
    assert fused["QLinearConv"] == 1
    assert fused["Mul"] == 0
    feeds = {"x": (np.random.default_rng(0).standard_normal(SHAPE) * 3).astype(np.float32)}
    # Unfused, the Conv multiplies by exactly a[c], as the Mul did.
    assert_same_bits(run_unoptimized(rewritten, feeds), run_unoptimized(model, feeds))
    # Fused, QLinearConv scales the integers once: a rounding tie may move a level.
    before, after = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
    difference = np.abs(after - before)
    assert difference.max() <= OUTPUT_SCALE * 1.001
    assert np.mean(difference > OUTPUT_SCALE / 2) < 0.01


def test_a_channel_scale_and_shift_become_one_qlinearconv_with_a_bias():
    """A BatchNorm between quantizations (after a quantized CReLU): the shift is the Conv's
    bias, which onnxruntime adds on the sums' grid; weights of 64 keep that grid fine."""
    model = _model(shift_shape=(1, 6, 1, 1))
    report, rewritten = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [(NAME, "6 channels, with a shift")]
    fused = collections.Counter(n.op_type for n in optimized_graph(rewritten).node)
    assert fused["QLinearConv"] == 1
    assert fused["Mul"] == 0
    assert fused["Add"] == 0
    feeds = {"x": (np.random.default_rng(0).standard_normal(SHAPE) * 3).astype(np.float32)}
    # Unfused: x * a[c] + b[c] in one Conv, within a rounding of the Mul and the Add.
    unfused = run_unoptimized(rewritten, feeds)
    np.testing.assert_allclose(unfused, run_unoptimized(model, feeds), atol=1e-6)
    before, after = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
    difference = np.abs(after - before)
    assert difference.max() <= OUTPUT_SCALE * 1.001
    assert np.mean(difference > OUTPUT_SCALE / 2) < 0.01


def test_a_shift_too_large_for_a_scale_near_zero_keeps_the_pair():
    """onnxruntime would put the shift on a grid of x_scale * |a| / 64: with |a| = 1e-30
    the shift in those steps leaves int32 and wraps (a damaged BatchNorm, found by fuzzing)."""
    model = _model(shift_shape=(1, 6, 1, 1))
    a = next(t for t in model.graph.initializer if t.name == "a")
    values = numpy_helper.to_array(a).copy()
    values.flat[2] = 1e-30
    a.CopyFrom(numpy_helper.from_array(values, "a"))
    report, _ = _rewritten(model)
    assert not report.fired
    assert [d.reason for d in report.declined] == [SHIFT_TOO_FINE]


def test_a_shift_along_another_axis_keeps_the_scale_as_it_was():
    """A shift that varies along the width is no bias: the Mul stays, read by the Add."""
    report, rewritten = _rewritten(_model(shift_shape=(1, 1, 1, 11)))
    assert not report.fired
    assert [n.op_type for n in rewritten.graph.node].count("Add") == 1


@pytest.mark.parametrize(
    ("case", "declined"),
    [
        ({"output": "per-channel"}, "the output is requantized per channel"),
        ({"scale_shape": (1, 1, 1, 11)}, None),  # along the width: not a channel scale
        ({"reader": "Relu"}, None),  # read in float: no QLinearConv would form
        ({"scale_shape": (1,)}, None),  # one scale for all: not this pattern
    ],
    ids=["per-channel-output", "along-width", "read-in-float", "scalar"],
)
def test_what_is_not_a_channel_scale_between_quantizations_is_left_alone(case, declined):
    report, _ = _rewritten(_model(**case))
    assert not report.fired
    assert [d.reason for d in report.declined] == ([declined] if declined else [])


def test_the_coverage_does_not_count_the_scale_as_a_layer():
    rewritten = _rewritten(_model())[1]
    conv = next(n for n in optimized_graph(rewritten).node if n.op_type == "QLinearConv")
    assert layers_computed({}, conv) == 0
