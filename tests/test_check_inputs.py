"""--val-range: random inputs in the range users mean, integers for integer inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from b2s_onnx.errors import B2SError
from b2s_onnx.parity.inputs import make_inputs, option_warnings

TYPES = [
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.BFLOAT16,
    TensorProto.UINT8,
    TensorProto.INT8,
    TensorProto.INT32,
    TensorProto.INT64,
]


def two_inputs(elem_type: int):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("a", elem_type, [4, 64]),
            helper.make_tensor_value_info("b", elem_type, ["N", 64]),
        ],
        [helper.make_tensor_value_info("y", elem_type, [4, 64])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("elem_type", TYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_star_range_applies_to_every_input_and_a_name_overrides_it(elem_type, seed):
    feeds = make_inputs(two_inputs(elem_type), seed=seed, val_range={"*": (0, 255), "b": (-3, 2)})
    a, b = (feeds[n].astype(np.float64) for n in "ab")
    assert a.min() >= 0
    assert a.max() <= 255
    assert a.max() > 100  # spread over the range, not a constant
    assert b.min() >= -3
    assert b.max() <= 2
    dtype = feeds["a"].dtype
    if dtype.kind in "iu":
        assert set(np.unique(b)) <= {-3, -2, -1, 0, 1, 2}
        assert b.max() == 2  # integer ranges are inclusive
    else:
        assert dtype in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16)
        assert not np.all(a == np.round(a))  # floats stay floats


def test_unsigned_inputs_clip_the_range_to_their_type():
    feeds = make_inputs(two_inputs(TensorProto.UINT8), val_range={"*": (-10, 300)})
    assert feeds["a"].dtype == np.uint8
    assert feeds["a"].min() >= 0


def test_an_integer_range_without_integers_is_refused():
    with pytest.raises(B2SError, match=r"no int32 value lies in \[0.2, 0.7\]"):
        make_inputs(two_inputs(TensorProto.INT32), val_range={"*": (0.2, 0.7)})


def test_a_range_for_an_unknown_input_is_refused():
    with pytest.raises(B2SError, match="'c' is not an input of the model"):
        make_inputs(two_inputs(TensorProto.FLOAT), val_range={"c": (0, 1)})


def test_without_a_range_floats_are_standard_normal():
    feeds = make_inputs(two_inputs(TensorProto.FLOAT))
    assert feeds["a"].min() < 0 < feeds["a"].max()


def test_options_naming_nothing_are_warned_about():
    model = two_inputs(TensorProto.FLOAT)
    assert option_warnings(model, {"N": 2}) == []
    (message,) = option_warnings(model, {"M": 2})
    assert message == "--dim M names no dimension of the model (symbolic: N)"
    (message,) = option_warnings(model, None, {"z": "topk:1", "y": "topk:1"})
    assert message.startswith("--compare z: no output of that name")
