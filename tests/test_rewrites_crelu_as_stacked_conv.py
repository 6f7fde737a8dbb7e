"""`crelu-as-stacked-conv`: ``Concat(Q(y), Q(-y))`` of a quantized Conv's output becomes one
QDQ Conv on ``[W; -W]`` and ``[b; -b]`` with one QuantizeLinear, which onnxruntime runs as
one QLinearConv; the negated half mirrors the first exactly, the first is within a level of
the ConvInteger form; every case where it must not apply is left alone."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from b2s_onnx.ir.int8_coverage import optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import CONVERTED_MODEL_REWRITES, apply_rewrites
from b2s_onnx.rewrites.crelu_as_stacked_conv import BIAS_TOO_FINE, CReluAsStackedConv
from tests.helpers import float_model, rewritten_copy

NAME = CReluAsStackedConv.name
SHAPE = [1, 4, 9, 11]
CHANNELS = 6
OUTPUT_SCALE = np.float32(0.0473)
OUTPUT_ZERO = np.uint8(128)


def _model(
    order="y-first",
    negation="Neg",
    extra_input=False,
    output_scales=(OUTPUT_SCALE, OUTPUT_SCALE),
    third_reader=False,
    group=1,
    axis=1,
    lowest_weight=-127,
    smallest_weight_scale=0.002,
    neighbours=True,
    opset=19,
):
    """x -> Q -> DQ -> Conv(DQ(int8 W), b) -> y_conv; Q(y_conv) and Q(-y_conv) joined by a
    Concat of their bytes (as NNCF quantizes a CReLU), then one DequantizeLinear -> y."""
    rng = np.random.default_rng(3)
    in_per_group = SHAPE[1] // group
    q = rng.integers(-127, 128, (CHANNELS, in_per_group, 3, 3)).astype(np.int8)
    q[0, 0, 0, 0] = lowest_weight
    weight_scales = rng.uniform(0.002, 0.004, CHANNELS).astype(np.float32)
    weight_scales[1] = min(weight_scales[1], smallest_weight_scale)
    values = {
        "s": np.float32(0.0391),
        "z": np.uint8(90),
        "wq": q,
        "ws": weight_scales,
        "wz": np.zeros(CHANNELS, np.int8),
        "b": rng.uniform(-0.3, 0.3, CHANNELS).astype(np.float32),
        "ys": output_scales[0],
        "yz": OUTPUT_ZERO,
        "ns": output_scales[1],
        "nz": OUTPUT_ZERO,
    }
    if negation == "Mul":
        values["minus_one"] = np.float32(-1)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node(
            "Conv", ["xd", "w", "b"], ["y_conv"], name="conv", pads=[1, 1, 1, 1], group=group
        ),
        helper.make_node("QuantizeLinear", ["y_conv", "ys", "yz"], ["y_q"]),
    ]
    if negation == "Neg":
        nodes.append(helper.make_node("Neg", ["y_conv"], ["n"]))
    else:
        nodes.append(helper.make_node("Mul", ["minus_one", "y_conv"], ["n"]))
    nodes.append(helper.make_node("QuantizeLinear", ["n", "ns", "nz"], ["n_q"]))
    pair = ["y_q", "n_q"] if order == "y-first" else ["n_q", "y_q"]
    joined = (["xq", *pair] if extra_input else pair) if neighbours else [pair[0], "xq", pair[1]]
    nodes.append(helper.make_node("Concat", joined, ["c"], axis=axis))
    nodes.append(helper.make_node("DequantizeLinear", ["c", "ys", "yz"], ["y"]))
    if third_reader:
        nodes.append(helper.make_node("Relu", ["y_conv"], ["r"]))
    model = float_model(nodes, values, SHAPE, opset=opset)
    if third_reader:
        model.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    return onnx.shape_inference.infer_shapes(model)


def _rewritten(model):
    return rewritten_copy(model, CReluAsStackedConv())


def _feeds(seed=0):
    return {"x": (np.random.default_rng(seed).standard_normal(SHAPE) * 3).astype(np.float32)}


def _levels(out: np.ndarray) -> np.ndarray:
    return np.rint(out / OUTPUT_SCALE).astype(np.int64)


@pytest.mark.parametrize("opset", [13, 19])
@pytest.mark.parametrize("negation", ["Neg", "Mul"])
@pytest.mark.parametrize("order", ["y-first", "negation-first"])
def test_a_quantized_crelu_becomes_one_qlinearconv(order, negation, opset):
    model = _model(order=order, negation=negation, opset=opset)
    report, rewritten = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [(NAME, "6 -> 12 channels")]
    fused = collections.Counter(n.op_type for n in optimized_graph(rewritten).node)
    assert fused["QLinearConv"] == 1
    assert not fused["Neg"]
    assert not fused["Mul"]
    assert not fused["ConvInteger"]
    for seed in range(3):
        feeds = _feeds(seed)
        before = run_onnxruntime(model, feeds)["y"]
        after = run_onnxruntime(rewritten, feeds)["y"]
        # Within a level of the float Conv's QuantizeLinear, and rarely a level off.
        moved = np.abs(_levels(after) - _levels(before))
        assert moved.max() <= 1
        assert np.mean(moved) < 0.02
        # The negated half mirrors the other exactly, but where one side saturates.
        first, second = np.split(_levels(after), 2, axis=1)
        y, negated = (first, second) if order == "y-first" else (second, first)
        inside = (y > -128) & (y < 127)
        np.testing.assert_array_equal(negated[inside], -y[inside])


def test_a_crelu_among_other_concat_inputs_keeps_them():
    model = _model(extra_input=True)
    report, rewritten = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    concat = next(n for n in rewritten.graph.node if n.op_type == "Concat")
    assert len(concat.input) == 2
    assert concat.input[0] == "xq"
    feeds = _feeds()
    before = run_onnxruntime(model, feeds)["y"]
    after = run_onnxruntime(rewritten, feeds)["y"]
    np.testing.assert_array_equal(after[:, : SHAPE[1]], before[:, : SHAPE[1]])
    assert np.abs(_levels(after) - _levels(before)).max() <= 1


def test_the_negated_half_keeps_what_per_layer_checks_can_compare():
    report, rewritten = _rewritten(_model())
    stacked, channels = report.widened["y_conv"]
    assert channels == CHANNELS
    assert stacked in {n.output[0] for n in rewritten.graph.node if n.op_type == "Conv"}
    assert report.absorbed["n"] == stacked


@pytest.mark.parametrize(
    ("case", "declined"),
    [
        ({"output_scales": (OUTPUT_SCALE, np.float32(0.05))}, None),  # quantized unlike
        ({"third_reader": True}, None),  # y read by more than the pair
        ({"group": 2}, None),  # output channels belong to groups
        ({"axis": 2}, None),  # joined along the height
        ({"neighbours": False}, None),  # another input between them
        ({"lowest_weight": -128}, "a negated weight integer leaves int8's range"),
        # The bias on a grid of x_scale * 1e-30 would wrap in int32 (found by fuzzing).
        ({"smallest_weight_scale": 1e-30}, BIAS_TOO_FINE),
    ],
    ids=[
        "unlike-quantizers",
        "third-reader",
        "grouped",
        "height-axis",
        "apart",
        "weight-at--128",
        "weight-scale-near-zero",
    ],
)
def test_what_is_not_a_quantized_crelu_is_left_alone(case, declined):
    report, _ = _rewritten(_model(**case))
    assert not report.fired
    assert [d.reason for d in report.declined] == ([declined] if declined else [])


def test_it_runs_among_the_defaults_before_conv_integer():
    names = [r.name for r in CONVERTED_MODEL_REWRITES]
    assert names.index(NAME) < names.index("conv-integer")
    report = apply_rewrites(_model(), CONVERTED_MODEL_REWRITES)
    assert NAME in report.counts()
    assert "conv-integer" not in report.counts()
