"""Shapes and index values known only at run time: one lowered model serves every valid
input, and every invalid one makes inference fail instead of returning values."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto

import b2s_onnx
from b2s_onnx.builders import RUNTIME, single_op_model
from b2s_onnx.ops import batch_to_space, space_to_batch
from tests.helpers import ORT_ERRORS, assert_same_bits, run_lowered

B2S_INDEX = {"block_shape": [1, 2, 3, 1], "crops_begin": [0, 1, 0, 0], "crops_end": [0, 0, 2, 0]}


@pytest.mark.parametrize("batch", [1, 2, 7])
def test_one_lowered_model_runs_for_every_batch(batch):
    lowered = b2s_onnx.lower(single_op_model("BatchToSpace", ["N", 4, 5, 3], index=B2S_INDEX))
    data = np.random.default_rng(batch).standard_normal((6 * batch, 4, 5, 3)).astype(np.float32)
    expected = batch_to_space.reference(data, *(np.array(v) for v in B2S_INDEX.values()))
    assert_same_bits(run_lowered(lowered, {"data": data}), expected)


def test_every_dimension_symbolic_runs_for_several_shapes():
    lowered = b2s_onnx.lower(single_op_model("BatchToSpace", ["N", "H", "W", "C"], index=B2S_INDEX))
    for shape in [(6, 4, 5, 3), (12, 2, 7, 1), (6, 1, 1, 8)]:
        data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        expected = batch_to_space.reference(data, *(np.array(v) for v in B2S_INDEX.values()))
        assert_same_bits(run_lowered(lowered, {"data": data}), expected)


@pytest.mark.parametrize("index_type", [TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8])
def test_runtime_index_inputs_compute_the_same_values(index_type):
    model = single_op_model(
        "BatchToSpace",
        ["N", 4, 5, 3],
        index=dict.fromkeys(B2S_INDEX, RUNTIME),
        index_type=index_type,
    )
    lowered = b2s_onnx.lower(model)
    data = np.random.default_rng(0).standard_normal((12, 4, 5, 3)).astype(np.float32)
    np_type = {
        TensorProto.INT32: np.int32,
        TensorProto.INT64: np.int64,
        TensorProto.UINT8: np.uint8,
    }[index_type]
    for index in (
        B2S_INDEX,
        {"block_shape": [1, 1, 2, 2], "crops_begin": [0, 0, 0, 1], "crops_end": [0, 3, 1, 1]},
    ):
        feeds = {"data": data, **{k: np.array(v, np_type) for k, v in index.items()}}
        expected = batch_to_space.reference(data, *(np.array(v) for v in index.values()))
        assert_same_bits(run_lowered(lowered, feeds), expected)


INVALID_RUNTIME_B2S = [
    ({"block_shape": [1, 0, 1, 1]}, "block_shape >= 1"),
    ({"block_shape": [2, 1, 1, 1]}, "block_shape[0] == 1"),
    ({"crops_begin": [0, -1, 0, 0]}, "crops_begin >= 0"),
    ({"crops_end": [1, 0, 0, 0]}, "crops_end[0] == 0"),
    ({"block_shape": [1, 5, 1, 1]}, "data.shape[0] % prod(block_shape) == 0"),
    ({"block_shape": [1, 2**40, 2**40, 1]}, "prod(block_shape) <= data.shape[0]"),
    (
        {"crops_begin": [0, 7, 0, 0], "crops_end": [0, 2, 0, 0]},
        "crops_begin + crops_end <= block_shape * data.shape",
    ),
    ({"block_shape": [1, 2, 3]}, "block_shape is 1-D with 4 elements"),
]


@pytest.mark.parametrize(("override", "rule"), INVALID_RUNTIME_B2S)
def test_invalid_runtime_values_make_inference_fail(override, rule):
    model = single_op_model(
        "BatchToSpace", ["N", 4, 5, 3], index=dict.fromkeys(B2S_INDEX, RUNTIME), node_name="b2s"
    )
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "L"
    lowered = b2s_onnx.lower(model)
    index = {**B2S_INDEX, **override}
    feeds = {
        "data": np.zeros((12, 4, 5, 3), np.float32),
        **{k: np.array(v, np.int64) for k, v in index.items()},
    }
    with pytest.raises(ORT_ERRORS, match=re.escape(f"b2s/check: {rule}")):
        run_lowered(lowered, feeds)


@pytest.mark.parametrize(
    ("override", "rule"),
    [
        ({"pads_begin": [0, -1, 0, 0]}, "pads_begin >= 0"),
        ({"pads_end": [0, 0, 1, 0]}, "(data.shape + pads_begin + pads_end) % block_shape == 0"),
        ({"block_shape": [1, 1, 0, 1]}, "block_shape >= 1"),
    ],
)
def test_invalid_runtime_pads_make_inference_fail(override, rule):
    index = {"block_shape": [1, 2, 3, 1], "pads_begin": [0, 1, 0, 0], "pads_end": [0, 1, 0, 0]}
    model = single_op_model(
        "SpaceToBatch", [2, 4, 6, 3], index=dict.fromkeys(index, RUNTIME), node_name="s2b"
    )
    lowered = b2s_onnx.lower(model)
    data = np.random.default_rng(0).standard_normal((2, 4, 6, 3)).astype(np.float32)
    feeds = {"data": data, **{k: np.array(v, np.int64) for k, v in index.items()}}
    expected = space_to_batch.reference(data, *(np.array(v) for v in index.values()))
    assert_same_bits(run_lowered(lowered, feeds), expected)
    feeds.update({k: np.array(v, np.int64) for k, v in override.items()})
    with pytest.raises(ORT_ERRORS, match=re.escape(f"s2b/check: {rule}")):
        run_lowered(lowered, feeds)


def test_symbolic_batch_not_divisible_fails_at_run_time():
    lowered = b2s_onnx.lower(
        single_op_model("BatchToSpace", ["N", 4, 5, 3], index=B2S_INDEX, node_name="b2s")
    )
    with pytest.raises(ORT_ERRORS, match=r"b2s/check: data\.shape\[0\] % prod"):
        run_lowered(lowered, {"data": np.zeros((7, 4, 5, 3), np.float32)})


def test_symbolic_extent_smaller_than_crops_fails_at_run_time():
    lowered = b2s_onnx.lower(
        single_op_model("BatchToSpace", ["N", "H", 5, 3], index=B2S_INDEX, node_name="b2s")
    )
    run_lowered(lowered, {"data": np.zeros((6, 1, 5, 3), np.float32)})  # 1*2 >= 1 crop: valid
    big = {**B2S_INDEX, "crops_begin": [0, 3, 0, 0]}
    lowered = b2s_onnx.lower(
        single_op_model("BatchToSpace", ["N", "H", 5, 3], index=big, node_name="b2s")
    )
    with pytest.raises(ORT_ERRORS, match=r"b2s/check: crops_begin \+ crops_end"):
        run_lowered(lowered, {"data": np.zeros((6, 1, 5, 3), np.float32)})
