"""Embedding bags against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {
    ("EmbeddingBagOffsetsSum", "opset3"),
    ("EmbeddingBagOffsets", "opset15"),
    ("EmbeddingBagPackedSum", "opset3"),
    ("EmbeddingBagPacked", "opset15"),
    ("EmbeddingSegmentsSum", "opset3"),
}

INDICES = [0, 2, 3, 3, 1, 4, 0]
WEIGHTS = [0.5, 1.0, -2.0, 0.25, 3.0, 1.5, -1.0]


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


@pytest.mark.parametrize("offsets", [[0, 2, 2, 5], [0, 3, 5, 6]], ids=["empty-bag", "full"])
@pytest.mark.parametrize(("default_index", "weighted"), [(None, False), (1, False), (1, True)])
def test_embedding_bag_offsets_sum_3(tmp_path, offsets, default_index, weighted):
    def build(table):
        extra = [] if default_index is None else [c(default_index, I32)]
        extra += [c(WEIGHTS, F32)] if weighted else []
        args = [table, c(INDICES, I32), c(offsets, I32), *extra]
        return o3.embedding_bag_offsets_sum(*args)

    pairs, _ = run_both(tmp_path, build, [[5, 2, 3]])
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("default_index", [None, 3])
def test_embedding_bag_offsets_15(tmp_path, reduction, default_index):
    pairs, _ = run_both(
        tmp_path,
        lambda table: o15.embedding_bag_offsets(
            table,
            c(INDICES),
            c([0, 2, 2, 5]),
            None if default_index is None else c(default_index),
            reduction=reduction,
        ),
        [[5, 4]],
    )
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("weighted", [False, True])
def test_embedding_bag_packed_sum_3(tmp_path, weighted):
    indices = [[0, 2, 4], [1, 1, 3]]
    weights = [c([[1.0, 0.5, -1.0], [2.0, 0.0, 0.25]], F32)] if weighted else []
    pairs, _ = run_both(
        tmp_path,
        lambda table: o3.embedding_bag_packed_sum(table, c(indices, I32), *weights),
        [[5, 2, 3]],
    )
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_embedding_bag_packed_15(tmp_path, reduction):
    pairs, _ = run_both(
        tmp_path,
        lambda table: o15.embedding_bag_packed(
            table, c([[0, 2, 4], [1, 1, 3]]), reduction=reduction
        ),
        [[5, 3]],
    )
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize(("default_index", "weighted"), [(None, False), (2, False), (2, True)])
def test_embedding_segments_sum_3(tmp_path, default_index, weighted):
    segments = [0, 0, 2, 2, 2, 4, 4]
    extra = [] if default_index is None else [c(default_index, I32)]
    extra += [c(WEIGHTS, F32)] if weighted else []
    pairs, _ = run_both(
        tmp_path,
        lambda table: o3.embedding_segments_sum(
            table, c(INDICES, I32), c(segments, I32), c(5, I32), *extra
        ),
        [[5, 3]],
    )
    assert_close(pairs, atol=1e-5)


def test_embedding_bag_packed_15_unknown_reduction_is_refused(tmp_path):
    table = o1.parameter([5, 3], F32, name="table")
    node = o15.embedding_bag_packed(table, c([[0, 1]]), reduction="mean")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [table]), xml)
    xml.write_text(xml.read_text().replace('reduction="mean"', 'reduction="max"'))
    with pytest.raises(b2s_onnx.B2SError, match="reduction"):
        b2s_onnx.convert_ir(xml)
