"""`stride-one-conv-transpose`: a ConvTranspose with stride 1 is the Conv with the kernel
flipped and its channel axes swapped, within float rounding, any kernel, padding,
dilation, group and rank; other strides and output sizing are left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import CONVERTED_MODEL_REWRITES, apply_rewrites
from b2s_onnx.rewrites.stride_one_conv_transpose import StrideOneConvTranspose
from tests.helpers import float_model, rewritten_copy

NAME = StrideOneConvTranspose.name


def _model(
    channels=6, outputs=4, kernel=(3, 3), size=(7, 9), group=1, bias=True, seed=0, **attributes
) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal([channels, outputs // group, *kernel]).astype(np.float32)
    constants = {"w": weights}
    inputs = ["x", "w"]
    if bias:
        constants["b"] = rng.standard_normal(outputs).astype(np.float32)
        inputs.append("b")
    node = helper.make_node(
        "ConvTranspose", inputs, ["y"], name="deconv", group=group, **attributes
    )
    return float_model([node], constants, [1, channels, *size])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return run_onnxruntime(model, {"x": x})[model.graph.output[0].name]


def _check(model: onnx.ModelProto) -> onnx.ModelProto:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
    expected = _run(model, x)
    report, rewritten = rewritten_copy(model, *CONVERTED_MODEL_REWRITES)
    assert [(f.rewrite, f.exact) for f in report.fired] == [(NAME, False)]
    assert [n.op_type for n in rewritten.graph.node] == ["Conv"]
    actual = _run(rewritten, x)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    return rewritten


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"pads": [1, 1, 1, 1]},
        {"pads": [0, 2, 1, 0]},
        {"dilations": [2, 1], "pads": [1, 0, 2, 1]},
        {"strides": [1, 1]},
    ],
)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_a_stride_one_conv_transpose_becomes_a_conv(attributes, bias):
    _check(_model(bias=bias, **attributes))


@pytest.mark.parametrize("group", [2, 3])
def test_grouped_ones_map_group_by_group(group):
    _check(_model(channels=6, outputs=6, group=group, pads=[1, 1, 1, 1]))


@pytest.mark.parametrize(("kernel", "size"), [((3,), (11,)), ((2, 3, 2), (4, 5, 3))])
def test_other_ranks(kernel, size):
    _check(_model(kernel=kernel, size=size))


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"output_padding": [0, 0], "output_shape": [9, 11]}, "output size"),
        ({"auto_pad": "SAME_UPPER"}, "auto_pad"),
        ({"pads": [3, 0, 0, 0]}, "larger than the kernel"),
    ],
)
def test_declined_with_the_reason(attributes, reason):
    model = _model(**attributes)
    report = apply_rewrites(model)
    assert NAME not in [f.rewrite for f in report.fired]
    assert any(d.rewrite == NAME and reason in d.reason for d in report.declined)


def test_strided_ones_are_left_alone():
    model = _model(strides=[2, 2])
    report = apply_rewrites(model)
    assert NAME not in [f.rewrite for f in report.fired]
    assert [n.op_type for n in model.graph.node] == ["ConvTranspose"]


@settings(max_examples=30, deadline=None)
@given(
    channels=st.integers(1, 4),
    per_group=st.integers(1, 3),
    group=st.integers(1, 2),
    kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    data=st.data(),
)
def test_any_geometry_computes_the_same(channels, per_group, group, kernel, dilation, data):
    extents = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
    pads = [data.draw(st.integers(0, extents[a % 2])) for a in range(4)]
    model = _model(
        channels=channels * group,
        outputs=per_group * group,
        kernel=kernel,
        size=(5, 6),
        group=group,
        dilations=list(dilation),
        pads=pads,
        seed=data.draw(st.integers(0, 99)),
    )
    _check(model)
