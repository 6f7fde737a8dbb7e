"""Slice, GatherND, GatherElements and OneHot against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset5 as o5  # noqa: E402
import openvino.opset6 as o6  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset16 as o16  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {
    ("Slice", "opset8"),
    ("GatherND", "opset5"),
    ("GatherND", "opset8"),
    ("GatherElements", "opset6"),
    ("OneHot", "opset1"),
    ("OneHot", "opset16"),
}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


SLICES = {
    "axes": ([1, -1], [3, 0], [1, -2], [1, 2]),
    "no-axes": ([0, 4, 1], [2, 0, 5], [1, -1, 2], None),
    "clamped": ([-100], [100], [3], [-1]),
    "reverse-all": ([-1], [-(2**31)], [-1], [0]),
    "empty": ([3], [1], [1], [1]),
    "backward-from-before-the-start": ([-9, -2], [-12, -2], [-1, -1], [1, 2]),
}


@pytest.mark.parametrize("case", SLICES)
@pytest.mark.parametrize("index_type", [I32, I64])
def test_slice_8_is_exact(tmp_path, case, index_type):
    start, stop, step, axes = SLICES[case]

    def build(a):
        bounds = [c(start, index_type), c(stop, index_type), c(step, index_type)]
        if axes is not None:
            bounds.append(c(axes, index_type))
        return o8.slice(a, *bounds)

    pairs, _ = run_both(tmp_path, build, [[3, 5, 6]])
    assert_close(pairs, exact=True)


def test_slice_8_with_runtime_bounds_is_exact(tmp_path):
    """Bounds computed in the graph (from ShapeOf), as tf2onnx graphs do."""

    def build(a):
        half = o1.divide(o1.gather(o8.shape_of(a), c([2]), c(0)), c([2]))
        return o8.slice(a, half, c([100]), c([1]), c([2]))

    pairs, _ = run_both(tmp_path, build, [[2, 3, 8]])
    assert_close(pairs, exact=True)


def test_slice_8_zero_step_is_refused(tmp_path):
    """OpenVINO refuses to build a zero step, so the saved weights are edited to hold one."""
    param = o1.parameter([4], F32, name="x")
    model = ov.Model([o8.slice(param, c([0]), c([4]), c([3]))], [param])
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    weights = xml.with_suffix(".bin")
    three = np.asarray([3], I64).tobytes()
    assert weights.read_bytes().count(three) == 1
    weights.write_bytes(weights.read_bytes().replace(three, np.asarray([0], I64).tobytes()))
    with pytest.raises(b2s_onnx.B2SError, match="'step'"):
        b2s_onnx.convert_ir(xml)


GATHER_ND = [
    # (data shape, indices, batch_dims)
    ([3, 4], [[1, 2], [2, 0], [0, 3]], 0),
    ([3, 4, 2], [[1], [-1]], 0),
    ([2, 3, 4], [[[1]], [[2]]], 1),
    ([2, 3, 4, 2], [[[1], [0]], [[2], [1]]], 1),
    ([2, 3, 4, 5], [[[1, 2], [0, 4]], [[2, 3], [3, 0]]], 2),
]


@pytest.mark.parametrize(("shape", "indices", "batch_dims"), GATHER_ND)
@pytest.mark.parametrize("version", [5, 8])
def test_gather_nd_is_exact(tmp_path, shape, indices, batch_dims, version):
    make = o5.gather_nd if version == 5 else o8.gather_nd
    if batch_dims == 2 and shape == [2, 3, 4, 5]:
        indices = np.asarray(indices).reshape(2, 1, 2, 2)
        indices = np.concatenate([indices] * 3, axis=1)
    pairs, _ = run_both(tmp_path, lambda a: make(a, c(indices, I32), batch_dims), [shape], [F32])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [F32, I32])
def test_gather_elements_is_exact(tmp_path, axis, dtype):
    shape = [3, 3, 3]
    shape[axis] = 2
    indices = np.random.default_rng(3).integers(-3, 3, shape)
    pairs, _ = run_both(
        tmp_path, lambda a: o6.gather_elements(a, c(indices), axis), [[3, 3, 3]], [dtype]
    )
    assert_close(pairs, exact=True)


def test_gather_elements_axis_outside_rank_is_refused(tmp_path):
    param = o1.parameter([3, 3], F32, name="x")
    model = ov.Model([o6.gather_elements(param, c([[0, 1], [2, 0], [1, 1]]), 1)], [param])
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    xml.write_text(xml.read_text().replace('axis="1"', 'axis="5"'))
    with pytest.raises(b2s_onnx.B2SError, match="axis=5"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize(("on", "off", "dtype"), [(1.5, -0.5, F32), (7, 0, I32), (1, 0, I64)])
def test_one_hot_1_gives_off_values_for_negative_and_large_indices(tmp_path, axis, on, off, dtype):
    indices = np.asarray([[0, 3, -1], [5, 2, -4]], I64)
    pairs, _ = run_both(
        tmp_path,
        lambda i: o1.one_hot(i, c(4), c(on, dtype), c(off, dtype), axis),
        [[2, 3]],
        [I64],
        feeds={"in0": indices},
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("mode", ["ignore_negative", "normalize"])
def test_one_hot_16_negative_indices_modes(tmp_path, mode):
    indices = np.asarray([0, 3, -1, -4, 7, -5], I32)
    pairs, _ = run_both(
        tmp_path,
        lambda i: o16.one_hot(i, c(4, I32), c(1.0, F32), c(0.0, F32), 0, mode),
        [[6]],
        [I32],
        feeds={"in0": indices},
    )
    assert_close(pairs, exact=True)


def test_one_hot_16_unknown_mode_is_refused(tmp_path):
    param = o1.parameter([3], I64, name="x")
    node = o16.one_hot(param, c(4), c(1.0, F32), c(0.0, F32), 0, "normalize")
    model = ov.Model([node], [param])
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    xml.write_text(xml.read_text().replace('"normalize"', '"wrap"'))
    with pytest.raises(b2s_onnx.B2SError, match="negative_indices_mode"):
        b2s_onnx.convert_ir(xml)
