"""`pad-channels-to-block` on quantized regions: a narrow QDQ tensor around a depthwise
convolution (ENet's and PP-OCR's 8-channel bottlenecks, 24/40-channel MobileNet stages)
is padded to whole 16-channel blocks with zero filters whose integers are their zero
points; onnxruntime's QLinearConvs compute the same integer sums for the real channels, so
the outputs keep every bit; regions without a depthwise convolution are left alone."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from b2s_onnx.ir.int8_coverage import optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites.pad_channels_to_block import PadChannelsToBlock
from tests.helpers import assert_same_bits, float_model, rewritten_copy

NAME = PadChannelsToBlock.name
WIDE = 32
SIZE = 10


def _bottleneck(
    narrow=8,
    middle="depthwise",
    weight_type=np.int8,
    per_axis_activation=False,
    narrow_output=False,
):
    """x -> Q/DQ -> 1x1 Conv (WIDE -> narrow) -> Q/DQ -> ``middle`` 3x3 -> Q/DQ -> 1x1 Conv
    (narrow -> WIDE) -> Q/DQ -> y, every Conv on int8 (or uint8, zero point 128) weights
    with per-channel scales and a bias."""
    rng = np.random.default_rng(narrow)
    initializers, nodes = {}, []

    def constant(name, value):
        initializers[name] = value
        return name

    def quantize(name, source, scale, channels=None):
        scale_value, zero_value, axis = np.float32(scale), np.uint8(3), {}
        if channels is not None:
            scale_value = rng.uniform(scale * 0.8, scale * 1.2, channels).astype(np.float32)
            zero_value, axis = np.full(channels, 3, np.uint8), {"axis": 1}
        zero = constant(f"{name}_z", zero_value)
        scale_name = constant(f"{name}_s", scale_value)
        nodes.append(
            helper.make_node("QuantizeLinear", [source, scale_name, zero], [f"{name}_q"], **axis)
        )
        nodes.append(
            helper.make_node("DequantizeLinear", [f"{name}_q", scale_name, zero], [name], **axis)
        )
        return name

    def conv(name, source, out, inputs, kernel, group=1):
        if weight_type == np.int8:
            q = rng.integers(-127, 128, (out, inputs // group, kernel, kernel)).astype(np.int8)
            zero = np.zeros(out, np.int8)
        else:
            q = rng.integers(0, 256, (out, inputs // group, kernel, kernel)).astype(np.uint8)
            zero = np.uint8(128)
        scale = rng.uniform(0.002, 0.004, out).astype(np.float32)
        weights = [
            constant(f"{name}_wq", q),
            constant(f"{name}_ws", scale),
            constant(f"{name}_wz", zero),
        ]
        nodes.append(helper.make_node("DequantizeLinear", weights, [f"{name}_w"], axis=0))
        bias = constant(f"{name}_b", rng.uniform(-0.2, 0.2, out).astype(np.float32))
        pads = [kernel // 2] * 4
        nodes.append(
            helper.make_node(
                "Conv",
                [source, f"{name}_w", bias],
                [f"{name}_y"],
                name=name,
                pads=pads,
                group=group,
            )
        )
        return f"{name}_y"

    x = quantize("x0", "x", 0.05)
    reduced = conv("reduce", x, narrow, WIDE, 1)
    a1 = quantize("a1", reduced, 0.03, narrow if per_axis_activation else None)
    if middle == "depthwise":
        mid = conv("middle", a1, narrow, narrow, 3, group=narrow)
    else:
        mid = conv("middle", a1, narrow, narrow, 3)
    a2 = quantize("a2", mid, 0.03)
    expanded = conv("expand", a2, WIDE, narrow, 1)
    quantize("y", expanded, 0.05)
    model = float_model(nodes, initializers, [1, WIDE, SIZE, SIZE], opset=19)
    if narrow_output:
        model.graph.output.append(helper.make_tensor_value_info("a2", TensorProto.FLOAT, None))
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model):
    return rewritten_copy(model, PadChannelsToBlock())


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal([1, WIDE, SIZE, SIZE]) * 3).astype(np.float32)}


@pytest.mark.parametrize("weight_type", [np.int8, np.uint8], ids=["int8", "uint8-zero-128"])
@pytest.mark.parametrize(("narrow", "padded"), [(8, 16), (12, 16), (24, 32), (40, 48), (56, 64)])
def test_a_quantized_region_around_a_depthwise_conv_is_padded_bit_for_bit(
    narrow, padded, weight_type
):
    model = _bottleneck(narrow, weight_type=weight_type)
    report, rewritten = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [
        (NAME, f"6 tensors from {narrow} to {padded} channels")
    ]
    depthwise = next(n for n in rewritten.graph.node if n.name == "middle")
    assert next(a.i for a in depthwise.attribute if a.name == "group") == padded
    # The integer kernels stay (three QLinearConvs), and every output keeps its bits.
    fused = collections.Counter(n.op_type for n in optimized_graph(rewritten).node)
    assert fused["QLinearConv"] == 3
    for seed in range(2):
        feeds = _feeds(seed)
        assert_same_bits(run_onnxruntime(rewritten, feeds)["y"], run_onnxruntime(model, feeds)["y"])
    # The narrow tensors live on in the padded ones (where per-layer checks find them), the
    # extra channels exactly zero.
    padded_a2, kept = report.widened["a2"]
    assert kept == narrow
    exposed = onnx.ModelProto()
    exposed.CopyFrom(rewritten)
    exposed.graph.output.append(helper.make_tensor_value_info(padded_a2, TensorProto.FLOAT, None))
    original = onnx.ModelProto()
    original.CopyFrom(model)
    original.graph.output.append(helper.make_tensor_value_info("a2", TensorProto.FLOAT, None))
    feeds = _feeds(2)
    widened = run_onnxruntime(exposed, feeds)[padded_a2]
    assert_same_bits(widened[:, :narrow], run_onnxruntime(original, feeds)["a2"])
    assert not np.any(widened[:, narrow:])


@pytest.mark.parametrize(
    ("case", "declined"),
    [
        ({"middle": "full"}, None),  # QLinearConv takes 8 channels as well as 16
        # A per-channel scale would need padding too.
        ({"per_axis_activation": True}, "QuantizeLinear '' reads the channels as they are"),
        ({"narrow_output": True}, "a tensor of the region is a graph output or read by a subgraph"),
    ],
    ids=["no-depthwise", "per-axis-quantizer", "graph-output"],
)
def test_quantized_regions_not_to_pad_are_left_alone(case, declined):
    report, _ = _rewritten(_bottleneck(**case))
    assert not report.fired
    assert [d.reason for d in report.declined] == ([declined] if declined else [])
