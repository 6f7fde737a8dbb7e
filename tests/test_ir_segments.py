"""SegmentMax and SparseFillEmptyRows against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset16 as o16  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {("SegmentMax", "opset16"), ("SparseFillEmptyRows", "opset16")}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


@pytest.mark.parametrize("fill_mode", ["ZERO", "LOWEST"])
@pytest.mark.parametrize("num_segments", [None, 6])
@pytest.mark.parametrize(("dtype", "shape"), [(F32, [5, 2]), (I32, [5]), (F32, [5, 2, 3])])
def test_segment_max_is_exact(tmp_path, fill_mode, num_segments, dtype, shape):
    ids = c([0, 0, 2, 2, 3], I32)
    count = None if num_segments is None else c(num_segments, I32)
    pairs, _ = run_both(
        tmp_path, lambda a: o16.segment_max(a, ids, count, fill_mode), [shape], [dtype]
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(
    ("indices", "dense_shape"),
    [
        ([[0, 2], [0, 1], [2, 0], [4, 1]], [5, 3]),
        ([[1, 0], [1, 3], [2, 2]], [3, 4]),
        ([[0, 0], [1, 1], [2, 2]], [3, 3]),
    ],
)
@pytest.mark.parametrize("index_type", [I32, I64])
def test_sparse_fill_empty_rows_is_exact(tmp_path, indices, dense_shape, index_type):
    pairs, _ = run_both(
        tmp_path,
        lambda v: list(
            o16.sparse_fill_empty_rows(
                v, c(dense_shape, index_type), c(indices, index_type), c(-1.5, F32)
            ).outputs()
        ),
        [[len(indices)]],
    )
    assert_close(pairs, exact=True)


def test_segment_max_unknown_fill_mode_is_refused(tmp_path):
    param = o1.parameter([3], F32, name="x")
    node = o16.segment_max(param, c([0, 1, 1]), c(2), "ZERO")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [param]), xml)
    xml.write_text(xml.read_text().replace('fill_mode="zero"', 'fill_mode="nan"'))
    with pytest.raises(b2s_onnx.B2SError, match="fill_mode"):
        b2s_onnx.convert_ir(xml)
