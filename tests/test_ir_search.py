"""Bucketize, SearchSorted, Unique and Eye against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset9 as o9  # noqa: E402
import openvino.opset10 as o10  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {
    ("Bucketize", "opset3"),
    ("SearchSorted", "opset15"),
    ("Unique", "opset10"),
    ("Eye", "opset9"),
}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


@pytest.mark.parametrize("right", [True, False])
@pytest.mark.parametrize(("dtype", "output_type"), [(F32, "i64"), (I32, "i32")])
def test_bucketize_is_exact(tmp_path, right, dtype, output_type):
    data = np.asarray([[-3, 0, 1, 2, 5], [7, 9, 10, 11, -1]], dtype)
    pairs, _ = run_both(
        tmp_path,
        lambda a: o3.bucketize(a, c([0, 2, 7, 10], dtype), output_type, right),
        [[2, 5]],
        [dtype],
        feeds={"in0": data},
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == np.dtype(output_type.replace("i", "int"))


@pytest.mark.parametrize("right_mode", [False, True])
@pytest.mark.parametrize(
    ("sequence", "values_shape"),
    [([0.0, 1.0, 1.0, 3.0, 7.5], [2, 3]), ([[0.0, 2.0, 4.0], [-1.0, 1.0, 1.0]], [2, 4])],
)
def test_search_sorted_is_exact(tmp_path, right_mode, sequence, values_shape):
    values = np.round(np.random.default_rng(2).uniform(-2, 8, values_shape)).astype(F32)
    pairs, _ = run_both(
        tmp_path,
        lambda v: o15.search_sorted(c(sequence, F32), v, right_mode),
        [values_shape],
        feeds={"in0": values},
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("sort", [True, False])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("index_type", ["i32", "i64"])
def test_unique_is_exact(tmp_path, sort, axis, index_type):
    data = np.asarray([[3, 1, 3], [2, 2, 2], [3, 1, 3], [0, 5, 0]], F32)
    pairs, _ = run_both(
        tmp_path,
        lambda a: list(
            o10.unique(a, None if axis is None else c(axis), sort, index_type, index_type).outputs()
        ),
        [[4, 3]],
        feeds={"in0": data},
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(
    ("rows", "columns", "diagonal", "batch", "output_type"),
    [
        (3, 3, 0, None, "f32"),
        (2, 4, 1, None, "i32"),
        (4, 3, -2, [2], "f32"),
        (3, 2, 5, [1, 2], "i64"),
    ],
)
def test_eye_is_exact(tmp_path, rows, columns, diagonal, batch, output_type):
    """The row count is a run-time input (a constant Eye folds to a constant)."""

    def build(count):
        return o9.eye(
            count,
            c(columns, I32),
            c(diagonal, I32),
            output_type,
            None if batch is None else c(batch, I32),
        )

    pairs, _ = run_both(tmp_path, build, [[]], [I32], feeds={"in0": np.asarray(rows, I32)})
    assert_close(pairs, exact=True)


def test_bucketize_with_float_output_type_is_refused(tmp_path):
    a = o1.parameter([3], F32, name="a")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o3.bucketize(a, c([0.0], F32))], [a]), xml)
    xml.write_text(xml.read_text().replace('output_type="i64"', 'output_type="f32"'))
    with pytest.raises(b2s_onnx.B2SError, match="output_type"):
        b2s_onnx.convert_ir(xml)
