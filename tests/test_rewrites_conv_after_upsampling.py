"""`conv-after-upsampling`: a 3x3 Conv after a nearest 2x upsampling as four 2x2 phase
Convs on the small input and an interleave, within float rounding of the pair; declined
where the Resize is not a pixel repetition or the Conv is not a plain 'same' 3x3."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.conv_after_upsampling import ConvAfterUpsampling, phase_weights
from tests.helpers import assert_well_formed, float_model

NAME = ConvAfterUpsampling.name
SCALES = np.asarray([1, 1, 2, 2], np.float32)


def _model(
    channels: int = 32,
    outputs: int = 16,
    shape: list | None = None,
    resize: dict | None = None,
    conv: dict | None = None,
    tail: str = "relu",
    bias_as_add: bool = False,
    scales: np.ndarray = SCALES,
    other_reader: bool = False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(channels + outputs)
    weights = (rng.standard_normal([outputs, channels, 3, 3]) * 0.1).astype(np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    constants = {"scales": scales, "w": weights}
    attributes = {"pads": [1, 1, 1, 1], **(conv or {})}
    if bias_as_add:
        constants["b"] = bias.reshape(1, outputs, 1, 1)
        nodes = [
            helper.make_node("Resize", ["x", "", "scales"], ["up"], name="up", **(resize or {})),
            helper.make_node("Conv", ["up", "w"], ["c"], name="conv", **attributes),
            helper.make_node("Add", ["c", "b"], ["biased"]),
        ]
        last = "biased"
    else:
        constants["b"] = bias
        nodes = [
            helper.make_node("Resize", ["x", "", "scales"], ["up"], name="up", **(resize or {})),
            helper.make_node("Conv", ["up", "w", "b"], ["c"], name="conv", **attributes),
        ]
        last = "c"
    if tail == "relu":
        nodes.append(helper.make_node("Relu", [last], ["act"]))
        last = "act"
    elif tail == "leaky":
        nodes.append(helper.make_node("LeakyRelu", [last], ["act"], alpha=0.2))
        last = "act"
    if other_reader:
        nodes.append(helper.make_node("ReduceMean", ["up"], ["mean"], keepdims=1))
        nodes.append(helper.make_node("Add", [last, "mean"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    return float_model(nodes, constants, shape or [1, channels, 10, 12])


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    dims = [d.dim_value or 7 for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(1).standard_normal(dims).astype(np.float32)}


def _run(model: onnx.ModelProto, feeds, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options)
    return session.run(None, feeds)[0]


def _rewritten(model: onnx.ModelProto):
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    return apply_rewrites(rewritten), rewritten


def _close(model: onnx.ModelProto, rewritten: onnx.ModelProto) -> None:
    feeds = _feeds(model)
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        np.testing.assert_allclose(
            _run(rewritten, feeds, level), _run(model, feeds, level), rtol=1e-5, atol=1e-5
        )


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("tail", ["relu", "leaky", "none"])
@pytest.mark.parametrize("bias_as_add", [False, True], ids=["conv-bias", "add-bias"])
def test_a_conv_after_a_nearest_upsampling_becomes_four_phases(tail, bias_as_add):
    model = _model(tail=tail, bias_as_add=bias_as_add)
    report, rewritten = _rewritten(model)
    assert [(f.rewrite, f.node, f.exact) for f in report.fired if f.rewrite == NAME] == [
        (NAME, "conv", False)
    ]
    ops = _ops(rewritten)
    assert "Resize" not in ops
    assert ops.count("Conv") == 4
    assert "Add" not in ops, "the bias Add moves into the phases"
    if tail != "none":
        assert ops.count("Relu" if tail == "relu" else "LeakyRelu") == 4
    assert ops.count("Transpose") == 2
    assert_well_formed(rewritten)
    _close(model, rewritten)


@pytest.mark.parametrize(
    "resize",
    [
        {},
        {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        {"coordinate_transformation_mode": "asymmetric"},
        {"coordinate_transformation_mode": "pytorch_half_pixel"},
        {"nearest_mode": "round_prefer_ceil"},
        {"coordinate_transformation_mode": "align_corners"},  # at 2x, any size
    ],
)
def test_every_resize_that_repeats_pixels_qualifies(resize):
    report, rewritten = _rewritten(_model(resize=resize))
    assert NAME in [f.rewrite for f in report.fired]
    _close(_model(resize=resize), rewritten)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"resize": {"nearest_mode": "ceil"}}, "pixel repetition"),
        ({"resize": {"nearest_mode": "floor"}}, "pixel repetition"),
        (
            {"resize": {"coordinate_transformation_mode": "tf_half_pixel_for_nn"}},
            "pixel repetition",
        ),
        (
            {"resize": {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "ceil"}},
            "pixel repetition",
        ),
        ({"scales": np.asarray([1, 1, 3, 3], np.float32)}, "pixel repetition"),
        ({"channels": 16}, "16 input channels"),
    ],
)
def test_declined_with_the_reason(change, reason):
    model = _model(**change)
    report, rewritten = _rewritten(model)
    assert NAME not in [f.rewrite for f in report.fired]
    assert any(d.rewrite == NAME and reason in d.reason for d in report.declined)
    assert "Resize" in _ops(rewritten)


@pytest.mark.parametrize(
    "conv",
    [
        {"strides": [2, 2]},
        {"pads": [0, 0, 0, 0]},
        {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
        {"pads": [1, 1, 0, 0]},
    ],
)
def test_other_convolutions_are_left_alone(conv):
    report, rewritten = _rewritten(_model(conv=conv))
    assert NAME not in [f.rewrite for f in report.fired]
    assert "Resize" in _ops(rewritten)


def test_a_linear_upsampling_is_not_taken():
    report, _ = _rewritten(_model(resize={"mode": "linear"}))
    assert NAME not in [f.rewrite for f in report.fired]


def test_the_resize_stays_for_its_other_readers():
    model = _model(other_reader=True)
    report, rewritten = _rewritten(model)
    assert NAME in [f.rewrite for f in report.fired]
    assert _ops(rewritten).count("Resize") == 1
    _close(model, rewritten)


def test_unknown_spatial_dims_interleave_with_depth_to_space():
    model = _model(shape=[1, 32, None, None])
    report, rewritten = _rewritten(model)
    assert NAME in [f.rewrite for f in report.fired]
    assert "DepthToSpace" in _ops(rewritten)
    _close(model, rewritten)


def _reference(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """3x3 'same' convolution of the 2x pixel repetition of ``x``, in float64."""
    up = x.repeat(2, axis=2).repeat(2, axis=3)
    padded = np.pad(up, ((0, 0), (0, 0), (1, 1), (1, 1)))
    height, width = up.shape[2:]
    out = np.zeros((x.shape[0], weights.shape[0], height, width))
    for dy in range(3):
        for dx in range(3):
            out += np.einsum(
                "nchw,oc->nohw",
                padded[:, :, dy : dy + height, dx : dx + width],
                weights[:, :, dy, dx],
            )
    return out


def _phases(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The four 2x2 phase kernels applied to ``x`` and interleaved, in float64."""
    kernels = phase_weights(weights)
    n, _, height, width = x.shape
    out = np.zeros((n, weights.shape[0], 2 * height, 2 * width))
    for (i, j), kernel in zip(((0, 0), (0, 1), (1, 0), (1, 1)), kernels, strict=True):
        padded = np.pad(x, ((0, 0), (0, 0), (1 - i, i), (1 - j, j)))
        phase = np.zeros((n, weights.shape[0], height, width))
        for dy in range(2):
            for dx in range(2):
                phase += np.einsum(
                    "nchw,oc->nohw",
                    padded[:, :, dy : dy + height, dx : dx + width],
                    kernel[:, :, dy, dx],
                )
        out[:, :, i::2, j::2] = phase
    return out


@settings(max_examples=40, deadline=None)
@given(
    channels=st.integers(1, 4),
    outputs=st.integers(1, 3),
    height=st.integers(1, 5),
    width=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_phase_weights_compute_the_same_function(channels, outputs, height, width, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, channels, height, width))
    weights = rng.standard_normal((outputs, channels, 3, 3))
    np.testing.assert_allclose(_phases(x, weights), _reference(x, weights), rtol=1e-12, atol=1e-12)
