"""Element-type conversions (Convert, ConvertLike, ConvertPromoteTypes, FakeConvert) against
OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset13 as o13  # noqa: E402
import openvino.opset14 as o14  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("Convert", "opset1"),
    ("ConvertLike", "opset1"),
    ("ConvertPromoteTypes", "opset14"),
    ("FakeConvert", "opset13"),
}
#: Halves, truncation both ways, wrap-around, and the non-finite values.
AWKWARD = np.asarray(
    [
        -300.7,
        -129.5,
        -2.5,
        -1.5,
        -0.7,
        -0.5,
        0.0,
        0.5,
        0.7,
        1.5,
        2.5,
        127.5,
        200.6,
        255.5,
        256.7,
        70000.2,
        np.nan,
        np.inf,
        -np.inf,
    ],
    np.float32,
)
FINITE_INT_TARGETS = ["i32", "i16", "i8", "u8", "u16"]


@pytest.mark.parametrize("target", [*FINITE_INT_TARGETS, "boolean", "f32"])
def test_convert_from_float_matches_openvino(tmp_path, target):
    values = AWKWARD if target in ("boolean", "f32") else AWKWARD[np.isfinite(AWKWARD)]
    pairs, _ = run_both(
        tmp_path,
        lambda x: o14.convert(x, target),
        [[values.size]],
        feeds={"in0": values},
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == pairs[0][1].dtype


@pytest.mark.parametrize("source", [np.int32, np.uint8, np.int64, np.bool_])
@pytest.mark.parametrize("target", ["f32", "boolean", "i8"])
def test_convert_from_integers_and_booleans_matches_openvino(tmp_path, source, target):
    pairs, _ = run_both(tmp_path, lambda x: o14.convert(x, target), [[4, 5]], [source])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("like", [np.bool_, np.int32, np.uint8])
def test_convert_like_matches_openvino(tmp_path, like):
    values = AWKWARD[np.isfinite(AWKWARD)] if like != np.bool_ else AWKWARD
    pairs, _ = run_both(
        tmp_path,
        lambda x, y: o14.convert_like(x, y),
        [[values.size], [2]],
        [np.float32, like],
        feeds={"in0": values, "in1": np.zeros(2, like)},
    )
    assert_close(pairs, exact=True)


def test_convert_refuses_an_unknown_destination_type(tmp_path):
    x = o14.parameter([2], np.float32, name="x")
    layer = o14.convert(x, "i32")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('destination_type="i32"', 'destination_type="q7"'))
    with pytest.raises(B2SError, match="destination_type"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize(
    ("left", "right", "attrs"),
    [
        (np.int32, np.float32, {"promote_unsafe": True}),
        (np.int16, np.float32, {}),
        (np.float32, np.float32, {}),
        (np.uint8, np.int8, {"promote_unsafe": True}),
        (np.bool_, np.int32, {}),
        (np.int64, np.float32, {"promote_unsafe": True}),
        (np.uint64, np.int32, {"promote_unsafe": True, "u64_integer_promotion_target": "i64"}),
        (np.int8, np.int64, {"pytorch_scalar_promotion": True}),
    ],
)
def test_convert_promote_types_matches_openvino(tmp_path, left, right, attrs):
    pairs, _ = run_both(
        tmp_path,
        lambda a, b: list(o14.convert_promote_types(a, b, **attrs).outputs()),
        [[2, 3], [3]],
        [left, right],
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == pairs[0][1].dtype == pairs[1][0].dtype


def test_convert_promote_types_refuses_an_unknown_u64_target(tmp_path):
    a = o14.parameter([2], np.uint64, name="a")
    b = o14.parameter([2], np.int32, name="b")
    layer = o14.convert_promote_types(a, b, promote_unsafe=True)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(list(layer.outputs()), [a, b]), xml)
    text = xml.read_text()
    assert 'u64_integer_promotion_target="f32"' in text
    xml.write_text(
        text.replace('u64_integer_promotion_target="f32"', 'u64_integer_promotion_target="f99"')
    )
    with pytest.raises(B2SError, match="u64_integer_promotion_target"):
        b2s_onnx.convert_ir(xml)


def _wide_range_values(shape, seed):
    """Magnitudes from 1e-6 to beyond each format's largest value, both signs, and zero."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape) * np.exp(rng.uniform(-14, 12, shape))
    values.reshape(-1)[:3] = [0.0, 448.0, -57344.0]
    return values.astype(np.float32)


@pytest.mark.parametrize("destination", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("with_shift", [False, True])
def test_fake_convert_matches_openvino(tmp_path, destination, per_channel, with_shift):
    shape = [2, 3, 20, 20]
    factor_shape = [3, 1, 1] if per_channel else []
    rng = np.random.default_rng(7)
    scale = o13.constant(rng.uniform(0.5, 4.0, factor_shape).astype(np.float32))
    shift = o13.constant(rng.uniform(-1, 1, factor_shape).astype(np.float32))

    def build(x):
        return o13.fake_convert(x, scale, shift if with_shift else None, destination)

    pairs, _ = run_both(tmp_path, build, [shape], feeds={"in0": _wide_range_values(shape, 3)})
    assert_close(pairs, atol=0, rtol=1e-6)


def _around_carried_powers():
    """float32 values on both edges of the windows below f8e5m2's subnormal powers of two
    where OpenVINO carries one binade up, and the powers themselves, both signs."""
    values = []
    for power in (2.0**-18, 2.0**-17, 2.0**-16, 2.0**-15, 2.0**-14):
        bits = int(np.float32(power).view(np.uint32))
        for offset in (0x1001, 0x1000, 0xFFF, 0x800, 1, 0, -1):
            values.append(np.uint32(bits - offset).view(np.float32))
    values = np.asarray(values, np.float32)
    return np.concatenate([values, -values]).reshape(1, 2, -1)


@pytest.mark.parametrize("scale", [1.0, 0.75])
def test_fake_convert_f8e5m2_subnormal_carries_match_openvino(tmp_path, scale):
    data = _around_carried_powers() / np.float32(scale)

    def build(x):
        return o13.fake_convert(x, o13.constant(np.float32(scale)), None, "f8e5m2")

    pairs, _ = run_both(tmp_path, build, [list(data.shape)], feeds={"in0": data})
    assert_close(pairs, atol=0, rtol=0)


def test_fake_convert_refuses_an_unknown_destination_type(tmp_path):
    x = o13.parameter([2], np.float32, name="x")
    layer = o13.fake_convert(x, o13.constant(np.float32(1)), None, "f8e5m2")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('"f8e5m2"', '"f8e3m4"'))
    with pytest.raises(B2SError, match="destination_type"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize(("element", "low", "high"), [("u4", 0, 16), ("i4", -8, 8), ("u1", 0, 2)])
@pytest.mark.parametrize("shape", [[3, 5], [4, 4]])
def test_sub_byte_weights_decompress_like_openvino(tmp_path, element, low, high, shape):
    """Compressed weights: packed u4/i4/u1 constants, converted, shifted and scaled."""
    rng = np.random.default_rng(len(shape) + shape[0])
    values = rng.integers(low, high, shape)
    weights = ov.op.Constant(
        getattr(ov.Type, element), ov.Shape(shape), values.reshape(-1).tolist()
    )
    scale = o14.constant(rng.uniform(0.1, 1.0, [shape[0], 1]).astype(np.float32))

    def build(x):
        decompressed = o14.multiply(
            o14.subtract(o14.convert(weights, "f32"), o14.constant(np.float32(high // 2))), scale
        )
        return o14.matmul(x, decompressed, False, True)

    pairs, _ = run_both(tmp_path, build, [[2, shape[1]]])
    assert f'element_type="{element}"' in (tmp_path / "model.xml").read_text()
    assert_close(pairs, atol=1e-5)


def test_sub_byte_weights_of_the_wrong_size_are_refused(tmp_path):
    weights = ov.op.Constant(ov.Type.u4, ov.Shape([7]), [1, 2, 3, 4, 5, 6, 7])
    x = o14.parameter([7], np.float32, name="x")
    layer = o14.add(x, o14.convert(weights, "f32"))
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml, compress_to_fp16=False)
    text = xml.read_text()
    assert 'element_type="u4" shape="7" offset="0" size="4"' in text
    xml.write_text(text.replace('shape="7" offset="0" size="4"', 'shape="7" offset="0" size="7"'))
    with pytest.raises(B2SError, match="packed"):
        b2s_onnx.convert_ir(xml)
