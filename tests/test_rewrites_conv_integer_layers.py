"""The ConvInteger forms chosen for speed: few-channel layers that onnxruntime's QLinearConv
runs slowly (`few-channels-as-conv-integer`), and ConvIntegers reading the same bytes
stacked into one (`sibling-conv-integers`)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.ir.int8_coverage import (
    INTEGER_KERNELS,
    layers_computed,
    optimized_graph,
    optimized_op_counts,
)
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import CONVERTED_MODEL_REWRITES, apply_rewrites
from b2s_onnx.rewrites.sibling_conv_integers import SiblingConvIntegers

X_SCALE, X_ZERO = np.float32(0.05), np.uint8(7)
Y_SCALE, Y_ZERO = np.float32(0.02), np.uint8(3)


def _model(nodes, values, inputs: int, size=(9, 8), outputs=("y",)) -> onnx.ModelProto:
    """x -> QuantizeLinear(u8) -> DequantizeLinear ("x_dq") -> ``nodes``."""
    prefix = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
    ]
    values = {"x_scale": X_SCALE, "x_zero": X_ZERO, **values}
    graph = helper.make_graph(
        prefix + nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, inputs, *size])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * 4) for name in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _conv(name: str, inputs: int, outputs: int, kernel: int, *, stride=1, bias=True, seed=0):
    """A Conv on "x_dq" with per-channel int8 weights (and bias): its nodes and values."""
    rng = np.random.default_rng(seed)
    values = {
        f"{name}_q": rng.integers(-127, 128, [outputs, inputs, kernel, kernel]).astype(np.int8),
        f"{name}_scale": (rng.random(outputs) * 0.01 + 0.001).astype(np.float32),
        f"{name}_zero": np.zeros(outputs, np.int8),
    }
    conv_inputs = ["x_dq", f"{name}_w"]
    if bias:
        values[f"{name}_b"] = rng.standard_normal(outputs).astype(np.float32)
        conv_inputs.append(f"{name}_b")
    pad = kernel // 2
    nodes = [
        helper.make_node(
            "DequantizeLinear",
            [f"{name}_q", f"{name}_scale", f"{name}_zero"],
            [f"{name}_w"],
            axis=0,
        ),
        helper.make_node(
            "Conv",
            conv_inputs,
            [name],
            name=name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        ),
    ]
    return nodes, values


def _requantized(name: str, output: str = "y"):
    """QuantizeLinear then DequantizeLinear of ``name``, as a FakeQuantize converts."""
    return [
        helper.make_node("QuantizeLinear", [name, "y_scale", "y_zero"], [f"{name}_yq"]),
        helper.make_node("DequantizeLinear", [f"{name}_yq", "y_scale", "y_zero"], [output]),
    ], {"y_scale": Y_SCALE, "y_zero": Y_ZERO}


def _feeds(inputs: int, size=(9, 8), seed=3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal([1, inputs, *size]) * 4).astype(np.float32)}


def _openvino_order(model: onnx.ModelProto, feeds, conv: str) -> np.ndarray:
    """OpenVINO's order of operations for a quantized layer quantized again: the exact
    integer sums, dequantized, plus the bias, then quantized (round half to even,
    saturated) and dequantized."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = next(n for n in model.graph.node if n.name == conv)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    stride, pad = attrs["strides"][0], attrs["pads"][0]
    x = np.clip(np.round(feeds["x"] / X_SCALE) + int(X_ZERO), 0, 255).astype(np.int64)
    x = np.pad(x - int(X_ZERO), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    w = values[f"{conv}_q"].astype(np.int64)
    out_c, _, kh, kw = w.shape
    rows = (x.shape[2] - kh) // stride + 1
    cols = (x.shape[3] - kw) // stride + 1
    sums = np.zeros((1, out_c, rows, cols), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i : i + stride * rows : stride, j : j + stride * cols : stride]
            sums += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    scale = (X_SCALE * values[f"{conv}_scale"]).astype(np.float32).reshape(1, -1, 1, 1)
    y = sums.astype(np.float32) * scale
    if f"{conv}_b" in values:
        y = y + values[f"{conv}_b"].reshape(1, -1, 1, 1)
    q = np.clip(np.round(y / Y_SCALE) + int(Y_ZERO), 0, 255)
    return ((q - int(Y_ZERO)) * Y_SCALE).astype(np.float32)


def _layers_per_kernel(model: onnx.ModelProto) -> list[int]:
    """The layers each integer kernel of onnxruntime's optimized graph computes."""
    graph = optimized_graph(model)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    kernels = [n for n in graph.node if n.op_type in INTEGER_KERNELS]
    return [layers_computed(readers, n) for n in kernels]


# -- few-channels-as-conv-integer -------------------------------------------------------------


@pytest.mark.parametrize("inputs", [1, 3, 4])
@pytest.mark.parametrize("outputs", [2, 8])
@pytest.mark.parametrize(("kernel", "stride"), [(3, 1), (3, 2), (1, 1)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_few_channel_layer_quantized_again_runs_as_conv_integer(
    inputs, outputs, kernel, stride, bias
):
    conv_nodes, values = _conv("conv", inputs, outputs, kernel, stride=stride, bias=bias)
    tail, tail_values = _requantized("conv")
    model = _model(conv_nodes + tail, {**values, **tail_values}, inputs)
    feeds = _feeds(inputs)
    before = run_onnxruntime(model, feeds)["y"]
    expected = _openvino_order(model, feeds, "conv")
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    assert report.counts().get("few-channels-as-conv-integer") == 1, report.counts()
    assert "quantized-input-channels-to-four" not in report.counts()
    counts = optimized_op_counts(model)
    assert counts["ConvInteger"] == 1, counts
    assert not counts["QLinearConv"], counts
    after = run_onnxruntime(model, feeds)["y"]
    # One output step at most from QLinearConv's requantization and from OpenVINO's order
    # (rounding ties, and the division in QuantizeLinear against this reference's).
    step = float(Y_SCALE)
    assert np.abs(after - before).max() <= step * 1.001
    assert np.abs(after - expected).max() <= step * 1.001
    assert np.mean(after == expected) > 0.99


@pytest.mark.parametrize(
    ("inputs", "outputs", "group"),
    [(3, 16, 1), (5, 8, 1)],
    ids=["16-outputs", "5-inputs"],
)
def test_layers_where_qlinearconv_is_as_fast_are_left_to_it(inputs, outputs, group):
    """(Grouped layers are `grouped-conv-integer`'s: QLinearConv's grouped path is slower.)"""
    conv_nodes, values = _conv("conv", inputs // group, outputs, 3)
    if group > 1:
        conv_nodes[1].attribute.append(helper.make_attribute("group", group))
        conv_nodes[1].input[0] = "x_dq"
    tail, tail_values = _requantized("conv")
    model = _model(conv_nodes + tail, {**values, **tail_values}, inputs)
    report = apply_rewrites(model)
    assert "few-channels-as-conv-integer" not in report.counts()
    assert "conv-integer" not in report.counts()
    assert not optimized_op_counts(model)["ConvInteger"]


def test_few_channel_layer_read_in_float_is_conv_integers_own():
    conv_nodes, values = _conv("conv", 3, 8, 3)
    model = _model([*conv_nodes, helper.make_node("Relu", ["conv"], ["y"])], values, 3)
    report = apply_rewrites(model)
    assert report.counts().get("conv-integer") == 1
    assert "few-channels-as-conv-integer" not in report.counts()


# -- sibling-conv-integers --------------------------------------------------------------------


def _heads(outputs: tuple[int, ...], kernel=3, stride=1, bias=True, inputs=16):
    """Layers reading the same quantized input, each read in float (so each becomes a
    ConvInteger), as an SSD head's box and class layers."""
    nodes, values, names = [], {}, []
    for i, count in enumerate(outputs):
        conv_nodes, conv_values = _conv(
            f"head{i}", inputs, count, kernel, stride=stride, bias=bias, seed=i
        )
        nodes += [*conv_nodes, helper.make_node("Relu", [f"head{i}"], [f"y{i}"])]
        values.update(conv_values)
        names.append(f"y{i}")
    return _model(nodes, values, inputs, size=(12, 11), outputs=tuple(names))


WITHOUT_STACKING = tuple(r for r in CONVERTED_MODEL_REWRITES if r.name != SiblingConvIntegers.name)


@pytest.mark.parametrize("outputs", [(8, 6), (4, 12, 2)], ids=["two", "three"])
@pytest.mark.parametrize(("kernel", "stride"), [(3, 1), (3, 2), (1, 2)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_conv_integers_reading_the_same_bytes_stack_into_one_keeping_every_bit(
    outputs, kernel, stride, bias
):
    feeds = _feeds(16, size=(12, 11))
    separate = _heads(outputs, kernel, stride, bias)
    apply_rewrites(separate, WITHOUT_STACKING)
    stacked = _heads(outputs, kernel, stride, bias)
    report = apply_rewrites(stacked)
    onnx.checker.check_model(stacked, full_check=True)
    assert report.counts().get("sibling-conv-integers") == 1, report.counts()
    assert [n.op_type for n in stacked.graph.node].count("ConvInteger") == 1
    expected = run_onnxruntime(separate, feeds)
    got = run_onnxruntime(stacked, feeds)
    for name in expected:
        assert got[name].tobytes() == expected[name].tobytes(), name
    # Coverage counts each stacked layer: one kernel, len(outputs) layers.
    assert _layers_per_kernel(stacked) == [len(outputs)]


def test_pointwise_conv_integers_are_not_stacked():
    """A 1x1 kernel, stride 1, no padding: nothing to unfold, stacking only adds a copy."""
    model = _heads((8, 6), kernel=1)
    report = apply_rewrites(model)
    assert report.counts().get("conv-integer") == 2
    assert "sibling-conv-integers" not in report.counts()


def test_layers_with_and_without_bias_stack_only_with_their_own_kind():
    model = _heads((8, 6, 4))
    adds = [n for n in model.graph.node if n.op_type == "Conv"]
    del adds[2].input[2]  # the third head has no bias
    report = apply_rewrites(model)
    assert report.counts().get("sibling-conv-integers") == 1
    assert [n.op_type for n in model.graph.node].count("ConvInteger") == 2


def test_a_layer_whose_sums_have_another_reader_is_not_stacked():
    model = _heads((8, 6))
    apply_rewrites(model, WITHOUT_STACKING)
    dq = next(n for n in model.graph.node if n.op_type == "ConvInteger")
    model.graph.output.append(helper.make_tensor_value_info(dq.output[0], TensorProto.INT32, None))
    report = apply_rewrites(model, (SiblingConvIntegers(),))
    assert not report.fired


def test_different_geometry_is_not_stacked():
    model = _heads((8, 6))
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    for attr in conv.attribute:
        if attr.name == "pads":
            attr.ints[:] = [0, 0, 0, 0]
    report = apply_rewrites(model)
    assert "sibling-conv-integers" not in report.counts()


@settings(max_examples=25, deadline=None)
@given(
    outputs=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    kernel=st.sampled_from([2, 3]),
    stride=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_stacking_keeps_every_bit_for_any_heads(outputs, kernel, stride, seed):
    feeds = _feeds(16, size=(12, 11), seed=seed)
    separate = _heads(tuple(outputs), kernel, stride)
    apply_rewrites(separate, WITHOUT_STACKING)
    stacked = _heads(tuple(outputs), kernel, stride)
    assert apply_rewrites(stacked).counts().get("sibling-conv-integers") == 1
    expected, got = run_onnxruntime(separate, feeds), run_onnxruntime(stacked, feeds)
    assert all(got[k].tobytes() == expected[k].tobytes() for k in expected)


def test_a_networks_own_split_after_one_layer_counts_one_layer():
    conv_nodes, values = _conv("conv", 16, 8, 3)
    split = helper.make_node("Split", ["conv"], ["y0", "y1"], axis=1, num_outputs=2)
    model = _model([*conv_nodes, split], values, 16, outputs=("y0", "y1"))
    model.opset_import[0].version = 18
    assert apply_rewrites(model).counts().get("conv-integer") == 1
    assert _layers_per_kernel(model) == [1]
