"""TopK-1/3/11 (modes, sort types, stable, index element types) against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset11 as o11  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("TopK", "opset1"), ("TopK", "opset3"), ("TopK", "opset11")}


def _top_k(version, data, k, axis, mode, sort, index_type="i32", stable=False):
    if version == 1:
        return o1.topk(data, k, axis, mode, sort)
    if version == 3:
        return o3.topk(data, k, axis, mode, sort, index_type)
    return o11.topk(data, k, axis, mode, sort, index_type, stable)


def _assert_same_selection(pairs, data, axis, exact_indices):
    (values, their_values), (indices, their_indices) = pairs
    assert values.dtype == their_values.dtype
    assert indices.dtype == their_indices.dtype
    np.testing.assert_array_equal(values, their_values)
    if exact_indices:
        np.testing.assert_array_equal(indices, their_indices)
    else:  # ties may be broken differently: the indices must still select those values
        np.testing.assert_array_equal(
            np.take_along_axis(data, indices.astype(np.int64), axis), values
        )


@pytest.mark.parametrize("version", [1, 3, 11])
@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("sort", ["value", "index"])
def test_top_k_matches_openvino_on_distinct_values(tmp_path, version, mode, sort):
    data = np.random.default_rng(0).permutation(60).reshape(3, 20).astype(np.float32)
    pairs, _ = run_both(
        tmp_path,
        lambda x: list(_top_k(version, x, o1.constant(np.int64(5)), -1, mode, sort).outputs()),
        [[3, 20]],
        feeds={"in0": data},
    )
    _assert_same_selection(pairs, data, -1, exact_indices=True)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("index_type", ["i32", "i64"])
@pytest.mark.parametrize("sort", ["value", "index"])
def test_stable_top_k_breaks_ties_by_index_like_openvino(tmp_path, dtype, index_type, sort):
    data = np.random.default_rng(1).integers(0, 6, [4, 9, 3]).astype(dtype)
    pairs, _ = run_both(
        tmp_path,
        lambda x: list(
            o11.topk(x, o1.constant(np.int32(4)), 1, "max", sort, index_type, True).outputs()
        ),
        [[4, 9, 3]],
        [dtype],
        feeds={"in0": data},
    )
    _assert_same_selection(pairs, data, 1, exact_indices=True)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_unstable_top_k_with_ties_selects_the_same_values(tmp_path, mode):
    data = np.random.default_rng(2).integers(0, 4, [5, 12]).astype(np.float32)
    pairs, _ = run_both(
        tmp_path,
        lambda x: list(o3.topk(x, o1.constant(np.int64(6)), 1, mode, "value", "i64").outputs()),
        [[5, 12]],
        feeds={"in0": data},
    )
    _assert_same_selection(pairs, data, 1, exact_indices=False)


def test_top_k_with_a_run_time_k_matches_openvino(tmp_path):
    data = np.random.default_rng(3).permutation(40).reshape(5, 8).astype(np.float32)
    pairs, _ = run_both(
        tmp_path,
        lambda x, k: list(o11.topk(x, k, 0, "max", "value", "i64").outputs()),
        [[5, 8], []],
        [np.float32, np.int64],
        feeds={"in0": data, "in1": np.asarray(3, np.int64)},
    )
    _assert_same_selection(pairs, data, 0, exact_indices=True)


def test_top_k_refuses_an_unknown_sort(tmp_path):
    x = o1.parameter([2, 5], np.float32, name="x")
    layer = o11.topk(x, o1.constant(np.int64(2)), 1, "max", "value")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(list(layer.outputs()), [x]), xml)
    xml.write_text(xml.read_text().replace('sort="value"', 'sort="random"'))
    with pytest.raises(B2SError, match="sort"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_top_k_of_u64_matches_openvino(tmp_path, mode):
    """onnxruntime's TopK has no u64 kernel (OpenVINO's CPU plugin itself computes u64 in a
    narrower type, so values stay below 2**31 here)."""
    data = np.random.default_rng(3).permutation(40).reshape(2, 20).astype(np.uint64) * 1000
    pairs, _ = run_both(
        tmp_path,
        lambda x: list(o11.topk(x, o1.constant(np.int64(3)), 1, mode, "value", "i64").outputs()),
        [[2, 20]],
        [np.uint64],
        feeds={"in0": data},
    )
    _assert_same_selection(pairs, data, 1, exact_indices=True)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_top_k_of_u64_orders_the_whole_range(tmp_path, mode):
    """int64 cannot hold u64's top half: the shifted order must still be u64's."""
    data = np.asarray([[0, 1, 5, 2**63 - 1, 2**63, 2**63 + 7, 2**64 - 1, 2**40]], np.uint64)
    x = o1.parameter([1, 8], np.uint64, name="in0")
    xml = tmp_path / "model.xml"
    layer = o11.topk(x, o1.constant(np.int64(3)), 1, mode, "value", "i64")
    ov.save_model(ov.Model(list(layer.outputs()), [x]), xml)
    values, indices = run_onnxruntime(b2s_onnx.convert_ir(xml), {"in0": data}).values()
    order = np.argsort(data[0], kind="stable")
    expected = (order[::-1] if mode == "max" else order)[:3]
    np.testing.assert_array_equal(indices[0], expected)
    np.testing.assert_array_equal(values[0], data[0][expected])
