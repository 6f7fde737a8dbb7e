"""Normalization layers against OpenVINO's CPU plugin (f32)."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset5 as o5  # noqa: E402
import openvino.opset12 as o12  # noqa: E402
import openvino.opset13 as o13  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
COVERED_LAYERS = {
    ("BatchNormInference", "opset1"),
    ("BatchNormInference", "opset5"),
    ("LRN", "opset1"),
    ("GRN", "opset1"),
    ("GroupNormalization", "opset12"),
    ("ScaledDotProductAttention", "opset13"),
}


def const(values, dtype=F32):
    return o1.constant(np.asarray(values, dtype))


def channel_params(channels, seed):
    rng = np.random.default_rng(seed)
    gamma, beta, mean = (const(rng.standard_normal(channels)) for _ in range(3))
    variance = const(rng.uniform(0.1, 2.0, channels))
    return gamma, beta, mean, variance


def refuse(tmp_path, outputs, params, mutate, match):
    """Saves the model, applies ``mutate`` to its XML text, expects a B2SError."""
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([o.output(0) for o in outputs], params), xml, compress_to_fp16=False)
    xml.write_text(mutate(xml.read_text()))
    with pytest.raises(B2SError, match=match):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("shape", [[2, 3], [2, 3, 5], [1, 3, 4, 5], [1, 3, 2, 2, 3]])
@pytest.mark.parametrize("version", [1, 5])
def test_batch_norm_inference_matches_openvino(tmp_path, shape, version):
    gamma, beta, mean, variance = channel_params(3, seed=len(shape))
    build = o1 if version == 1 else o5
    pairs, _ = run_both(
        tmp_path,
        lambda x: build.batch_norm_inference(x, gamma, beta, mean, variance, 1e-3),
        [shape],
    )
    assert_close(pairs, atol=1e-5)


def test_batch_norm_inference_refuses_a_negative_epsilon(tmp_path):
    x = o1.parameter([1, 3, 2, 2], F32, name="x")
    layer = o5.batch_norm_inference(x, *channel_params(3, 0), 1e-3)
    refuse(tmp_path, [layer], [x], lambda t: t.replace('epsilon="0.001"', 'epsilon="-1"'), "eps")


@pytest.mark.parametrize(
    ("shape", "axes", "size"),
    [
        ([1, 7, 3, 4], [1], 5),
        ([1, 7, 3, 4], [1], 4),
        ([1, 3, 5, 6], [2, 3], 3),
        ([2, 6, 5], [1], 3),
        ([2, 6, 5], [2], 2),
        ([1, 4, 5, 3], [3, 2], 4),
        ([1, 5, 1, 1], [1], 1),
        ([1, 96, 3, 4], [1], 5),  # from 96 channels: windows gathered, a grouped Conv
        ([1, 112, 2, 3], [1], 4),
    ],
)
def test_lrn_matches_openvino(tmp_path, shape, axes, size):
    pairs, _ = run_both(
        tmp_path, lambda x: o1.lrn(x, const(axes, np.int64), 0.3, 0.75, 2.0, size), [shape]
    )
    assert_close(pairs, atol=1e-5)


def test_lrn_refuses_a_zero_size(tmp_path):
    x = o1.parameter([1, 3, 2, 2], F32, name="x")
    layer = o1.lrn(x, const([1], np.int64), 0.3, 0.75, 1.5, 3)
    refuse(tmp_path, [layer], [x], lambda t: t.replace('size="3"', 'size="0"'), "size")


@pytest.mark.parametrize("shape", [[2, 5], [2, 4, 3], [1, 4, 3, 3]])
@pytest.mark.parametrize("bias", [1e-6, 0.5])
def test_grn_matches_openvino(tmp_path, shape, bias):
    pairs, _ = run_both(tmp_path, lambda x: o1.grn(x, bias), [shape])
    assert_close(pairs, atol=1e-5)


def test_grn_refuses_a_missing_bias(tmp_path):
    x = o1.parameter([1, 3, 2], F32, name="x")
    layer = o1.grn(x, 0.5)
    refuse(tmp_path, [layer], [x], lambda t: t.replace('bias="0.5"', ""), "bias")


@pytest.mark.parametrize(
    ("shape", "groups"), [([2, 6, 4, 3], 3), ([1, 6, 5], 6), ([2, 4], 2), ([1, 4, 2, 2, 3], 1)]
)
def test_group_normalization_matches_openvino(tmp_path, shape, groups):
    channels = shape[1]
    rng = np.random.default_rng(groups)
    scale, bias = const(rng.standard_normal(channels)), const(rng.standard_normal(channels))
    pairs, _ = run_both(
        tmp_path, lambda x: o12.group_normalization(x, scale, bias, groups, 1e-5), [shape]
    )
    assert_close(pairs, atol=2e-5)


def test_group_normalization_refuses_groups_that_do_not_divide_the_channels(tmp_path):
    x = o1.parameter([1, 6, 2], F32, name="x")
    layer = o12.group_normalization(x, const(np.ones(6)), const(np.zeros(6)), 3, 1e-5)
    refuse(
        tmp_path, [layer], [x], lambda t: t.replace('num_groups="3"', 'num_groups="4"'), "groups"
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_scaled_dot_product_attention_matches_openvino(tmp_path, causal, mask, scale):
    def build(q, k, v, *extra):
        operands = [q, k, v]
        if mask is not None:
            operands.append(extra[0])
        elif scale is not None:
            operands.append(const(0.0))
        if scale is not None:
            operands.append(const(scale))
        return o13.scaled_dot_product_attention(*operands, causal=causal)

    shapes = [[2, 3, 4, 8], [2, 3, 5, 8], [2, 3, 5, 6]]
    dtypes = [F32] * 3
    if mask == "bool":
        shapes.append([1, 1, 4, 5])
        dtypes.append(np.bool_)
    elif mask == "float":
        shapes.append([2, 1, 4, 5])
        dtypes.append(F32)
    pairs, _ = run_both(tmp_path, build, shapes, dtypes)
    assert_close(pairs, atol=1e-5)


def test_scaled_dot_product_attention_refuses_a_bad_causal_flag(tmp_path):
    q = o1.parameter([1, 2, 3], F32, name="q")
    layer = o13.scaled_dot_product_attention(q, q, q, causal=True)
    refuse(tmp_path, [layer], [q], lambda t: t.replace('causal="true"', 'causal="maybe"'), "causal")
