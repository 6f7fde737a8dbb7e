"""`quantized-upsampling-as-depth-to-space`: a quantized ConvTranspose with kernel ==
stride, requantized after, becomes a 1x1 QLinearConv and a DepthToSpace of the bytes,
within one output level of before; what it cannot take is declined with the reason."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.ir.int8_coverage import optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites.quantized_upsampling_as_depth_to_space import (
    QuantizedUpsamplingAsDepthToSpace,
)
from tests.helpers import MAX_RUNTIME_IR_VERSION, rewritten_copy

NAME = QuantizedUpsamplingAsDepthToSpace.name
OUTPUT_SCALE = 0.04


def _model(
    kernel=3,
    stride=None,
    channels=(6, 4),
    reader="quantized",
    per_axis_input=False,
    bias=True,
    weight_zeros=(0, 0),
):
    """x -> Q -> DQ -> ConvTranspose (int8 weights per output channel) -> [Q -> DQ] -> y."""
    stride = kernel if stride is None else stride
    rng = np.random.default_rng(0)
    cin, cout = channels
    zeros = np.resize(np.asarray(weight_zeros, np.int8), cout)
    values = {
        "xs": np.full([cin], 0.03, np.float32) if per_axis_input else np.float32(0.03),
        "xz": np.full([cin], 100, np.uint8) if per_axis_input else np.uint8(100),
        "wq": rng.integers(-120, 120, [cin, cout, kernel, kernel]).astype(np.int8),
        "ws": (rng.random(cout) * 0.02 + 0.005).astype(np.float32),
        "wz": zeros,
        "ys": np.float32(OUTPUT_SCALE),
        "yz": np.uint8(128),
    }
    deconv_inputs = ["d", "w"]
    if bias:
        values["b"] = rng.standard_normal(cout).astype(np.float32)
        deconv_inputs.append("b")
    axis = {"axis": 1} if per_axis_input else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"], **axis),
        helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["d"], **axis),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=1),
        helper.make_node(
            "ConvTranspose",
            deconv_inputs,
            ["t"],
            name="up",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
        ),
    ]
    if reader == "quantized":
        nodes += [
            helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
            helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"]),
        ]
    else:
        del values["ys"], values["yz"]
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 10, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model):
    return rewritten_copy(model, QuantizedUpsamplingAsDepthToSpace())


@pytest.mark.parametrize(
    ("kernel", "channels", "bias", "weight_zeros"),
    [(3, (6, 4), True, (0, 0)), (2, (8, 3), False, (0, 0)), (2, (4, 5), True, (5, 5))],
    ids=["3x3-bias", "2x2-no-bias", "weight-zero-point"],
)
def test_an_upsampling_becomes_a_qlinearconv_and_a_depth_to_space_of_bytes(
    kernel, channels, bias, weight_zeros
):
    model = _model(kernel=kernel, channels=channels, bias=bias, weight_zeros=weight_zeros)
    report, rewritten = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    ops = [n.op_type for n in rewritten.graph.node]
    assert "ConvTranspose" not in ops
    space = next(n for n in rewritten.graph.node if n.op_type == "DepthToSpace")
    assert rewritten.graph.node[ops.index("QuantizeLinear", 1)].output[0] == space.input[0]
    fused = collections.Counter(n.op_type for n in optimized_graph(rewritten).node)
    assert fused["QLinearConv"] == 1
    assert fused["ConvTranspose"] == 0
    x = np.random.default_rng(1).standard_normal([1, channels[0], 10, 12]).astype(np.float32)
    before, after = run_onnxruntime(model, {"x": x})["y"], run_onnxruntime(rewritten, {"x": x})["y"]
    assert after.shape == before.shape == (1, channels[1], 10 * kernel, 12 * kernel)
    # The same integer sums, requantized by QLinearConv: a rounding tie may move a level.
    difference = np.abs(after - before)
    assert difference.max() <= OUTPUT_SCALE * 1.001
    assert np.mean(difference > OUTPUT_SCALE / 2) < 0.01


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ({"stride": 2}, "the ConvTranspose's stride differs from its kernel"),
        ({"reader": "float"}, "its output is not requantized"),
        ({"per_axis_input": True}, "the input is not quantized per tensor"),
        ({"weight_zeros": (0, 3)}, "the weights' zero points differ by channel"),
    ],
    ids=["overlapping", "read-in-float", "per-axis-input", "zero-points"],
)
def test_what_it_cannot_take_is_declined_with_the_reason(case, reason):
    report, _ = _rewritten(_model(**case))
    assert not report.fired
    assert [d.reason for d in report.declined] == [reason]
