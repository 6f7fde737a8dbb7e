"""GroupedMatMul-17 against its specification's formula (OpenVINO 2026.4's CPU plugin has
no kernel for it), with the IRs written by OpenVINO itself."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset16 as o16  # noqa: E402
import openvino.opset17 as o17  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("GroupedMatMul", "opset17")}


def spec(a: np.ndarray, b: np.ndarray, offsets=None) -> np.ndarray:
    """The specification: weights [G, N, K]; for 2-D data, group g owns the rows from the
    previous offset (0 first) to offsets[g], and rows no group owns are 0."""
    if a.ndim == 3:
        return a @ b.transpose(0, 2, 1)
    out = np.zeros((a.shape[0], b.shape[1]), a.dtype)
    start = 0
    for group in range(b.shape[0]):
        end = int(offsets[group])
        if end > start:
            out[start:end] = a[start:end] @ b[group].T
        start = end
    return out


def _convert(tmp_path, a_shape, b_shape, dtype, *, offsets_type=None, weights=None):
    a = o16.parameter(a_shape, dtype, name="a")
    params = [a]
    if weights is None:
        b = o16.parameter(b_shape, dtype, name="b")
        params.append(b)
    else:
        b = o16.constant(weights)
    if offsets_type is None:
        layer = o17.grouped_matmul(a, b)
    else:
        offsets = o16.parameter([-1], offsets_type, name="offsets")
        params.append(offsets)
        layer = o17.grouped_matmul(a, b, offsets)
    xml = tmp_path / "gmm.xml"
    ov.save_model(ov.Model([layer], params), xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    return xml, converted


def _wide(array: np.ndarray) -> np.ndarray:
    """Integers in int64 (products wrap back when narrowed), floats in float64."""
    return array.astype(np.int64 if np.issubdtype(array.dtype, np.integer) else np.float64)


def _values(rng, shape, dtype):
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-9, 9, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int8])
@pytest.mark.parametrize("constant_weights", [False, True])
def test_batched_groups_match_the_formula(tmp_path, dtype, constant_weights):
    rng = np.random.default_rng(0)
    a, b = _values(rng, [3, 4, 5], dtype), _values(rng, [3, 6, 5], dtype)
    _, converted = _convert(
        tmp_path, [3, 4, 5], [3, 6, 5], dtype, weights=b if constant_weights else None
    )
    feeds = {"a": a} if constant_weights else {"a": a, "b": b}
    (ours,) = run_onnxruntime(converted, feeds).values()
    expected = spec(_wide(a), _wide(b)).astype(dtype)
    assert ours.dtype == dtype
    assert ours.shape == (3, 4, 6)
    np.testing.assert_allclose(ours.astype(np.float64), expected, rtol=2e-3, atol=1e-5)


OFFSETS = {
    "even": [2, 4, 7],
    "empty-groups": [0, 0, 7],
    "rows-left-over": [2, 3, 5],
    "beyond-the-rows": [2, 2, 9],
    "decreasing": [4, 2, 7],
    "more-than-groups": [1, 3, 6, 7],
}


@pytest.mark.parametrize("offsets", OFFSETS.values(), ids=OFFSETS.keys())
@pytest.mark.parametrize("offsets_type", [np.int32, np.int64])
def test_token_rows_by_group_match_the_formula(tmp_path, offsets, offsets_type):
    """Each row multiplied by its own group's matrix once; rows no group owns stay 0."""
    rng = np.random.default_rng(1)
    a, b = _values(rng, [7, 5], np.float32), _values(rng, [3, 6, 5], np.float32)
    _, converted = _convert(tmp_path, [-1, 5], [3, 6, 5], np.float32, offsets_type=offsets_type)
    feeds = {"a": a, "b": b, "offsets": np.asarray(offsets, offsets_type)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    clipped = np.clip(offsets, 0, 7)
    np.testing.assert_allclose(ours, spec(a, b, clipped), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_token_rows_with_constant_weights_and_any_token_count(tmp_path, dtype):
    rng = np.random.default_rng(2)
    weights = _values(rng, [4, 8, 6], dtype)
    _, converted = _convert(
        tmp_path, [-1, 6], [4, 8, 6], dtype, offsets_type=np.int32, weights=weights
    )
    for tokens, offsets in ((0, [0, 0, 0, 0]), (1, [0, 1, 1, 1]), (11, [3, 3, 9, 11])):
        a = _values(rng, [tokens, 6], dtype)
        feeds = {"a": a, "offsets": np.asarray(offsets, np.int32)}
        (ours,) = run_onnxruntime(converted, feeds).values()
        expected = spec(_wide(a), _wide(weights), offsets).astype(dtype)
        assert ours.dtype == dtype
        assert ours.shape == (tokens, 8)
        np.testing.assert_allclose(ours, expected, rtol=2e-6)


def test_too_few_static_offsets_are_refused(tmp_path):
    """OpenVINO accepts any count and reads one per group; with fewer it would read past
    them, so a static count below the group count is refused naming the input."""
    a = o16.parameter([7, 5], np.float32, name="a")
    b = o16.parameter([3, 6, 5], np.float32, name="b")
    offsets = o16.parameter([2], np.int32, name="offsets")
    xml = tmp_path / "gmm.xml"
    ov.save_model(ov.Model([o17.grouped_matmul(a, b, offsets)], [a, b, offsets]), xml)
    with pytest.raises(b2s_onnx.B2SError, match=r"'offsets' holds 2 ends for 3 groups"):
        b2s_onnx.convert_ir(xml)


def test_a_body_read_weight_survives_the_rewrites(tmp_path):
    """The constant weights are read only inside the Loop's body: the rewrites' index
    counts that read, so the initializer is kept (it was dropped as unread)."""
    weights = np.ones([3, 6, 5], np.float32)
    _, converted = _convert(
        tmp_path, [7, 5], [3, 6, 5], np.float32, offsets_type=np.int64, weights=weights
    )
    names = {t.name for t in converted.graph.initializer}
    loop = next(n for n in converted.graph.node if n.op_type == "Loop")
    body_reads = {name for node in loop.attribute[0].g.node for name in node.input}
    assert any(name in names and "weights" in name for name in body_reads)
