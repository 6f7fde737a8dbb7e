"""Fuzzing the IR reader/converter and ``lower`` with mutated inputs.

Any exception that is not ``B2SError`` is a failure. CI runs a bounded number of examples;
``B2S_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz.py`` runs more.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.errors import B2SError, OpValidationError
from b2s_onnx.io import load_model
from b2s_onnx.ops import batch_to_space, space_to_batch
from tests.helpers import assert_same_bits, run_lowered
from tests.hostile.make_corpus import WEIGHTS, tiny

EXAMPLES = int(os.environ.get("B2S_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

B2S_IR = tiny(
    optype="BatchToSpace",
    attrs="",
    second="""
        <port id="1"><dim>3</dim></port>
        <port id="2"><dim>3</dim></port>
        <port id="3"><dim>3</dim></port>""",
    edge1="""
    <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>
    <edge from-layer="1" from-port="0" to-layer="2" to-port="2"/>
    <edge from-layer="1" from-port="0" to-layer="2" to-port="3"/>""",
)
SEEDS = [tiny(), tiny(optype="Elu", attrs='alpha="1.0"', second="", edge1=""), B2S_IR]
ODD_VALUES = [
    "",
    "-1",
    "0",
    "1e309",
    "nan",
    "a,b",
    "99999999999999999999",
    ",,,",
    "1,2,3,4,5",
    "opset99",
    "f16",
    "true",
    "\u00e9",
    "-0",
    "2.5",
]


def _convert(tmp_path, xml_text: str, weights: bytes | None) -> None:
    xml = tmp_path / "model.xml"
    xml.write_text(xml_text, errors="surrogateescape")
    if weights is not None:
        (tmp_path / "model.bin").write_bytes(weights)
    elif (tmp_path / "model.bin").exists():
        (tmp_path / "model.bin").unlink()
    with contextlib.suppress(B2SError):
        b2s_onnx.convert_ir(xml)


@FUZZ
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_ir_reader_survives_mutations(tmp_path, seed, data):
    kind = data.draw(st.sampled_from(["flip", "truncate", "attribute", "weights"]))
    text, weights = seed, WEIGHTS
    if kind == "flip":
        position = data.draw(st.integers(0, len(text) - 1))
        text = text[:position] + data.draw(st.characters(codec="utf-8")) + text[position + 1 :]
    elif kind == "truncate":
        text = text[: data.draw(st.integers(0, len(text)))]
    elif kind == "attribute":
        attributes = list(re.finditer(r'(\w[\w-]*)="([^"]*)"', text))
        match = data.draw(st.sampled_from(attributes))
        value = data.draw(st.sampled_from(ODD_VALUES) | st.text(max_size=8))
        value = value.replace('"', "").replace("<", "").replace("&", "")
        text = text[: match.start(2)] + value + text[match.end(2) :]
    else:
        weights = (
            weights[: data.draw(st.integers(0, len(weights)))] if data.draw(st.booleans()) else None
        )
    _convert(tmp_path, text, weights)


def _valid_models() -> list[bytes]:
    index = {"block_shape": [1, 2, 2, 1], "crops_begin": [0, 1, 0, 0], "crops_end": [0, 0, 1, 0]}
    return [
        single_op_model("BatchToSpace", [4, 3, 4, 2], index=index).SerializeToString(),
        single_op_model(
            "BatchToSpace", ["N", 3, 4, 2], index=dict.fromkeys(index, "runtime")
        ).SerializeToString(),
        single_op_model(
            "SpaceToBatch",
            [1, 2, 4, 3],
            index={"block_shape": [1, 2, 2, 1], "pads_begin": [0] * 4, "pads_end": [0, 0, 0, 1]},
        ).SerializeToString(),
        single_op_model(
            "DepthToSpace", [1, 8, 2, 3], attributes={"block_size": 2, "mode": "depth_first"}
        ).SerializeToString(),
    ]


VALID = _valid_models()


@FUZZ
@given(seed=st.sampled_from(VALID), data=st.data())
def test_lower_survives_byte_mutations(tmp_path, seed, data):
    raw = bytearray(seed)
    if data.draw(st.booleans()):
        for _ in range(data.draw(st.integers(1, 4))):
            position = data.draw(st.integers(0, len(raw) - 1))
            raw[position] ^= 1 << data.draw(st.integers(0, 7))
    else:
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    path = tmp_path / "m.onnx"
    path.write_bytes(bytes(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(B2SError):
            b2s_onnx.lower(load_model(path))


@FUZZ
@given(data=st.data(), op=st.sampled_from(["BatchToSpace", "SpaceToBatch"]))
def test_lowering_refuses_exactly_what_the_reference_refuses(data, op):
    """Random (often invalid) index values: either both refuse, or both agree on every bit."""
    rank = data.draw(st.integers(2, 4))
    shape = [data.draw(st.integers(1, 4)) for _ in range(rank)]
    values = st.lists(st.integers(-2, 5), min_size=rank, max_size=rank)
    roles = batch_to_space.INDEX_ROLES if op == "BatchToSpace" else space_to_batch.INDEX_ROLES
    index = {role: data.draw(values) for role in roles}
    module = batch_to_space if op == "BatchToSpace" else space_to_batch
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    refused_input = None
    try:
        expected = module.reference(x, *(np.array(v) for v in index.values()))
    except OpValidationError as refused:
        refused_input = refused.input_name
    if refused_input is not None:
        raw = onnx.helper.make_model(
            onnx.helper.make_graph(
                [onnx.helper.make_node(op, ["data", *roles], ["y"], domain="org.openvinotoolkit")],
                "g",
                [onnx.helper.make_tensor_value_info("data", onnx.TensorProto.FLOAT, shape)],
                [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None] * rank)],
                [
                    onnx.helper.make_tensor(r, onnx.TensorProto.INT64, [rank], v)
                    for r, v in index.items()
                ],
            ),
            opset_imports=[
                onnx.helper.make_opsetid("", 17),
                onnx.helper.make_opsetid("org.openvinotoolkit", 1),
            ],
        )
        with pytest.raises(OpValidationError) as lowered_refusal:
            b2s_onnx.lower(raw)
        assert lowered_refusal.value.input_name == refused_input
        return
    lowered = b2s_onnx.lower(single_op_model(op, shape, index=index))
    assert_same_bits(run_lowered(lowered, {"data": x}), expected)


@pytest.mark.parametrize("where", ["input", "initializer"])
def test_an_element_type_no_onnx_release_defines_is_refused(where):
    """A corrupted type number (39) once surfaced as a KeyError inside onnx's helpers."""
    model = onnx.ModelProto()
    model.ParseFromString(VALID[0])
    if where == "input":
        model.graph.input[0].type.tensor_type.elem_type = 39
    else:
        model.graph.initializer[0].data_type = 39
    with pytest.raises(B2SError, match="element type 39 is not an ONNX tensor type"):
        b2s_onnx.lower(model)
