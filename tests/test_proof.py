"""Nothing invalid is returned or written, and the blame lands right: an IR or model that
contradicts itself is bad input (exit 2), a converter that builds an invalid node or a
wrong shape is our bug (exit 3), and no file is written either way."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.cli.main import cli
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.consistency import ConversionMismatchError
from b2s_onnx.ir.converters.registry import REGISTRATIONS, Registration
from b2s_onnx.validation import InvalidOutputError, complained_node
from tests.hostile.make_corpus import WEIGHTS, tiny

RELU = ("ReLU", "opset1")


def _ir(tmp_path, text: str):
    xml = tmp_path / "model.xml"
    xml.write_text(text)
    xml.with_suffix(".bin").write_bytes(WEIGHTS)
    return xml


def _relu_ir(tmp_path):
    return _ir(tmp_path, tiny(optype="ReLU", attrs="", second="", edge1=""))


def _convert_cli(tmp_path, xml) -> int:
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(cli, ["convert", str(xml), "-o", str(out)])
    assert not out.exists()
    return result.exit_code


def _replace_relu(monkeypatch, converter) -> None:
    found = REGISTRATIONS[RELU]
    monkeypatch.setitem(REGISTRATIONS, RELU, Registration(converter, found.attrs, found.inputs))


@pytest.mark.parametrize(
    ("message", "node"),
    [
        (
            "[ONNXRuntimeError] : 1 : FAIL : Node (conv1/Conv) Op (Conv) [ShapeInferenceError]",
            "conv1/Conv",
        ),
        (
            "(op_type:Reshape, node name: d2s/reshape_merge): [ShapeInferenceError] x",
            "d2s/reshape_merge",
        ),
        ("Bad node spec for node. Name: my_node OpType: Relu", "my_node"),
        ("Field 'shape' of 'type' is required but missing.", None),
    ],
)
def test_the_complained_about_node_is_found_in_onnx_and_onnxruntime_messages(message, node):
    assert complained_node(message) == node


def test_a_converter_that_builds_an_invalid_node_is_an_internal_error_naming_the_layer(
    tmp_path, monkeypatch
):
    def invalid(ctx, layer, inputs):
        ctx.one("Relu", inputs, ctx.out(layer), bogus=1)

    _replace_relu(monkeypatch, invalid)
    xml = _relu_ir(tmp_path)
    with pytest.raises(InvalidOutputError, match=r"layer 2 'sum' \(ReLU-opset1\): the converted"):
        b2s_onnx.convert_ir(xml)
    assert _convert_cli(tmp_path, xml) == 3


def test_a_converter_that_computes_a_wrong_shape_is_an_internal_error(tmp_path, monkeypatch):
    pytest.importorskip("openvino")

    def doubled(ctx, layer, inputs):
        ctx.one("Concat", [inputs[0], inputs[0]], ctx.out(layer), axis=0)

    _replace_relu(monkeypatch, doubled)
    xml = _relu_ir(tmp_path)
    with pytest.raises(ConversionMismatchError, match=r"declares \[2,3\], but .* give \[4,3\]"):
        b2s_onnx.convert_ir(xml)
    assert _convert_cli(tmp_path, xml) == 3


def test_edge_ends_that_disagree_are_bad_input_naming_both(tmp_path):
    text = tiny().replace(
        '<port id="0"><dim>2</dim><dim>3</dim></port>{second}'.replace("{second}", ""),
        '<port id="0"><dim>2</dim><dim>4</dim></port>',
        1,
    )
    xml = _ir(tmp_path, text)
    with pytest.raises(B2SError, match=r"input port 0 declares \[2,4\] but layer 0 'x'"):
        b2s_onnx.convert_ir(xml)
    assert _convert_cli(tmp_path, xml) == 2


def test_a_body_parameter_contradicting_its_shape_attribute_is_bad_input(tmp_path):
    """Found by the mutation fuzz: a Loop body Parameter whose port says [1,2] while its
    shape attribute (what OpenVINO reads) says [1,7] became an invalid ONNX Loop body."""
    keras = Path(__file__).resolve().parents[1] / "models" / "keras" / "lstm_states.xml"
    text = keras.read_text()
    start = text.index('<data shape="1,7" element_type="f32" />')
    dims = text.index("<dim>7</dim>", start)
    xml = tmp_path / "model.xml"
    xml.write_text(text[:dims] + "<dim>2</dim>" + text[dims + len("<dim>7</dim>") :])
    xml.with_suffix(".bin").write_bytes(keras.with_suffix(".bin").read_bytes())
    with pytest.raises(B2SError, match=r"\(Loop-opset5\), body: .*declares \[1,2\] but .* \[1,7\]"):
        b2s_onnx.convert_ir(xml)
    assert _convert_cli(tmp_path, xml) == 2


def test_a_declared_output_that_breaks_the_op_rule_is_bad_input(tmp_path):
    pytest.importorskip("openvino")
    text = tiny()
    head, tail = text.split('<port id="2"', 1)
    tail = tail.replace("<dim>2</dim><dim>3</dim>", "<dim>2</dim><dim>4</dim>", 2)
    xml = _ir(tmp_path, head + '<port id="2"' + tail)
    with pytest.raises(B2SError, match=r"declares \[2,4\], but its inputs' .* give \[2,3\]"):
        b2s_onnx.convert_ir(xml)
    assert _convert_cli(tmp_path, xml) == 2


def _declared_wrong() -> object:
    """A DepthToSpace whose declared output shape cannot be what it computes."""
    return helper.make_model(
        helper.make_graph(
            [
                helper.make_node(
                    "DepthToSpace",
                    ["x"],
                    ["y"],
                    name="d2s",
                    domain="org.openvinotoolkit",
                    block_size=2,
                    mode="blocks_first",
                )
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 7])],
        ),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)],
    )


def test_lower_refuses_declared_shapes_its_nodes_contradict(tmp_path):
    model = _declared_wrong()
    with pytest.raises(B2SError, match="declared shapes or types contradict"):
        b2s_onnx.lower(model)
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    path.write_bytes(model.SerializeToString())
    result = CliRunner().invoke(cli, ["lower", str(path), "-o", str(out)])
    assert result.exit_code == 2
    assert not out.exists()


def test_lower_refuses_an_input_node_onnxruntime_cannot_load():
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["x", "w"], ["y"], name="bad_add")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0] * 4)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    with pytest.raises(B2SError, match="bad_add"):
        b2s_onnx.lower(model)
