"""``input-scale-into-conv``: an input normalization's per-channel Multiply (and the Add
after it) in front of convolutions goes into their weights, within float rounding, and
only where every reader is such a convolution."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.input_scale_into_conv import InputScaleIntoConv
from tests.helpers import float_model

SHAPE = [1, 4, 9, 7]
NAME = InputScaleIntoConv.name


def _weights(out_channels: int, per_group: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal([out_channels, per_group, 3, 3]).astype(np.float32)


def _network(scale, shift=None, group=1, readers=1, extra=None, pads=1):
    """x * scale [+ shift] -> ``readers`` Convs (3x3, ``group``) summed -> y."""
    inits = {"scale": np.asarray(scale, np.float32)}
    nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"])]
    data = "scaled"
    if shift is not None:
        inits["shift"] = np.asarray(shift, np.float32)
        nodes.append(helper.make_node("Add", ["scaled", "shift"], ["shifted"]))
        data = "shifted"
    outputs = []
    for k in range(readers):
        inits[f"w{k}"] = _weights(8, SHAPE[1] // group, seed=k + 1)
        inits[f"b{k}"] = np.linspace(-1, 1, 8).astype(np.float32)
        nodes.append(
            helper.make_node(
                "Conv", [data, f"w{k}", f"b{k}"], [f"c{k}"], group=group, pads=[pads] * 4
            )
        )
        outputs.append(f"c{k}")
    if extra is not None:
        nodes.append(helper.make_node(extra, [data], ["side"]))
        nodes.append(helper.make_node("ReduceSum", ["side"], ["side_sum"], keepdims=1))
        outputs.append("side_sum")
    nodes.append(helper.make_node("Sum", outputs, ["y"]))
    return float_model(nodes, inits, SHAPE)


def _apply(model: onnx.ModelProto):
    feeds = {"x": np.random.default_rng(0).uniform(0, 255, SHAPE).astype(np.float32)}
    before = run_onnxruntime(model, feeds)["y"]
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten, [InputScaleIntoConv()])
    onnx.checker.check_model(rewritten, full_check=True)
    after = run_onnxruntime(rewritten, feeds)["y"]
    return before, after, report, [n.op_type for n in rewritten.graph.node]


def _close(before: np.ndarray, after: np.ndarray) -> None:
    # Each product rounds once either way; the sums see the same terms.
    np.testing.assert_allclose(after, before, rtol=2e-5, atol=2e-5 * float(np.abs(before).max()))


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("scale_shape", [[], [1, 4, 1, 1], [4, 1, 1]])
def test_a_scale_in_front_of_convolutions_goes_into_their_weights(group, scale_shape):
    scale = np.linspace(1 / 255, 0.5, int(np.prod(scale_shape))).reshape(scale_shape)
    before, after, report, ops = _apply(_network(scale, group=group))
    assert report.counts() == {NAME: 1}
    assert "Mul" not in ops
    _close(before, after)


@pytest.mark.parametrize("pads", [0, 1])
def test_a_scale_and_shift_keep_one_add_before_the_convolution(pads):
    scale = np.asarray([0.5, -0.25, 2.0, 1 / 255], np.float32).reshape(1, 4, 1, 1)
    shift = np.asarray([-1.0, 0.5, 3.0, -0.1], np.float32).reshape(1, 4, 1, 1)
    before, after, report, ops = _apply(_network(scale, shift, pads=pads))
    assert report.counts() == {NAME: 1}
    assert ops.count("Add") == 1
    assert "Mul" not in ops
    _close(before, after)


def test_every_convolution_reading_the_scaled_input_gets_its_own_weights():
    before, after, report, ops = _apply(_network(np.float32(1 / 127.5), readers=2))
    assert report.counts() == {NAME: 1}
    assert ops.count("Conv") == 2
    assert "Mul" not in ops
    _close(before, after)


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(_network(np.float32(0.5), extra="Relu"), id="also-read-by-a-relu"),
        pytest.param(_network(np.ones([1, 1, 1, 7], np.float32) * 0.5), id="varies-along-width"),
        pytest.param(_network(np.ones([2, 4, 1, 1], np.float32)), id="broadcasts-the-batch"),
    ],
)
def test_the_scale_stays_where_not_every_reader_can_take_it(model):
    before, after, report, ops = _apply(model)
    assert not report.fired
    assert "Mul" in ops
    np.testing.assert_array_equal(after, before)


def test_the_scale_stays_on_computed_weights():
    model = _network(np.float32(0.5))
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.input[1] = "w_neg"
    model.graph.node.insert(0, helper.make_node("Neg", ["w0"], ["w_neg"]))
    _, _, report, ops = _apply(model)
    assert not report.fired
    assert "Mul" in ops


@pytest.mark.parametrize("bad", [0.0, np.inf])
def test_a_zero_or_infinite_scale_is_declined_with_the_reason(bad):
    scale = np.asarray([1.0, bad, 1.0, 1.0], np.float32).reshape(1, 4, 1, 1)
    _, _, report, ops = _apply(_network(scale))
    assert not report.fired
    assert "Mul" in ops
    assert [d.reason for d in report.declined] == ["a scale is zero or not finite"]


@settings(max_examples=30, deadline=None)
@given(
    scale=st.lists(
        st.floats(1e-3, 1e3).flatmap(lambda v: st.sampled_from([v, -v])), min_size=4, max_size=4
    ),
    shift=st.one_of(st.none(), st.lists(st.floats(-100, 100), min_size=4, max_size=4)),
    group=st.sampled_from([1, 2, 4]),
)
def test_the_folded_form_stays_within_rounding_for_any_scale_and_shift(scale, shift, group):
    scale = np.asarray(scale, np.float32).reshape(1, 4, 1, 1)
    shift = None if shift is None else np.asarray(shift, np.float32).reshape(1, 4, 1, 1)
    before, after, report, _ = _apply(_network(scale, shift, group=group))
    assert report.counts() == {NAME: 1}
    # Rounding is relative to the largest term, not to a sum that may cancel.
    magnitude = float(np.abs(before).max()) + 255 * float(np.abs(scale).max()) * 27
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5 * magnitude)


def test_a_converted_normalization_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset8 as ops

    import b2s_onnx
    from b2s_onnx.ir.convert import convert_ir_model

    data = ops.parameter([1, 3, 16, 16], np.float32, name="image")
    normalized = ops.add(
        ops.multiply(
            data,
            ops.constant(
                np.asarray([1 / 58.4, 1 / 57.1, 1 / 57.4], np.float32).reshape(1, 3, 1, 1)
            ),
        ),
        ops.constant(np.asarray([-2.1, -2.0, -1.8], np.float32).reshape(1, 3, 1, 1)),
    )
    weights = np.random.default_rng(3).standard_normal([8, 3, 3, 3]).astype(np.float32)
    conv = ops.convolution(normalized, ops.constant(weights), [2, 2], [1, 1], [1, 1], [1, 1])
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([ops.relu(conv)], [data]), xml, compress_to_fp16=False)

    result = convert_ir_model(xml)
    assert NAME in result.rewrites.counts()
    assert "Mul" not in {n.op_type for n in result.model.graph.node}
    feeds = {"image": np.random.default_rng(4).uniform(0, 255, [1, 3, 16, 16]).astype(np.float32)}
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = np.asarray(compiled(feeds)[compiled.outputs[0]])
    (actual,) = run_onnxruntime(result.model, feeds).values()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    plain = b2s_onnx.convert_ir(xml, fuse=False)
    assert "Mul" in {n.op_type for n in plain.graph.node}


def _channels_last(scale, shift):
    """NHWC x * scale + shift -> Transpose to NCHW -> Conv -> y (a Keras Rescaling)."""
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "shift"], ["shifted"]),
        helper.make_node("Transpose", ["shifted"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["nchw", "w", "b"], ["y"], pads=[1] * 4, strides=[2, 2]),
    ]
    inits = {
        "scale": np.asarray(scale, np.float32),
        "shift": np.asarray(shift, np.float32),
        "w": _weights(8, 3),
        "b": np.zeros(8, np.float32),
    }
    return float_model(nodes, inits, [1, 9, 7, 3])


def _apply_channels_last(model):
    feeds = {"x": np.random.default_rng(0).uniform(0, 255, [1, 9, 7, 3]).astype(np.float32)}
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model, [InputScaleIntoConv()])
    onnx.checker.check_model(model, full_check=True)
    return before, run_onnxruntime(model, feeds)["y"], report, [n.op_type for n in model.graph.node]


def test_a_single_scale_and_shift_fold_through_a_layout_transpose():
    before, after, report, ops = _apply_channels_last(_channels_last(1 / 127.5, -1.0))
    assert report.counts() == {NAME: 1}
    assert ops == ["Add", "Transpose", "Conv"]
    _close(before, after)


def test_a_per_channel_scale_does_not_fold_through_a_transpose():
    scale = np.asarray([0.5, 0.25, 2.0], np.float32)  # channels-last: along the last axis
    before, after, report, ops = _apply_channels_last(_channels_last(scale, -1.0))
    assert not report.fired
    assert ops == ["Mul", "Add", "Transpose", "Conv"]
    np.testing.assert_array_equal(after, before)


def test_a_scale_inside_the_network_is_left_to_the_layers_around_it():
    model = _network(np.float32(0.5))
    model.graph.node.insert(0, helper.make_node("Relu", ["x"], ["x_relu"]))
    model.graph.node[1].input[0] = "x_relu"
    _, _, report, ops = _apply(model)
    assert not report.fired
    assert "Mul" in ops


def test_a_channels_last_input_with_dynamic_height_and_width_still_folds():
    model = _channels_last(1 / 255, -0.5)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[1].dim_param, dims[2].dim_param = "height", "width"
    before, after, report, ops = _apply_channels_last(model)
    assert report.counts() == {NAME: 1}
    assert ops == ["Add", "Transpose", "Conv"]
    _close(before, after)
