"""The IR reader and weights: everything malformed is one B2SError naming file and field."""

from __future__ import annotations

import re

import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.hostile.make_corpus import WEIGHTS, tiny


def write_ir(
    tmp_path,
    *,
    version=11,
    shape="2,3",
    dims="<dim>2</dim><dim>3</dim>",
    offset=0,
    size=12,
    weights=WEIGHTS,
    extra_edges="",
    text=None,
):
    xml = tmp_path / "model.xml"
    xml.write_text(
        text
        if text is not None
        else tiny(
            version=version, shape=shape, dims=dims, offset=offset, size=size, extra=extra_edges
        )
    )
    if weights is not None:
        (tmp_path / "model.bin").write_bytes(weights)
    return xml


def test_a_valid_ir_converts_with_port_names_as_tensor_names(tmp_path):
    model = b2s_onnx.convert_ir(write_ir(tmp_path))
    assert [i.name for i in model.graph.input] == ["input_x"]
    assert [o.name for o in model.graph.output] == ["y"]


@pytest.mark.parametrize("version", [10, 11])
def test_dynamic_dims_become_symbolic(tmp_path, version):
    xml = write_ir(tmp_path, version=version, shape="?,3", dims="<dim>-1</dim><dim>3</dim>")
    model = b2s_onnx.convert_ir(xml)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": "not xml at all"}, "not well-formed XML"),
        ({"text": "<net version='11'><layers>"}, "not well-formed XML"),
        (
            {
                "text": '<!DOCTYPE net [<!ENTITY a "aaaa">]>'
                '<net version="11"><layers/><edges/></net>'
            },
            "refused unsafe XML",
        ),
        (
            {
                "text": '<!DOCTYPE net [<!ENTITY e SYSTEM "file:///etc/passwd">]><net version="11">'
                "<layers>&e;</layers><edges/></net>"
            },
            "refused unsafe XML",
        ),
        ({"text": "<model/>"}, "root element is <model>"),
        ({"text": '<net version="7"><layers/><edges/></net>'}, "IR version '7' is not supported"),
        ({"text": '<net version="11"><edges/></net>'}, "missing <layers>"),
        (
            {"version": 11, "shape": "2,x", "dims": "<dim>2</dim><dim>x</dim>"},
            "dimension 'x' is not a number",
        ),
        ({"dims": "<dim>2</dim><dim>-5</dim>"}, "dimension -5 is negative"),
        ({"dims": "<dim>2</dim><dim>1000000000000000</dim>"}, "absurdly large"),
        ({"size": 8}, "size 8 does not match shape [1, 3] x 4 bytes = 12"),
        ({"offset": 4}, "lie past the end"),
        ({"weights": b"\x00" * 4}, "lie past the end"),
        (
            {"extra_edges": '<edge from-layer="9" from-port="0" to-layer="2" to-port="0"/>'},
            "missing layer 9",
        ),
        (
            {"extra_edges": '<edge from-layer="0" from-port="0" to-layer="2" to-port="1"/>'},
            "fed by two edges",
        ),
        (
            {"extra_edges": '<edge from-layer="0" from-port="7" to-layer="3" to-port="0"/>'},
            "missing output port 7",
        ),
    ],
)
def test_malformed_ir_is_one_clear_error(tmp_path, kwargs, message):
    xml = write_ir(tmp_path, **kwargs)
    with pytest.raises(B2SError, match=re.escape(message)):
        b2s_onnx.convert_ir(xml)


def test_missing_weights_file_is_named(tmp_path):
    xml = write_ir(tmp_path, weights=None)
    with pytest.raises(B2SError, match=r"model\.bin: no such file"):
        b2s_onnx.convert_ir(xml)


def test_cycle_is_refused(tmp_path):
    text = tiny(edge1='\n    <edge from-layer="2" from-port="2" to-layer="2" to-port="1"/>')
    with pytest.raises(B2SError, match="cycle"):
        b2s_onnx.convert_ir(write_ir(tmp_path, text=text))


def test_unknown_element_type_is_named(tmp_path):
    text = tiny().replace('element_type="f32" shape="1,3"', 'element_type="q7" shape="1,3"')
    with pytest.raises(B2SError, match="element type 'q7' is not supported"):
        b2s_onnx.convert_ir(write_ir(tmp_path, text=text))


def test_an_ir_without_a_name_converts_to_a_named_graph(tmp_path):
    """Found by the reader fuzz: ONNX requires a graph name, an IR need not have one."""
    import b2s_onnx

    xml = write_ir(tmp_path)
    xml.write_text(xml.read_text().replace('<net name="tiny"', '<net name=""', 1))
    assert b2s_onnx.convert_ir(xml).graph.name == "converted"
