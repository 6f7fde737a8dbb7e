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


def _fake_quantize_spec(x, levels, in_low, in_high, out_low, out_high):
    """FakeQuantize-1 as its specification writes it, in float64."""
    x = x.astype(np.float64)
    low, high = min(in_low, in_high), max(in_low, in_high)
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (np.round((x - in_low) / (in_high - in_low) * (levels - 1)) / (levels - 1)) * (
            out_high - out_low
        ) + out_low
    return np.where(x <= low, out_low, np.where(x > high, out_high, between))


@pytest.mark.parametrize(
    "ranges",
    [
        (2, 0.0, 0.0, 0.0, 1.0),
        (2, 0.0, 0.0, -1.0, 1.0),
        (256, 0.5, 0.5, 0.0, 255.0),
        (3, 0.2, 0.2, 2.0, -2.0),
        (2, 1.0, -1.0, 0.0, 1.0),
        (5, 1.0, -1.0, 0.0, 4.0),
    ],
    ids=[
        "threshold-0-1",
        "threshold-pm1",
        "threshold-256",
        "threshold-reversed-out",
        "inverted-2",
        "inverted-5",
    ],
)
def test_fake_quantize_with_an_empty_or_inverted_input_range_follows_its_specification(
    tmp_path, ranges
):
    """An empty input range is a threshold (x <= in_low gives out_low, above it out_high):
    binary networks binarize their activations so. OpenVINO's CPU plugin returns NaN for
    such a FakeQuantize standing alone (it thresholds only where it fuses it into a
    BinaryConvolution), so the reference here is the specification."""
    levels, *bounds = ranges
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    data = ops.parameter([1, 1, 1, 10], np.float32, name="x")
    output = ops.fake_quantize(data, *(const(v) for v in bounds), levels)
    xml = tmp_path / "fq.xml"
    ov.save_model(ov.Model([output], [data]), xml, compress_to_fp16=False)
    x = np.array([-2, -1, -0.5, -1e-6, 0, 1e-6, 0.3, 0.5, 1, 2], np.float32).reshape(1, 1, 1, 10)
    got = next(iter(run_onnxruntime(b2s_onnx.convert_ir(xml), {"x": x}).values()))
    np.testing.assert_array_equal(got, _fake_quantize_spec(x, levels, *bounds).astype(np.float32))


def test_a_binarized_block_matches_openvino_which_fuses_the_threshold(tmp_path):
    """FakeQuantize (levels 2, an empty input range at 0) -> BinaryConvolution -> scale and
    shift, twice: OpenVINO fuses the threshold into its binary convolution."""
    rng = np.random.default_rng(9)
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    data = ops.parameter([1, 16, *SIZE], np.float32, name="x")
    y = data
    for channels, out_channels in ((16, 32), (32, 32)):
        weights = ov.Tensor(ov.Type.u1, ov.Shape([out_channels, channels, 3, 3]))
        packed = weights.data.view(np.uint8).reshape(-1)
        packed[:] = rng.integers(0, 256, packed.size).astype(np.uint8)
        bits = ops.fake_quantize(y, const(0), const(0), const(0), const(1), 2)
        y = opset1.binary_convolution(
            bits, ops.constant(weights), [1, 1], [1, 1], [1, 1], [1, 1], "xnor-popcount", 1.0
        )
        scale = rng.uniform(0.01, 0.05, (1, out_channels, 1, 1))
        y = ops.add(
            ops.multiply(y, const(scale)), const(rng.standard_normal((1, out_channels, 1, 1)))
        )
    xml = tmp_path / "binary_block.xml"
    ov.save_model(ov.Model([y], [data]), xml, compress_to_fp16=False)
    feeds = {"x": rng.standard_normal((1, 16, *SIZE)).astype(np.float32)}
    got = next(iter(run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values()))
    np.testing.assert_allclose(got, _openvino(xml, feeds), rtol=1e-6, atol=1e-5)


def test_a_kernel_for_other_channel_counts_is_refused(tmp_path):
    xml = _ir(tmp_path, 16)
    # The data (Parameter and the convolution's input port) grows to 24 channels.
    text = xml.read_text().replace('shape="1,16,9,11"', 'shape="1,24,9,11"')
    head, tail = text.split('type="BinaryConvolution"', 1)
    head = head.replace("<dim>16</dim>", "<dim>24</dim>", 1)
    tail = tail.replace("<dim>16</dim>", "<dim>24</dim>", 1)
    xml.write_text(head + 'type="BinaryConvolution"' + tail)
    with pytest.raises(B2SError, match=r"input 0 has 24 channels but input 1 \(kernel\)"):
        b2s_onnx.convert_ir(xml)
