"""Every rule an op enforces: what is refused, and the message that says so."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.errors import B2SError, OpValidationError

B2S = "BatchToSpace"
S2B = "SpaceToBatch"


def _b2s(shape, blocks, begins, ends):
    return single_op_model(
        B2S,
        shape,
        index={"block_shape": blocks, "crops_begin": begins, "crops_end": ends},
        node_name="b2s_3",
    )


def _s2b(shape, blocks, begins, ends):
    return single_op_model(
        S2B,
        shape,
        index={"block_shape": blocks, "pads_begin": begins, "pads_end": ends},
        node_name="s2b",
    )


def _with_index(op_type, shape, index, node_name):
    """A model whose index values break rules that the builder's own shape rule would refuse."""
    roles = list(index)
    graph = helper.make_graph(
        [
            helper.make_node(
                op_type, ["data", *roles], ["y"], domain="org.openvinotoolkit", name=node_name
            )
        ],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(shape))],
        [helper.make_tensor(r, TensorProto.INT64, [len(v)], v) for r, v in index.items()],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)],
    )


def _b2s_raw(shape, blocks, begins, ends, name="b2s_3"):
    return _with_index(
        B2S, shape, {"block_shape": blocks, "crops_begin": begins, "crops_end": ends}, name
    )


def _s2b_raw(shape, blocks, begins, ends, name="s2b"):
    return _with_index(
        S2B, shape, {"block_shape": blocks, "pads_begin": begins, "pads_end": ends}, name
    )


RULES = [
    pytest.param(
        _b2s_raw([4, 2, 3], [1, 2, 2], [0, 0, 5], [0, 0, 4]),
        "crops_begin",
        "BatchToSpace 'b2s_3': crops_begin[2] + crops_end[2] = 9 exceeds "
        "block_shape[2] * data.shape[2] = 6",
        id="b2s-crops-exceed-extent",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, 0], [0, 0], [0, 0]),
        "block_shape",
        "BatchToSpace 'b2s_3': block_shape[1] = 0 must be >= 1",
        id="b2s-zero-block",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, -2], [0, 0], [0, 0]),
        "block_shape",
        "block_shape[1] = -2 must be >= 1",
        id="b2s-negative-block",
    ),
    pytest.param(
        _b2s_raw([4, 2], [2, 2], [0, 0], [0, 0]),
        "block_shape",
        "block_shape[0] = 2 must be 1 (the batch axis is not split)",
        id="b2s-block0",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, 4], [0, -1], [0, 0]),
        "crops_begin",
        "crops_begin[1] = -1 must be >= 0",
        id="b2s-negative-crop",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, 4], [0, 0], [0, -3]),
        "crops_end",
        "crops_end[1] = -3 must be >= 0",
        id="b2s-negative-crop-end",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, 4], [1, 0], [0, 0]),
        "crops_begin",
        "crops_begin[0] = 1 must be 0 (the batch axis is not cropped)",
        id="b2s-crop0",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, 3], [0, 0], [0, 0]),
        "data",
        "data.shape[0] = 4 is not divisible by the product of block_shape = 3",
        id="b2s-batch-not-divisible",
    ),
    pytest.param(
        _b2s_raw([4, 2], [1, 4, 1], [0, 0, 0], [0, 0, 0]),
        "block_shape",
        "block_shape has 3 elements but data has rank 2; they must be equal",
        id="b2s-length",
    ),
    pytest.param(
        _b2s_raw([4], [4], [0], [0]), "data", "data rank must be >= 2, got 1", id="b2s-rank"
    ),
    pytest.param(
        _b2s_raw([4, 2, 2], [1, 2**40, 2**40], [0, 0, 0], [0, 0, 0]),
        "block_shape",
        "product of block_shape = 1208925819614629174706176 overflows int64",
        id="b2s-product-overflow",
    ),
    pytest.param(
        _s2b_raw([2, 6], [1, 4], [0, 1], [0, 0]),
        "data",
        "SpaceToBatch 's2b': data.shape[1] + pads_begin[1] + pads_end[1] = 7 is not "
        "divisible by block_shape[1] = 4",
        id="s2b-not-divisible",
    ),
    pytest.param(
        _s2b_raw([2, 6], [1, 2], [0, -2], [0, 0]),
        "pads_begin",
        "pads_begin[1] = -2 must be >= 0",
        id="s2b-negative-pad",
    ),
    pytest.param(
        _s2b_raw([2, 6], [1, 2], [1, 0], [1, 0]),
        "pads_begin",
        "pads_begin[0] = 1 must be 0 (the batch axis is not padded)",
        id="s2b-pad0",
    ),
    pytest.param(
        _s2b_raw([2, 6], [2, 2], [0, 0], [0, 0]),
        "block_shape",
        "block_shape[0] = 2 must be 1",
        id="s2b-block0",
    ),
    pytest.param(
        _s2b_raw([2, 6], [1, 0], [0, 0], [0, 0]),
        "block_shape",
        "block_shape[1] = 0 must be >= 1",
        id="s2b-zero-block",
    ),
]


@pytest.mark.parametrize(("model", "input_name", "message"), RULES)
def test_rule_violation_names_node_input_and_rule(model, input_name, message):
    with pytest.raises(OpValidationError, match=re.escape(message)) as info:
        b2s_onnx.lower(model)
    assert info.value.input_name == input_name
    assert isinstance(info.value, ValueError)


DEPTH_RULES = [
    (
        "DepthToSpace",
        [1, 6, 2, 3],
        {"block_size": 2, "mode": "depth_first"},
        "data",
        "DepthToSpace 'd': data.shape[1] = 6 is not divisible by block_size^2 = 4",
    ),
    (
        "DepthToSpace",
        [4, 8],
        {"block_size": 2, "mode": "depth_first"},
        "data",
        "data rank must be >= 3, got 2",
    ),
    (
        "DepthToSpace",
        [4, 8, 1],
        {"block_size": 0, "mode": "depth_first"},
        "block_size",
        "block_size = 0 must be >= 1",
    ),
    (
        "DepthToSpace",
        [4, 8, 1],
        {"block_size": 2, "mode": "foo"},
        "mode",
        "mode = 'foo' must be one of blocks_first, depth_first",
    ),
    ("DepthToSpace", [4, 8, 1], {"block_size": 2}, "mode", "attribute 'mode' is required"),
    (
        "DepthToSpace",
        [4, 8, 1],
        {"block_size": 2.0, "mode": "depth_first"},
        "block_size",
        "attribute 'block_size' must be int, got float",
    ),
    (
        "DepthToSpace",
        [4, 8, 1],
        {"block_size": 2, "mode": "depth_first", "axis": 1},
        "axis",
        "unknown attribute 'axis'",
    ),
    (
        "SpaceToDepth",
        [1, 3, 5, 6],
        {"block_size": 2, "mode": "blocks_first"},
        "data",
        "SpaceToDepth 'd': data.shape[2] = 5 is not divisible by block_size = 2",
    ),
    (
        "SpaceToDepth",
        [4, 8],
        {"block_size": 2, "mode": "depth_first"},
        "data",
        "data rank must be >= 3, got 2",
    ),
    (
        "SpaceToDepth",
        [4, 8, 2],
        {"block_size": -1, "mode": "depth_first"},
        "block_size",
        "block_size = -1 must be >= 1",
    ),
]


@pytest.mark.parametrize(("op_type", "shape", "attributes", "input_name", "message"), DEPTH_RULES)
def test_depth_space_rule_violation_is_refused(op_type, shape, attributes, input_name, message):
    node = helper.make_node(
        op_type, ["data"], ["y"], domain="org.openvinotoolkit", name="d", **attributes
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(shape))],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)],
    )
    with pytest.raises(OpValidationError, match=re.escape(message)) as info:
        b2s_onnx.lower(model)
    assert info.value.input_name == input_name


def test_wrong_input_count_is_refused():
    model = _b2s_raw([4, 2], [1, 2], [0, 0], [0, 0])
    del model.graph.node[0].input[3]
    with pytest.raises(OpValidationError, match=r"expects 4 inputs .* got 3"):
        b2s_onnx.lower(model)


def test_float_index_input_is_refused():
    model = _b2s_raw([4, 2], [1, 2], [0, 0], [0, 0])
    model.graph.initializer[0].CopyFrom(
        helper.make_tensor("block_shape", TensorProto.FLOAT, [2], [1.0, 2.0])
    )
    with pytest.raises(OpValidationError, match="block_shape must be an integer tensor"):
        b2s_onnx.lower(model)


def test_two_dimensional_index_input_is_refused():
    model = _b2s_raw([4, 2], [1, 2], [0, 0], [0, 0])
    model.graph.initializer[0].CopyFrom(
        helper.make_tensor("block_shape", TensorProto.INT64, [1, 2], [1, 2])
    )
    with pytest.raises(OpValidationError, match=re.escape("block_shape must be 1-D, got shape")):
        b2s_onnx.lower(model)


def test_unknown_rank_is_a_clear_error():
    model = _b2s_raw([4, 2], [1, 2], [0, 0], [0, 0])
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(B2SError, match=r"rank of input 'data' .* is unknown"):
        b2s_onnx.lower(model)


def test_opset_outside_the_supported_range_is_refused():
    with pytest.raises(B2SError, match=re.escape("outside the supported 13..21")):
        b2s_onnx.lower(_b2s([4, 2], [1, 2], [0, 0], [0, 0]), opset=12)


def test_reference_refuses_what_lowering_refuses():
    from b2s_onnx.ops import batch_to_space

    with pytest.raises(OpValidationError, match="exceeds"):
        batch_to_space.reference(
            np.zeros((4, 2)), np.array([1, 2]), np.array([0, 3]), np.array([0, 2])
        )
