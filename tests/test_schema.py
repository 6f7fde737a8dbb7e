"""The attribute schema: every declared rule refuses bad values with one clear error, and
reading an undeclared attribute is caught as our bug."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

import b2s_onnx
from b2s_onnx.cli.main import cli
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters.registry import (
    CONVERTERS,
    REGISTRATIONS,
    canonical_type,
    converts,
    find,
)
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
from tests.hostile.make_corpus import WEIGHTS, tiny
from tests.undeclared import EXPECTED_UNDECLARED, UNDECLARED_READS


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
    EXPECTED_UNDECLARED.append(
        "layer 7 'conv' (Convolution-opset1): the converter read attribute 'secret', which "
        "its schema does not declare"
    )
    with declared_only(layer, SCHEMA):
        assert layer.data["strides"] == "1,1"
        with pytest.raises(UndeclaredAttributeError, match="'secret'"):
            layer.data.get("secret")
    assert layer.data["secret"] == "1"


def test_layer_types_match_case_insensitively_like_openvino():
    assert canonical_type("relu") == "ReLU"
    layer = Layer("1", "r", "Relu", "opset1", {}, [Port(0, (1,))], [Port(1, (1,))])
    assert find(layer) is not None


def test_every_registered_converter_declares_attributes_and_inputs():
    """Converters added later are held to it too: the registry is read at test time."""
    import b2s_onnx.ir.converters  # noqa: F401 - registers every converter

    undescribed = [
        f"{layer_type}-{version}"
        for (layer_type, version), found in REGISTRATIONS.items()
        if found.attrs is None or found.inputs is None
    ]
    assert not undescribed, f"converters without attrs= or inputs=: {undescribed}"


def test_layer_where_names_id_name_and_type_version():
    layer = Layer("12", "conv1", "Convolution", "opset1", {})
    assert layer.where() == "layer 12 'conv1' (Convolution-opset1)"


@pytest.fixture
def probe_converter():
    """A converter for the made-up type ``SchemaProbe`` that reads an undeclared key."""

    def reads_undeclared(ctx, layer, inputs):
        layer.data.get("secret")

    converts("SchemaProbe", (1,), inputs=(2, 2), attrs={})(reads_undeclared)
    yield
    for key in [k for k in REGISTRATIONS if k[0] == "SchemaProbe"]:
        del REGISTRATIONS[key], CONVERTERS[key]


def test_an_undeclared_read_propagates_and_is_an_internal_error(tmp_path, probe_converter):
    xml = tmp_path / "model.xml"
    xml.write_text(tiny(optype="SchemaProbe", attrs='secret="1"'))
    xml.with_suffix(".bin").write_bytes(WEIGHTS)
    expected = "the converter read attribute 'secret', which its schema does not declare"
    EXPECTED_UNDECLARED.append(
        f"layer 2 'sum' (SchemaProbe-opset1): {expected}",
    )
    with pytest.raises(UndeclaredAttributeError, match=expected):
        b2s_onnx.convert_ir(xml)
    result = CliRunner().invoke(cli, ["convert", str(xml), "-o", str(tmp_path / "out.onnx")])
    assert result.exit_code == 3
    assert not (tmp_path / "out.onnx").exists()


def test_every_attribute_a_test_converter_reads_is_declared():
    """The session-wide recorder (conftest) fails the run on any undeclared read; this
    test pins that it is installed."""
    from b2s_onnx.ir.converters import schema

    before = len(UNDECLARED_READS)
    message = "probe: the converter read attribute 'x'"
    EXPECTED_UNDECLARED.append(message)
    schema.UndeclaredAttributeError(message)
    assert UNDECLARED_READS[before:] == [message]


#: (generated IR, layer type, attribute, bad value, rule named in the error)
BAD_ATTRIBUTES = [
    ("convnet", "Convolution", "dilations", "2", "needs 2 value(s), one per spatial axis"),
    ("convnet", "Convolution", "strides", "", "needs 2 value(s)"),
    ("convnet", "Convolution", "pads_begin", "1,-1", "values must be >= 0"),
    ("convnet", "Convolution", "auto_pad", "full", "is not one of"),
    ("convnet", "GroupConvolution", "strides", "1,0", "values must be >= 1"),
    ("convnet", "MaxPool", "kernel", "2,2,2", "needs 2 value(s)"),
    ("convnet", "MaxPool", "rounding_type", "ceil_torch", "is not one of floor, ceil"),
    ("convnet", "MaxPool", "index_element_type", "f32", "is not one of i32, i64"),
    ("convnet", "AvgPool", "exclude-pad", "maybe", "is not a boolean"),
    ("convnet", "Add", "auto_broadcast", "paddle", "is not one of numpy, none, pdpd"),
    ("convnet", "Reshape", "special_zero", "2", "is not a boolean"),
    ("convnet", "MatMul", "transpose_a", "yes please", "is not a boolean"),
    ("convnet", "SoftMax", "axis", "2", "must be in [-2, 1]"),
    ("shapes", "Concat", "axis", "3", "must be in [-3, 2]"),
    ("shapes", "StridedSlice", "begin_mask", "2,0,0", "values must be <= 1"),
    ("shapes", "Interpolate", "mode", "bogus", "is not one of"),
    ("shapes", "Interpolate", "cube_coeff", "nan", "must be finite"),
    ("shapes", "Clamp", "min", "low", "is not a number"),
    ("shapes", "ReduceMean", "keep_dims", "", "is not a boolean"),
    ("movement", "DepthToSpace", "block_size", "0", "must be >= 1"),
    ("movement", "SpaceToDepth", "mode", "sideways", "is not one of"),
    ("movement", "Elu", "alpha", "1e309", "must be finite"),
    ("movement", "TopK", "mode", "median", "is not one of max, min"),
    ("movement", "TopK", "axis", "9", "must be in [-4, 3]"),
    ("movement", "Pad", "pad_mode", "wrap", "is not one of"),
    ("movement", "Convert", "destination_type", "q7", "element type 'q7' is not supported"),
    ("movement", "Gather", "batch_dims", "x", "is not an integer"),
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, tuple[str, bytes]]:
    ov = pytest.importorskip("openvino")
    from tests.test_mutation_fuzz import generated_irs

    root = tmp_path_factory.mktemp("generated")
    saved = {}
    for name, model in generated_irs().items():
        xml = root / f"{name}.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        saved[name] = (xml.read_text(), xml.with_suffix(".bin").read_bytes())
    return saved


@pytest.mark.parametrize(
    ("model", "layer_type", "key", "value", "rule"),
    BAD_ATTRIBUTES,
    ids=[f"{case[1]}-{case[2]}" for case in BAD_ATTRIBUTES],
)
def test_a_bad_attribute_of_each_converter_is_refused_by_name(
    generated, tmp_path, model, layer_type, key, value, rule
):
    text, weights = generated[model]
    root = ET.fromstring(text)
    layer = next(e for e in root.iter("layer") if e.get("type") == layer_type)
    layer.find("data").set(key, value)
    xml = tmp_path / "model.xml"
    xml.write_text(ET.tostring(root, encoding="unicode"))
    xml.with_suffix(".bin").write_bytes(weights)
    with pytest.raises(B2SError) as refused:
        b2s_onnx.convert_ir(xml)
    message = str(refused.value)
    assert f"({layer_type}-{layer.get('version')}): attribute {key}=" in message
    assert rule in message
