"""`strided-input-conv-as-space-to-depth`: an image's quantized 7x7/2 or 5x5/2 first layer
as a stride-1 Conv on SpaceToDepth's blocks; every integer sum, so every output byte, as
before, and still a QLinearConv in onnxruntime."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.ir.int8_coverage import optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites.quantized_input_channels_to_four import QuantizedInputChannelsToFour
from b2s_onnx.rewrites.strided_input_conv_as_space_to_depth import (
    StridedInputConvAsSpaceToDepth,
    _rearranged,
)
from tests.helpers import MAX_RUNTIME_IR_VERSION, assert_same_bits, rewritten_copy

NAME = StridedInputConvAsSpaceToDepth.name


def _model(
    channels=3,
    size=(40, 36),
    kernel=7,
    pads=None,
    strides=(2, 2),
    out=16,
    reader="quantized",
    weight_zero=0,
    seed=0,
    per_axis_input=False,
):
    """x -> Q -> DQ -> Conv (int8 weights, bias) -> [Q -> DQ] -> y (a Relu before a
    QuantizeLinear with zero point 0 is gone by then: ``clamp-before-quantize``)."""
    rng = np.random.default_rng(seed)
    pads = [kernel // 2] * 4 if pads is None else list(pads)
    values = {
        "xs": np.full([channels], 0.02, np.float32) if per_axis_input else np.float32(0.02),
        "xz": np.full([channels], 128, np.uint8) if per_axis_input else np.uint8(128),
        "wq": rng.integers(-120, 120, [out, channels, kernel, kernel]).astype(np.int8),
        "ws": (rng.random(out) * 0.01 + 0.001).astype(np.float32),
        "wz": np.full(out, weight_zero, np.int8),
        "b": rng.standard_normal(out).astype(np.float32),
        "ys": np.float32(0.05),
        "yz": np.uint8(0),
    }
    axis = {"axis": 1} if per_axis_input else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"], **axis),
        helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["d"], **axis),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node(
            "Conv", ["d", "w", "b"], ["c"], name="stem", pads=pads, strides=list(strides)
        ),
    ]
    if reader == "quantized":
        nodes += [
            helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["rq"]),
            helper.make_node("DequantizeLinear", ["rq", "ys", "yz"], ["y"]),
        ]
    else:
        del values["ys"], values["yz"]
        nodes.append(helper.make_node("Identity", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model, rewrites=None):
    return rewritten_copy(model, *(rewrites or (StridedInputConvAsSpaceToDepth(),)))


def _assert_same_bytes(model, rewritten, channels, size, seed=1):
    x = np.random.default_rng(seed).standard_normal([1, channels, *size]).astype(np.float32)
    before, after = run_onnxruntime(model, {"x": x})["y"], run_onnxruntime(rewritten, {"x": x})["y"]
    assert_same_bits(after, before)


@pytest.mark.parametrize(
    ("channels", "kernel", "size"),
    [(3, 7, (40, 36)), (3, 5, (33, 30)), (1, 7, (29, 31)), (2, 5, (24, 24))],
)
def test_a_strided_stem_becomes_a_stride_1_qlinearconv_on_blocks_with_the_same_bytes(
    tmp_path, channels, kernel, size
):
    model = _model(channels=channels, kernel=kernel, size=size)
    report, rewritten = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    side = -(-kernel // 2)
    assert f"as [{4 * channels}, {side}, {side}]" in report.fired[0].detail
    ops = collections.Counter(n.op_type for n in optimized_graph(rewritten).node)
    assert ops["QLinearConv"] == 1
    assert ops["Conv"] == 0
    _assert_same_bytes(model, rewritten, channels, size)


@settings(max_examples=30, deadline=None)
@given(
    channels=st.integers(1, 3),
    kernel=st.sampled_from([5, 6, 7, 9]),
    height=st.integers(9, 30),
    width=st.integers(9, 30),
    pads=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    weight_zero=st.sampled_from([0, 3]),
    seed=st.integers(0, 1000),
)
def test_any_size_padding_and_kernel_keep_every_byte(
    channels, kernel, height, width, pads, weight_zero, seed
):
    """Odd and even sizes, asymmetric padding, even kernels, a nonzero weight zero point
    (the taps past the kernel take it, adding nothing)."""
    if min(height + pads[0] + pads[2], width + pads[1] + pads[3]) < kernel:
        return
    model = _model(
        channels=channels,
        kernel=kernel,
        size=(height, width),
        pads=pads,
        weight_zero=weight_zero,
        seed=seed,
    )
    report, rewritten = _rewritten(model)
    if report.fired:
        _assert_same_bytes(model, rewritten, channels, (height, width), seed)
    else:
        assert [d.reason for d in report.declined] == ["the Conv drops trailing rows or columns"]


def test_the_weights_follow_space_to_depths_channel_order():
    q = np.arange(2 * 3 * 5 * 5, dtype=np.int8).reshape(2, 3, 5, 5)
    blocks = _rearranged(q, np.asarray([-1, -2], np.int8))
    assert blocks.shape == (2, 12, 3, 3)
    for dy in range(2):
        for dx in range(2):
            for c in range(3):
                for ky in range(3):
                    for kx in range(3):
                        y, x = 2 * ky + dy, 2 * kx + dx
                        expected = q[:, c, y, x] if y < 5 and x < 5 else [-1, -2]
                        actual = blocks[:, (dy * 2 + dx) * 3 + c, ky, kx]
                        assert list(actual) == list(expected)


@pytest.mark.parametrize(
    "case",
    [
        {"kernel": 3},  # a tie measured: left to quantized-input-channels-to-four
        {"strides": (1, 1)},
        {"channels": 4},
        {"reader": "float"},  # no QLinearConv forms
    ],
    ids=["3x3", "stride-1", "4-channels", "read-in-float"],
)
def test_what_it_does_not_pay_for_is_left_alone(case):
    report, _ = _rewritten(_model(**case))
    assert not report.fired


def test_a_per_axis_input_is_declined_with_the_reason():
    report, _ = _rewritten(_model(per_axis_input=True))
    assert [d.reason for d in report.declined] == ["the input is not quantized per tensor"]


def test_it_runs_before_the_four_channel_padding_which_then_leaves_the_stem_alone():
    model = _model()
    report, _ = _rewritten(
        model, (StridedInputConvAsSpaceToDepth(), QuantizedInputChannelsToFour())
    )
    assert [f.rewrite for f in report.fired] == [NAME]
