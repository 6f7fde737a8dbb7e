"""BinaryConvolution-1 converts to a Conv of +-1 values that matches OpenVINO's CPU plugin
bit for bit: its 1-bit weights read least significant bit first, data above 0 counted as 1
(0, -0 and NaN as -1), the border padded with pad_value; input channel counts whose weight
layout the plugin keeps to itself are refused with the layer, the input and the rule."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
ops = pytest.importorskip("openvino.opset13")
opset1 = pytest.importorskip("openvino.opset1")

SIZE = (9, 11)
#: The registry entries these tests exercise (test_ir_ops checks every one is).
COVERED_LAYERS = (("BinaryConvolution", "opset1"),)


def _ir(
    tmp_path,
    channels,
    *,
    pad_value=0.0,
    auto_pad="explicit",
    stride=1,
    dilation=1,
    kernel=3,
    out_channels=6,
    precision=np.float32,
    seed=0,
):
    rng = np.random.default_rng(seed)
    weights = ov.Tensor(ov.Type.u1, ov.Shape([out_channels, channels, kernel, kernel]))
    packed = weights.data.view(np.uint8).reshape(-1)
    packed[:] = rng.integers(0, 256, packed.size).astype(np.uint8)
    data = ops.parameter([1, channels, *SIZE], precision, name="x")
    pad = kernel // 2
    output = opset1.binary_convolution(
        data,
        ops.constant(weights),
        [stride, stride],
        [pad, pad],
        [pad, pad],
        [dilation, dilation],
        "xnor-popcount",
        pad_value,
        auto_pad,
    )
    xml = tmp_path / "binary.xml"
    ov.save_model(ov.Model([output], [data]), xml, compress_to_fp16=False)
    return xml


def _feeds(channels, precision=np.float32, seed=1):
    x = np.random.default_rng(seed).standard_normal((1, channels, *SIZE)).astype(precision)
    x[0, 0, 0, :3] = [0.0, -0.0, np.nan]  # all count as -1
    return {"x": x}


def _openvino(xml, feeds):
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled(feeds)[0])


@pytest.mark.parametrize(
    "case",
    [
        {"channels": 8},
        {"channels": 16, "pad_value": 1.0, "stride": 2},
        {"channels": 64, "pad_value": -1.0, "auto_pad": "same_upper"},
        {"channels": 24, "auto_pad": "same_lower", "stride": 2},
        {"channels": 32, "auto_pad": "valid"},
        {"channels": 8, "dilation": 2, "pad_value": 1.0},
        {"channels": 16, "kernel": 1},
        {"channels": 8, "precision": np.float16},
    ],
    ids=[
        "8",
        "16-stride-2-pad-1",
        "64-same-upper",
        "24-same-lower",
        "32-valid",
        "dilated",
        "1x1",
        "f16",
    ],
)
def test_binary_convolution_matches_openvinos_cpu_plugin_bit_for_bit(tmp_path, case):
    precision = case.get("precision", np.float32)
    xml = _ir(tmp_path, **case)
    feeds = _feeds(case["channels"], precision)
    expected = _openvino(xml, feeds)
    converted = b2s_onnx.convert_ir(xml)
    got = next(iter(run_onnxruntime(converted, feeds).values()))
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("channels", [5, 12])
def test_channel_counts_off_the_byte_are_refused_with_the_rule(tmp_path, channels):
    xml = _ir(tmp_path, channels)
    with pytest.raises(B2SError) as failure:
        b2s_onnx.convert_ir(xml)
    message = str(failure.value)
    assert "BinaryConvolution" in message
    assert "input 1 (kernel)" in message
    assert "multiples of 8" in message
