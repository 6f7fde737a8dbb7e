"""Bitwise, shift and float-classification layers against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset10 as o10  # noqa: E402
import openvino.opset13 as o13  # noqa: E402
import openvino.opset15 as o15  # noqa: E402
from openvino.utils.node_factory import NodeFactory  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32

COVERED_LAYERS = {
    ("BitwiseAnd", "opset13"),
    ("BitwiseOr", "opset13"),
    ("BitwiseXor", "opset13"),
    ("BitwiseNot", "opset13"),
    ("BitwiseLeftShift", "opset15"),
    ("BitwiseRightShift", "opset15"),
    ("Xor", "opset1"),
    ("IsFinite", "opset10"),
    ("IsInf", "opset10"),
    ("IsNaN", "opset10"),
}

INTEGERS = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64]


def feeds_for(dtype, shapes, seed=0):
    """Values over the whole range of the type, except that the CPU plugin computes i64 and
    u32 in i32 (a plugin deviation): those stay within the i32 range."""
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return {f"in{i}": rng.integers(0, 2, s).astype(bool) for i, s in enumerate(shapes)}
    info = np.iinfo(dtype)
    low, high = info.min, info.max
    if dtype in (np.int64, np.uint32):
        low, high = max(low, np.iinfo(np.int32).min), np.iinfo(np.int32).max
    return {
        f"in{i}": rng.integers(low, high, s, endpoint=True).astype(dtype)
        for i, s in enumerate(shapes)
    }


@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("dtype", [*INTEGERS, np.bool_])
def test_bitwise_binary_is_exact(tmp_path, op, dtype):
    make = getattr(o13, f"bitwise_{op}")
    shapes = [[2, 5], [5]]
    pairs, _ = run_both(tmp_path, make, shapes, [dtype, dtype], feeds=feeds_for(dtype, shapes))
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("dtype", [*INTEGERS, np.bool_])
def test_bitwise_not_is_exact(tmp_path, dtype):
    pairs, _ = run_both(
        tmp_path, o13.bitwise_not, [[3, 4]], [dtype], feeds=feeds_for(dtype, [[3, 4]])
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("direction", ["left", "right"])
@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_shifts_are_exact(tmp_path, direction, dtype):
    make = getattr(o15, f"bitwise_{direction}_shift")
    bits = np.iinfo(dtype).bits
    feeds = feeds_for(dtype, [[4, 6]])
    if dtype == np.int64:  # computed in i32 by the plugin: keep the results in its range
        feeds["in0"] = (feeds["in0"] >> 16).astype(dtype)
        bits = 16
    feeds["in1"] = np.random.default_rng(1).integers(0, min(bits, 32), [6]).astype(dtype)
    pairs, _ = run_both(tmp_path, make, [[4, 6], [6]], [dtype, dtype], feeds=feeds)
    assert_close(pairs, exact=True)


def test_xor_1_is_logical_xor(tmp_path):
    shapes = [[3, 4], [3, 4]]
    pairs, _ = run_both(
        tmp_path,
        lambda a, b: NodeFactory("opset1").create("Xor", [a, b], {"auto_broadcast": "numpy"}),
        shapes,
        [np.bool_, np.bool_],
        feeds=feeds_for(np.bool_, shapes),
    )
    assert_close(pairs, exact=True)


def test_bitwise_and_without_broadcast_refuses_unequal_shapes(tmp_path):
    a = o1.parameter([2, 5], np.int32, name="a")
    b = o1.parameter([5], np.int32, name="b")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o13.bitwise_and(a, b)], [a, b]), xml)
    xml.write_text(xml.read_text().replace('auto_broadcast="numpy"', 'auto_broadcast="none"'))
    with pytest.raises(b2s_onnx.B2SError, match="auto_broadcast='none'"):
        b2s_onnx.convert_ir(xml)


#: No subnormals: the CPU plugin calls them not finite (a plugin deviation; they are).
SPECIALS = np.asarray([[0.0, -1.5, np.inf, -np.inf, np.nan, 3e38, -0.0, 1e-30]], F32)


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("IsFinite", o10.is_finite),
        ("IsNaN", o10.is_nan),
        ("IsInf", o10.is_inf),
        ("IsInf-negative", lambda a: o10.is_inf(a, {"detect_positive": False})),
        ("IsInf-positive", lambda a: o10.is_inf(a, {"detect_negative": False})),
    ],
)
def test_float_classes_are_exact(tmp_path, name, build):
    pairs, _ = run_both(tmp_path, build, [[1, 8]], feeds={"in0": SPECIALS})
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(
    ("values", "amounts"),
    [
        (np.asarray([4_000_000_000, 2**31, 7, 2**32 - 1], np.uint32), [1, 3, 1, 31]),
        (np.asarray([-(2**63), -(2**40) - 3, 2**62 + 5, -1], np.int64), [1, 17, 60, 63]),
    ],
    ids=["u32-logical", "i64-arithmetic"],
)
def test_right_shift_of_values_the_plugin_narrows_matches_numpy(tmp_path, values, amounts):
    """The CPU plugin computes u32 and i64 in i32; a shift of an unsigned value is logical,
    of a signed one arithmetic, as numpy computes them."""
    amounts = np.asarray(amounts, values.dtype)
    a, b = (o1.parameter([4], values.dtype, name=n) for n in ("a", "b"))
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o15.bitwise_right_shift(a, b)], [a, b]), xml)
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"a": values, "b": amounts}).values()
    assert ours.tobytes() == (values >> amounts).tobytes()


def test_is_inf_with_bad_flag_is_refused(tmp_path):
    a = o1.parameter([3], F32, name="a")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o10.is_inf(a)], [a]), xml)
    xml.write_text(xml.read_text().replace('detect_negative="true"', 'detect_negative="maybe"'))
    with pytest.raises(b2s_onnx.B2SError, match="detect_negative"):
        b2s_onnx.convert_ir(xml)
