"""`strided-conv-transpose-as-phases`: a ConvTranspose with stride s and a kernel multiple
of s above it as s*s phase Convs and an interleave, within float rounding, over kernels,
strides, pads and sizes; declined where the phases would differ or need cropping."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import CONVERTED_MODEL_REWRITES, apply_rewrites
from b2s_onnx.rewrites.strided_conv_transpose_as_phases import StridedConvTransposeAsPhases
from tests.helpers import float_model, rewritten_copy

NAME = StridedConvTransposeAsPhases.name


def _model(
    channels=5,
    outputs=3,
    kernel=(4, 4),
    stride=2,
    pads=(1, 1, 1, 1),
    size=(6, 7),
    activation=None,
    bias=True,
    seed=0,
    **attributes,
) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    group = attributes.get("group", 1)
    constants = {"w": rng.standard_normal([channels, outputs // group, *kernel]).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        constants["b"] = rng.standard_normal(outputs).astype(np.float32)
        inputs.append("b")
    out = "d" if activation else "y"
    nodes = [
        helper.make_node(
            "ConvTranspose",
            inputs,
            [out],
            name="deconv",
            strides=[stride, stride],
            pads=list(pads),
            **attributes,
        )
    ]
    if activation:
        nodes.append(helper.make_node(activation, ["d"], ["y"]))
    return float_model(nodes, constants, [1, channels, *size])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return run_onnxruntime(model, {"x": x})[model.graph.output[0].name]


def _check(model: onnx.ModelProto, x_shape) -> onnx.ModelProto:
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    expected = _run(model, x)
    report, rewritten = rewritten_copy(model, *CONVERTED_MODEL_REWRITES)
    assert [(f.rewrite, f.exact) for f in report.fired if f.rewrite == NAME] == [(NAME, False)]
    assert "ConvTranspose" not in [n.op_type for n in rewritten.graph.node]
    actual = _run(rewritten, x)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    return rewritten


@pytest.mark.parametrize(
    ("kernel", "stride", "pads"),
    [
        ((4, 4), 2, (1, 1, 1, 1)),
        ((4, 4), 2, (0, 0, 2, 2)),
        ((6, 6), 3, (1, 2, 2, 1)),
        ((4, 6), 2, (1, 2, 1, 2)),
    ],
)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_a_strided_conv_transpose_becomes_phase_convs(kernel, stride, pads, bias):
    _check(_model(kernel=kernel, stride=stride, pads=pads, bias=bias), [1, 5, 6, 7])


def test_the_activation_moves_into_each_phase():
    rewritten = _check(_model(activation="Relu"), [1, 5, 6, 7])
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Conv") == 4
    assert ops.count("Relu") == 4


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"kernel": (3, 3)}, "multiple of the stride"),
        ({"kernel": (2, 2), "pads": (0, 0, 0, 0)}, "multiple of the stride"),
        ({"group": 5, "outputs": 5}, "grouped"),
        ({"dilations": [2, 2]}, "dilated"),
        ({"output_padding": [1, 1]}, "output-sized"),
        ({"pads": (0, 0, 1, 1)}, "differ in size"),
        ({"pads": (3, 3, 3, 3)}, "cropping"),
        ({"size": (None, None)}, "not static"),
    ],
)
def test_declined_with_the_reason(change, reason):
    model = _model(**change)
    report = apply_rewrites(model)
    assert NAME not in [f.rewrite for f in report.fired]
    assert any(d.rewrite == NAME and reason in d.reason for d in report.declined)
    assert "ConvTranspose" in [n.op_type for n in model.graph.node]


@settings(max_examples=40, deadline=None)
@given(
    stride=st.integers(2, 3),
    taps=st.tuples(st.integers(2, 3), st.integers(2, 3)),
    size=st.tuples(st.integers(1, 6), st.integers(1, 6)),
    data=st.data(),
)
def test_any_geometry_that_qualifies_computes_the_same(stride, taps, size, data):
    kernel = tuple(t * stride for t in taps)
    pads = tuple(data.draw(st.integers(0, kernel[a % 2] - 1)) for a in range(4))
    model = _model(kernel=kernel, stride=stride, pads=pads, size=size, seed=sum(pads))
    report, rewritten = rewritten_copy(model, *CONVERTED_MODEL_REWRITES)
    if NAME not in [f.rewrite for f in report.fired]:
        return  # phases of different sizes or needing a crop: declined, checked above
    x = np.random.default_rng(2).standard_normal([1, 5, *size]).astype(np.float32)
    np.testing.assert_allclose(_run(rewritten, x), _run(model, x), rtol=1e-5, atol=1e-5)
