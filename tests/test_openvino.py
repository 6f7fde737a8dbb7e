"""The lowered graphs in onnxruntime against OpenVINO itself.

Two OpenVINO oracles, both built with its Python opset API:
- its core reference implementation (``Node.evaluate``): the ops' semantics, compared bit
  for bit on arbitrary bit patterns of every element type;
- its CPU plugin (compiled with ``INFERENCE_PRECISION_HINT=f32``), on values the plugin
  keeps: it runs f64 as f32 and i64/u64 as i32 and quiets f16 signalling NaNs, plugin
  precision conversions pinned in ``test_openvino_cpu_precision_conversions``. Where the
  plugin disagrees with OpenVINO's own reference (a SpaceToBatch kernel bug, pinned in
  ``test_openvino_cpu_space_to_batch_bug``) we follow the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.errors import OpValidationError
from b2s_onnx.ops import batch_to_space, space_to_batch
from tests.helpers import DTYPES, assert_same_bits, distinct_values, run_lowered
from tests.test_properties import batch_to_space_cases, depth_space_cases, space_to_batch_cases
from tests.test_validation import _b2s_raw

pytest.importorskip("openvino")
from tests.openvino_ref import evaluate_openvino, run_openvino

pytestmark = pytest.mark.openvino

ELEM_TYPES = st.sampled_from(sorted(DTYPES))


def values_the_cpu_plugin_keeps(shape, elem_type: int, seed: int = 0) -> np.ndarray:
    dtype = np.dtype(DTYPES[elem_type])
    rng = np.random.default_rng(seed)
    if elem_type == TensorProto.DOUBLE:
        return rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    if elem_type in (TensorProto.INT64, TensorProto.UINT64):
        low = 0 if elem_type == TensorProto.UINT64 else -(2**31)
        return rng.integers(low, 2**31 - 1, size=shape).astype(dtype)
    values = distinct_values(shape, elem_type, seed)
    if elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16):
        finite = rng.standard_normal(shape).astype(dtype)
        return np.where(np.isfinite(values) & (np.abs(values) > 1e-4), values, finite)
    return values


def _compare(op_type, shape, elem_type, index=None, attributes=None):
    model = single_op_model(op_type, shape, elem_type, index=index, attributes=attributes)
    lowered = b2s_onnx.lower(model)
    every_bit = distinct_values(shape, elem_type, seed=3)
    reference = evaluate_openvino(op_type, every_bit, index, attributes)
    if reference is not None:
        assert_same_bits(run_lowered(lowered, {"data": every_bit}), reference)
    kept = values_the_cpu_plugin_keeps(shape, elem_type)
    ours = run_lowered(lowered, {"data": kept})
    plugin = run_openvino(op_type, kept, index, attributes)
    reference = evaluate_openvino(op_type, kept, index, attributes)
    if reference is None or plugin.tobytes() == reference.tobytes():
        assert_same_bits(ours, plugin)
    else:  # only the known SpaceToBatch kernel bug makes the plugin differ
        assert op_type == "SpaceToBatch"
        assert_same_bits(ours, reference)


@given(case=batch_to_space_cases(), elem_type=ELEM_TYPES)
def test_batch_to_space_matches_openvino(case, elem_type):
    shape, index = case
    _compare("BatchToSpace", shape, elem_type, index=index)


@given(case=space_to_batch_cases(), elem_type=ELEM_TYPES)
def test_space_to_batch_matches_openvino(case, elem_type):
    shape, index = case
    _compare("SpaceToBatch", shape, elem_type, index=index)


@pytest.mark.parametrize("op_type", ["DepthToSpace", "SpaceToDepth"])
@given(data=st.data(), elem_type=ELEM_TYPES)
def test_depth_space_matches_openvino(op_type, data, elem_type):
    shape, attributes = data.draw(depth_space_cases(op_type))
    _compare(op_type, shape, elem_type, attributes=attributes)


@pytest.mark.parametrize("elem_type", sorted(DTYPES), ids=lambda t: TensorProto.DataType.Name(t))
def test_spec_5d_example_matches_openvino_on_every_dtype(elem_type):
    index = {
        "block_shape": [1, 2, 4, 3, 1],
        "crops_begin": [0, 0, 1, 0, 0],
        "crops_end": [0, 0, 1, 0, 0],
    }
    _compare("BatchToSpace", [48, 3, 3, 1, 3], elem_type, index=index)


REJECTED_BY_BOTH = [
    pytest.param(
        [4, 2],
        {"block_shape": [1, 4], "crops_begin": [0, -1], "crops_end": [0, 0]},
        id="negative-crop",
    ),
    pytest.param(
        [4, 2],
        {"block_shape": [1, 3], "crops_begin": [0, 0], "crops_end": [0, 0]},
        id="batch-not-divisible",
    ),
    pytest.param(
        [4, 2],
        {"block_shape": [1, 4], "crops_begin": [0, 5], "crops_end": [0, 4]},
        id="crops-exceed",
    ),
    pytest.param(
        [4, 2], {"block_shape": [1, 0], "crops_begin": [0, 0], "crops_end": [0, 0]}, id="zero-block"
    ),
    pytest.param(
        [4, 2],
        {"block_shape": [1, 4, 1], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]},
        id="length",
    ),
    pytest.param([4], {"block_shape": [4], "crops_begin": [0], "crops_end": [0]}, id="rank-1"),
]


@pytest.mark.parametrize(("shape", "index"), REJECTED_BY_BOTH)
def test_what_openvino_rejects_is_rejected(shape, index):
    data = np.zeros(shape, np.float32)
    with pytest.raises(RuntimeError):
        run_openvino("BatchToSpace", data, index=index)
    with pytest.raises(OpValidationError):
        b2s_onnx.lower(_b2s_raw(shape, *index.values()))


@pytest.mark.parametrize(
    ("shape", "index"),
    [
        pytest.param(
            [4, 2], {"block_shape": [2, 2], "crops_begin": [0, 0], "crops_end": [0, 0]}, id="block0"
        ),
        pytest.param(
            [4, 2], {"block_shape": [1, 4], "crops_begin": [1, 0], "crops_end": [0, 0]}, id="crop0"
        ),
    ],
)
def test_what_openvino_only_expects_is_refused(shape, index):
    """OpenVINO accepts these but returns a wrongly shaped result; we refuse them."""
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    theirs = run_openvino("BatchToSpace", data, index=index)
    assert theirs.shape[0] != shape[0] // int(np.prod(index["block_shape"])) or theirs.size == 0
    with pytest.raises(OpValidationError):
        batch_to_space.reference(data, *(np.array(v) for v in index.values()))


def test_openvino_cpu_precision_conversions():
    """Pins the plugin behaviour the README describes, so a change in OpenVINO shows."""
    index = {"block_shape": [1, 2], "crops_begin": [0, 0], "crops_end": [0, 0]}
    f64 = np.array([[1 + 2.0**-40, 2.0], [3.0, 4.0]], np.float64)
    assert run_openvino("BatchToSpace", f64, index)[0, 0] == np.float64(np.float32(f64[0, 0]))
    i64 = np.array([[2**40 + 5, 1], [2, 3]], np.int64)
    assert run_openvino("BatchToSpace", i64, index)[0, 0] == 5
    signalling = np.array([[0x7D01, 0], [0, 0]], np.uint16).view(np.float16)
    assert run_openvino("BatchToSpace", signalling, index).view(np.uint16)[0, 0] == 0x7F01
    for data in (f64, i64, signalling):  # OpenVINO's own reference moves every bit
        assert_same_bits(
            evaluate_openvino("BatchToSpace", data, index),
            batch_to_space.reference(data, *(np.array(v) for v in index.values())),
        )


def test_openvino_cpu_space_to_batch_bug():
    """OpenVINO's CPU kernel copies a data element into the zero padding here; its own
    reference and ours pad with zeros. If this fails, OpenVINO fixed the kernel."""
    index = {"block_shape": [1, 1, 1, 2], "pads_begin": [0, 0, 0, 0], "pads_end": [0, 0, 0, 1]}
    data = np.array([1.0, 2.0], np.float32).reshape(1, 1, 2, 1)
    expected = np.array([1.0, 2.0, 0.0, 0.0], np.float32).reshape(2, 1, 2, 1)
    assert run_openvino("SpaceToBatch", data, index).ravel().tolist() == [1.0, 2.0, 2.0, 0.0]
    assert_same_bits(evaluate_openvino("SpaceToBatch", data, index), expected)
    assert_same_bits(
        space_to_batch.reference(data, *(np.array(v) for v in index.values())), expected
    )
    lowered = b2s_onnx.lower(single_op_model("SpaceToBatch", [1, 1, 2, 1], index=index))
    assert_same_bits(run_lowered(lowered, {"data": data}), expected)
