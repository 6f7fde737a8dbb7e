"""The attribute schema: every declared rule refuses bad values with one clear error, and
reading an undeclared attribute is caught as our bug."""

from __future__ import annotations

import pytest

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters.registry import canonical_type, find
from b2s_onnx.ir.converters.schema import (
    RANK,
    SPATIAL,
    Bool,
    Choice,
    Float,
    Int,
    Ints,
    UndeclaredAttributeError,
    declared_only,
    validate,
)
from b2s_onnx.ir.reader import Layer, Port


def _layer(rank: int | None = 4, **data: str) -> Layer:
    dims = None if rank is None else (1,) * rank
    return Layer("7", "conv", "Convolution", "opset1", dict(data), [Port(0, dims)], [Port(1, dims)])


SCHEMA = {
    "strides": Ints(required=True, length=SPATIAL, minimum=1),
    "axes": Ints(length=RANK, unique=True),
    "group": Int(default=1, minimum=1),
    "eps": Float(default=1e-5),
    "flag": Bool(default=False),
    "mode": Choice(allowed=("same_upper", "valid"), default="valid"),
}


def test_valid_attributes_parse_to_typed_values_and_defaults():
    values = validate(_layer(strides="2,1", axes="0,1,2,3", flag="true", mode="SAME_UPPER"), SCHEMA)
    assert values == {
        "strides": [2, 1],
        "axes": [0, 1, 2, 3],
        "group": 1,
        "eps": 1e-5,
        "flag": True,
        "mode": "same_upper",
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "missing required attribute 'strides'"),
        ({"strides": "2"}, "strides='2': needs 2 value(s), one per spatial axis of input 0"),
        ({"strides": ""}, "strides='': needs 2 value(s)"),
        ({"strides": "1,x"}, "strides='1,x' is not a list of integers"),
        ({"strides": "1,0"}, "strides='1,0': values must be >= 1"),
        ({"strides": "1,1", "axes": "0,0,1,2"}, "values must be distinct"),
        ({"strides": "1,1", "group": "two"}, "group='two' is not an integer"),
        ({"strides": "1,1", "eps": "nan"}, "eps='nan': must be finite"),
        ({"strides": "1,1", "flag": "maybe"}, "flag='maybe' is not a boolean"),
        ({"strides": "1,1", "mode": "full"}, "mode='full' is not one of same_upper, valid"),
    ],
)
def test_invalid_attributes_are_refused_naming_layer_attribute_and_rule(data, message):
    with pytest.raises(B2SError, match="layer 7 'conv'") as caught:
        validate(_layer(**data), SCHEMA)
    assert message in str(caught.value)


def test_length_rules_are_skipped_when_the_ir_states_no_rank():
    assert validate(_layer(rank=None, strides="3"), SCHEMA)["strides"] == [3]


def test_reading_an_undeclared_attribute_is_our_bug():
    layer = _layer(strides="1,1", secret="1")
    with declared_only(layer, SCHEMA):
        assert layer.data["strides"] == "1,1"
        with pytest.raises(UndeclaredAttributeError, match="'secret'"):
            layer.data.get("secret")
    assert layer.data["secret"] == "1"


def test_layer_types_match_case_insensitively_like_openvino():
    assert canonical_type("relu") == "ReLU"
    layer = Layer("1", "r", "Relu", "opset1", {}, [Port(0, (1,))], [Port(1, (1,))])
    assert find(layer) is not None
