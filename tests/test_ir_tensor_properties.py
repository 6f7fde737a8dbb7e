"""Properties of the tensor converters against reference semantics written here in numpy
(slicing, rolling, sorted search, scatter-add): many random cases, run in onnxruntime only,
so they stay fast. Where OpenVINO departs from numpy (a backward slice starting before the
first element keeps it), the reference follows OpenVINO, as its CPU plugin does."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset7 as o7  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset12 as o12  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I64 = np.float32, np.int64


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


def converted_run(build, data: np.ndarray) -> np.ndarray:
    """Builds an IR around one parameter, converts it and runs it in onnxruntime."""
    param = o1.parameter(list(data.shape), data.dtype, name="x")
    with tempfile.TemporaryDirectory() as folder:
        xml = Path(folder) / "m.xml"
        ov.save_model(ov.Model([build(param)], [param]), xml, compress_to_fp16=False)
        model = b2s_onnx.convert_ir(xml)
    (out,) = run_onnxruntime(model, {"x": data}).values()
    return out


def slice_positions(size: int, start: int, stop: int, step: int) -> list[int]:
    """The positions Slice-8 takes: negative bounds count from the end, then bounds are
    clamped to [0, size] going forward and to [0, size - 1] (start) / [-1, size - 1]
    (stop) going backward."""
    start, stop = (b + size if b < 0 else b for b in (start, stop))
    if step > 0:
        start, stop = min(max(start, 0), size), min(max(stop, 0), size)
    else:
        start, stop = min(max(start, 0), size - 1), min(max(stop, -1), size - 1)
    return list(range(start, stop, step))


shapes = st.lists(st.integers(0, 5), min_size=1, max_size=3)
bounds = st.integers(-7, 7)


@given(
    shape=shapes,
    data=st.data(),
)
def test_slice_8_is_numpy_slicing(shape, data):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    start = data.draw(st.lists(bounds, min_size=len(axes), max_size=len(axes)))
    stop = data.draw(st.lists(bounds, min_size=len(axes), max_size=len(axes)))
    step = data.draw(st.lists(bounds.filter(bool), min_size=len(axes), max_size=len(axes)))
    tensor = np.arange(int(np.prod(shape)), dtype=F32).reshape(shape)
    expected = tensor
    for axis, begin, end, stride in zip(axes, start, stop, step, strict=True):
        expected = np.take(expected, slice_positions(shape[axis], begin, end, stride), axis)
    out = converted_run(lambda a: o8.slice(a, c(start), c(stop), c(step), c(axes)), tensor)
    assert out.shape == expected.shape
    assert out.tobytes() == expected.tobytes()


@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_roll_7_is_numpy_roll(shape, data):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=3))
    shifts = data.draw(st.lists(st.integers(-9, 9), min_size=len(axes), max_size=len(axes)))
    tensor = np.arange(int(np.prod(shape)), dtype=F32).reshape(shape)
    out = converted_run(lambda a: o7.roll(a, c(shifts), c(axes)), tensor)
    assert out.tobytes() == np.roll(tensor, shifts, axes).tobytes()


@given(
    sequence=st.lists(st.integers(-5, 5), min_size=1, max_size=6).map(sorted),
    values=st.lists(st.integers(-6, 6), min_size=1, max_size=6),
    right=st.booleans(),
)
def test_search_sorted_15_is_numpy_searchsorted(sequence, values, right):
    query = np.asarray(values, F32)
    out = converted_run(lambda a: o15.search_sorted(c(sequence, F32), a, right), query)
    expected = np.searchsorted(np.asarray(sequence, F32), query, "right" if right else "left")
    assert out.tolist() == expected.tolist()


@given(
    rows=st.integers(1, 4),
    targets=st.lists(st.integers(-3, 2), min_size=1, max_size=6),
    use_init=st.booleans(),
)
def test_scatter_elements_update_12_sum_is_numpy_add_at(rows, targets, use_init):
    tensor = np.arange(rows * 3, dtype=F32).reshape(rows, 3) + 0.5
    index = np.asarray([targets] * rows)
    updates = np.arange(index.size, dtype=F32).reshape(index.shape) * 0.25 + 1
    expected = tensor.copy()
    positive = index % 3
    if not use_init:
        np.put_along_axis(expected, positive, 0.0, axis=1)
    for r in range(rows):
        np.add.at(expected[r], positive[r], updates[r])
    out = converted_run(
        lambda a: o12.scatter_elements_update(a, c(index), c(updates, F32), c(1), "sum", use_init),
        tensor,
    )
    np.testing.assert_allclose(out, expected, rtol=1e-6)
