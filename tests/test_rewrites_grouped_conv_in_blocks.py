"""`grouped-conv-in-blocks`: a grouped Conv of 2, 4, 8 (or 24) channels a group is the same
Conv with neighbouring groups merged into block-diagonal 16- (48-) channel groups, which
onnxruntime runs in its blocked layout; within float rounding. An odd number of narrow
groups is first padded to whole blocks by `pad-channels-to-block` (RegNetX-200MF's 3, 7
and 19 groups of 8)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.grouped_conv_in_blocks import GroupedConvInBlocks, merged_weights
from tests.helpers import assert_well_formed, converted_matches_openvino, float_model
from tests.test_rewrites_blocked_layout import _optimized_ops, _session

NAME = GroupedConvInBlocks.name
PAD = "pad-channels-to-block"


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def _rewritten(model: onnx.ModelProto):
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    assert_well_formed(rewritten)
    return report, rewritten


def _close(rewritten: onnx.ModelProto, model: onnx.ModelProto, rtol=1e-5, atol=1e-5) -> None:
    feeds = _feeds(model)
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        np.testing.assert_allclose(
            _session(rewritten, level).run(None, feeds)[0],
            _session(model, level).run(None, feeds)[0],
            rtol=rtol,
            atol=atol,
        )


def _grouped(channels=64, width=8, size=10, outputs=None, stride=1, bias=True, seed=0):
    """x -> grouped 3x3 Conv of ``width`` input channels a group -> Relu."""
    rng = np.random.default_rng(seed)
    outputs = outputs or channels
    group = channels // width
    constants = {"w": rng.uniform(-1, 1, (outputs, width, 3, 3)).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        constants["b"] = rng.uniform(-1, 1, outputs).astype(np.float32)
        inputs.append("b")
    nodes = [
        helper.make_node(
            "Conv", inputs, ["c"], name="grouped", group=group, pads=[1] * 4, strides=[stride] * 2
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    return onnx.shape_inference.infer_shapes(
        float_model(nodes, constants, [1, channels, size, size])
    )


def _fired(report, name=NAME) -> list[str]:
    return [f.detail for f in report.fired if f.rewrite == name]


def _group_of(model: onnx.ModelProto, name="grouped") -> int:
    node = next(n for n in model.graph.node if n.name == name)
    return next((a.i for a in node.attribute if a.name == "group"), 1)


@pytest.mark.parametrize(
    ("channels", "width", "merged"),
    [(64, 8, 4), (64, 4, 4), (32, 2, 2), (96, 24, 2), (128, 8, 8)],
)
@pytest.mark.parametrize("stride", [1, 2])
def test_narrow_groups_merge_into_whole_blocks_within_rounding(channels, width, merged, stride):
    model = _grouped(channels, width, stride=stride)
    report, rewritten = _rewritten(model)
    assert _fired(report) == [
        f"{channels // width} groups of {width} channels -> {merged} of {channels // merged}"
    ]
    assert not next(f for f in report.fired if f.rewrite == NAME).exact
    assert _group_of(rewritten) == merged
    _close(rewritten, model)


def test_more_outputs_than_inputs_a_group():
    model = _grouped(32, 8, outputs=64)  # 4 groups, 8 in and 16 out each
    report, rewritten = _rewritten(model)
    assert _fired(report) == ["4 groups of 8 channels -> 2 of 16"]
    _close(rewritten, model)


@pytest.mark.parametrize(
    "attributes",
    [{"dilations": [2, 2], "pads": [2, 2, 2, 2]}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}],
)
def test_spatial_attributes_are_kept(attributes):
    rng = np.random.default_rng(3)
    constants = {"w": rng.uniform(-1, 1, (64, 8, 3, 3)).astype(np.float32)}
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="grouped", group=8, **attributes)
    model = onnx.shape_inference.infer_shapes(float_model([node], constants, [1, 64, 11, 9]))
    report, rewritten = _rewritten(model)
    assert _fired(report) == ["8 groups of 8 channels -> 4 of 16"]
    _close(rewritten, model)


def test_without_a_bias():
    model = _grouped(64, 8, bias=False)
    report, rewritten = _rewritten(model)
    assert len(_fired(report)) == 1
    _close(rewritten, model)


@pytest.mark.parametrize(
    ("channels", "width"),
    [
        (64, 16),  # whole blocks already
        (96, 12),  # merged to 48: measured slower
        (96, 6),
        (160, 40),
        (64, 1),  # depthwise: a kernel of its own
        (24, 8),  # three groups of 8 on a graph input: no region to pad, no pairs to merge
    ],
)
def test_other_groupings_are_left_alone(channels, width):
    model = _grouped(channels, width)
    report, rewritten = _rewritten(model)
    assert not _fired(report)
    assert _group_of(rewritten) == channels // width


def test_quantized_layers_are_left_alone():
    """A Conv on a DequantizeLinear's output, or on dequantized weights, is a quantized
    layer: its integer forms are other rewrites' (`grouped-conv-integer`)."""
    model = _grouped(64, 8)
    graph = model.graph
    graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.asarray(0.05, np.float32), "scale"),
            onnx.numpy_helper.from_array(np.asarray(128, np.uint8), "zero"),
        ]
    )
    graph.node.insert(0, helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]))
    graph.node.insert(1, helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"]))
    graph.node[2].input[0] = "dq"
    report, _ = _rewritten(model)
    assert not _fired(report)

    model = _grouped(64, 8)
    graph = model.graph
    codes = np.random.default_rng(0).integers(-127, 128, (64, 8, 3, 3)).astype(np.int8)
    graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(codes, "w_codes"),
            onnx.numpy_helper.from_array(np.asarray(0.01, np.float32), "w_scale"),
        ]
    )
    graph.node.insert(0, helper.make_node("DequantizeLinear", ["w_codes", "w_scale"], ["w_dq"]))
    graph.node[1].input[1] = "w_dq"
    graph.initializer.remove(next(t for t in graph.initializer if t.name == "w"))
    report, rewritten = _rewritten(model)
    assert not _fired(report)
    assert _group_of(rewritten) == 8


@settings(max_examples=30, deadline=None)
@given(
    groups=st.integers(2, 8),
    width=st.integers(1, 4),
    out_width=st.integers(1, 4),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    data=st.data(),
)
def test_merged_weights_compute_the_same_function(groups, width, out_width, kernel, data):
    """Any merge factor dividing the group count, any widths and kernel: the block-diagonal
    Conv computes the grouped one's outputs (compared in float64)."""
    factor = data.draw(st.sampled_from([f for f in range(1, groups + 1) if groups % f == 0]))
    rng = np.random.default_rng(groups * 100 + width * 10 + out_width)
    weights = rng.standard_normal((groups * out_width, width, *kernel))
    x = rng.standard_normal((groups * width, 5, 6))

    def conv(w, group):
        out_per = w.shape[0] // group
        in_per = w.shape[1]
        rows, cols = 5 - kernel[0] + 1, 6 - kernel[1] + 1
        y = np.zeros((w.shape[0], rows, cols))
        for o in range(w.shape[0]):
            g = o // out_per
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    patch = x[g * in_per : (g + 1) * in_per, i : i + rows, j : j + cols]
                    y[o] += np.tensordot(w[o, :, i, j], patch, axes=1)
        return y

    merged = merged_weights(weights, groups, factor)
    assert merged.shape == (groups * out_width, width * factor, *kernel)
    np.testing.assert_allclose(conv(merged, groups // factor), conv(weights, groups), atol=1e-12)


def _regnet_block(channels=56, width=8, size=12, reader="Conv"):
    """x -> 1x1 Conv -> Relu -> grouped 3x3 Conv -> Relu -> 1x1 Conv, + x -> Relu: a RegNetX
    block (bottleneck ratio 1); ``reader`` "Transpose" reads the grouped Conv's output as
    it is."""
    rng = np.random.default_rng(4)
    c = channels
    constants = {
        "w1": rng.uniform(-0.3, 0.3, (c, c, 1, 1)).astype(np.float32),
        "b1": rng.uniform(-1, 1, c).astype(np.float32),
        "w": rng.uniform(-0.3, 0.3, (c, width, 3, 3)).astype(np.float32),
        "b": rng.uniform(-1, 1, c).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node(
            "Conv", ["ar", "w", "b"], ["g"], name="grouped", group=c // width, pads=[1] * 4
        ),
        helper.make_node("Relu", ["g"], ["gr"]),
    ]
    if reader == "Transpose":
        nodes.append(helper.make_node("Transpose", ["gr"], ["y"], perm=[0, 2, 3, 1]))
    else:
        constants["w3"] = rng.uniform(-0.3, 0.3, (c, c, 1, 1)).astype(np.float32)
        nodes += [
            helper.make_node("Conv", ["gr", "w3"], ["d"]),
            helper.make_node("Add", ["d", "x"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ]
    return onnx.shape_inference.infer_shapes(float_model(nodes, constants, [1, c, size, size]))


@pytest.mark.parametrize(
    ("channels", "width", "padded"),
    [(56, 8, 64), (24, 8, 32), (104, 8, 112), (36, 4, 48), (152, 8, 160)],
)
def test_an_odd_number_of_narrow_groups_is_padded_then_merged(channels, width, padded):
    model = _regnet_block(channels, width)
    report, rewritten = _rewritten(model)
    assert _fired(report, PAD) == [f"4 tensors from {channels} to {padded} channels"]
    groups = padded // width
    factor = 16 // width
    assert _fired(report) == [f"{groups} groups of {width} channels -> {groups // factor} of 16"]
    _close(rewritten, model)


def test_a_region_read_as_it_is_is_not_padded():
    model = _regnet_block(56, 8, reader="Transpose")
    report, rewritten = _rewritten(model)
    assert not _fired(report, PAD)
    assert not _fired(report)
    # Wider than 47 channels: walked only to look for a grouped Conv, so no decline either.
    assert not [d for d in report.declined if d.rewrite == PAD]
    assert _group_of(rewritten) == 7


def test_a_region_of_wide_groups_is_not_padded():
    """Five groups of 24: padding 120 -> 144 channels measured 1.18x -> 1.39x OpenVINO."""
    model = _regnet_block(120, 24)
    report, _ = _rewritten(model)
    assert not _fired(report, PAD)
    assert not _fired(report)


def test_the_merged_conv_runs_in_onnxruntimes_blocked_layout(tmp_path):
    probe = _regnet_block(64, 16)
    if not any(d == "com.microsoft.nchwc" for d, _ in _optimized_ops(probe, tmp_path)):
        pytest.skip("onnxruntime has no blocked layout on this CPU")
    for model in (_regnet_block(56, 8, size=16), _grouped(64, 8, size=16)):
        _, rewritten = _rewritten(model)
        ops = _optimized_ops(rewritten, tmp_path)
        assert ops[("", "Conv")] == 0, ops  # every Conv blocked
        assert ops[("com.microsoft.nchwc", "Conv")] >= 1


def test_a_converted_regnet_stage_matches_openvino(tmp_path):
    """OpenVINO's GroupConvolution of 7 groups of 8 (a RegNetX-200MF stage) converts, pads
    and merges, and stays within rounding of OpenVINO's CPU plugin."""
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    rng = np.random.default_rng(5)
    data = ops.parameter([1, 24, 20, 20], np.float32, name="x")

    def const(*shape, scale=0.2):
        return ops.constant((rng.standard_normal(shape) * scale).astype(np.float32))

    x = ops.relu(ops.convolution(data, const(56, 24, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1]))
    x = ops.group_convolution(x, const(7, 8, 8, 3, 3), [2, 2], [1, 1], [1, 1], [1, 1])
    x = ops.relu(ops.add(x, const(1, 56, 1, 1)))
    x = ops.convolution(x, const(56, 56, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1])
    feeds = {"x": rng.standard_normal([1, 24, 20, 20]).astype(np.float32)}
    result = converted_matches_openvino(
        ov.Model([x], [data]), tmp_path, feeds, rtol=1e-4, atol=1e-4
    )
    fired = result.rewrites.counts()
    assert fired.get(PAD) == 1
    assert fired.get(NAME) == 1
