"""The examples of OpenVINO's specs, with exact shapes and values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.ops import batch_to_space, depth_to_space
from tests.helpers import assert_same_bits, batch_to_space_by_index, run_lowered

B2S_2D = {"block_shape": [1, 5], "crops_begin": [0, 2], "crops_end": [0, 0]}
B2S_5D = {
    "block_shape": [1, 2, 4, 3, 1],
    "crops_begin": [0, 0, 1, 0, 0],
    "crops_end": [0, 0, 1, 0, 0],
}


def _arrays(index: dict) -> list[np.ndarray]:
    return [np.array(index[k]) for k in batch_to_space.INDEX_ROLES]


def test_batch_to_space_2d_example_has_the_spec_shape_and_values():
    data = np.arange(20, dtype=np.float32).reshape(10, 2)
    # out[b, 5 d + j] = data[2 j + b, d] = 4 j + 2 b + d, then the first 2 columns cropped.
    expected = np.array(
        [[8, 12, 16, 1, 5, 9, 13, 17], [10, 14, 18, 3, 7, 11, 15, 19]], dtype=np.float32
    )
    assert_same_bits(batch_to_space.reference(data, *_arrays(B2S_2D)), expected)
    lowered = b2s_onnx.lower(single_op_model("BatchToSpace", [10, 2], index=B2S_2D))
    assert_same_bits(run_lowered(lowered, {"data": data}), expected)


def test_batch_to_space_5d_example_has_the_spec_shape_and_values():
    data = np.arange(48 * 3 * 3 * 1 * 3, dtype=np.int32).reshape(48, 3, 3, 1, 3)
    expected = batch_to_space_by_index(data, *_arrays(B2S_5D))
    assert expected.shape == (2, 6, 10, 3, 3)
    assert_same_bits(batch_to_space.reference(data, *_arrays(B2S_5D)), expected)
    model = single_op_model("BatchToSpace", [48, 3, 3, 1, 3], TensorProto.INT32, index=B2S_5D)
    assert_same_bits(run_lowered(b2s_onnx.lower(model), {"data": data}), expected)


@pytest.mark.parametrize(("mode", "onnx_mode"), [("blocks_first", "DCR"), ("depth_first", "CRD")])
def test_depth_to_space_example_matches_onnx_semantics(mode, onnx_mode):
    data = np.arange(5 * 28 * 2 * 3, dtype=np.float32).reshape(5, 28, 2, 3)
    onnx_model = helper.make_model(
        helper.make_graph(
            [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=onnx_mode)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 28, 2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 7, 4, 6])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    (expected,) = ReferenceEvaluator(onnx_model).run(None, {"x": data})
    assert expected.shape == (5, 7, 4, 6)
    assert_same_bits(depth_to_space.reference(data, 2, mode), expected)
    attributes = {"block_size": 2, "mode": mode}
    for native in (True, False):
        model = single_op_model("DepthToSpace", [5, 28, 2, 3], attributes=attributes)
        lowered = b2s_onnx.lower(model, native_depth_to_space=native)
        assert_same_bits(run_lowered(lowered, {"data": data}), expected)
