"""Writes the hostile-input corpus: crafted IR and ONNX files that must each be refused with
one clear error (exit 2), quickly, without a traceback, an output file or a big allocation.

Run from the repository root: ``python tests/hostile/make_corpus.py``. ``cases.json``
lists every file with the command that reads it and a fragment of the expected message.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.builders import single_op_model

HERE = Path(__file__).resolve().parent

TINY = """<?xml version="1.0"?>
<net name="tiny" version="{version}">
  <layers>
    <layer id="0" name="x" type="Parameter" version="opset1">
      <data shape="{shape}" element_type="{etype}"/>
      <output><port id="0" precision="FP32" names="input_x">{dims}</port></output>
    </layer>
    <layer id="1" name="w" type="Const" version="opset1">
      <data element_type="f32" shape="1,3" offset="{offset}" size="{size}"/>
      <output><port id="0" precision="FP32"><dim>1</dim><dim>3</dim></port></output>
    </layer>
    <layer id="2" name="sum" type="{optype}" version="opset1">
      <data {attrs}/>
      <input>
        <port id="0"><dim>2</dim><dim>3</dim></port>{second}
      </input>
      <output><port id="2" precision="FP32" names="y"><dim>2</dim><dim>3</dim></port></output>
    </layer>
    <layer id="{result_id}" name="y/sink_port_0" type="Result" version="opset1">
      <input><port id="0"><dim>2</dim><dim>3</dim></port></input>
    </layer>
  </layers>
  <edges>
    <edge from-layer="0" from-port="0" to-layer="2" to-port="0"/>{edge1}
    <edge from-layer="2" from-port="2" to-layer="3" to-port="0"/>{extra}
  </edges>
</net>
"""
SECOND = '\n        <port id="1"><dim>1</dim><dim>3</dim></port>'
EDGE1 = '\n    <edge from-layer="1" from-port="0" to-layer="2" to-port="1"/>'
WEIGHTS = np.arange(3, dtype=np.float32).tobytes()


def tiny(**overrides) -> str:
    fields = {
        "version": 11,
        "shape": "2,3",
        "etype": "f32",
        "dims": "<dim>2</dim><dim>3</dim>",
        "offset": 0,
        "size": 12,
        "optype": "Add",
        "attrs": 'auto_broadcast="numpy"',
        "second": SECOND,
        "edge1": EDGE1,
        "extra": "",
        "result_id": 3,
    }
    fields.update(overrides)
    return TINY.format(**fields)


def ir_cases() -> list[tuple[str, str, bytes | None, str, str]]:
    """(name, xml text, bin bytes or None, command, expected message fragment)."""
    valid = tiny()
    levels = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    ]
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE lolz ['
        + "".join(levels)
        + ']><net version="11"><layers>&lol9;</layers><edges/></net>'
    )
    return [
        ("not_xml", "this is not XML at all", WEIGHTS, "convert", "not well-formed XML"),
        ("truncated", valid[: len(valid) // 2], WEIGHTS, "convert", "not well-formed XML"),
        (
            "dtd_entity",
            '<!DOCTYPE net [<!ENTITY a "x">]><net version="11"><layers/><edges/></net>',
            WEIGHTS,
            "convert",
            "refused unsafe XML",
        ),
        (
            "external_entity",
            '<!DOCTYPE net [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
            '<net version="11"><layers>&e;</layers><edges/></net>',
            WEIGHTS,
            "convert",
            "refused unsafe XML",
        ),
        (
            "network_entity",
            '<!DOCTYPE net [<!ENTITY e SYSTEM "http://127.0.0.1:9/x">]>'
            '<net version="11"><layers>&e;</layers><edges/></net>',
            WEIGHTS,
            "convert",
            "refused unsafe XML",
        ),
        ("billion_laughs", laughs, WEIGHTS, "convert", "refused unsafe XML"),
        ("unknown_root", "<model version='11'/>", WEIGHTS, "convert", "root element is <model>"),
        (
            "old_ir_version",
            '<net version="7"><layers/><edges/></net>',
            WEIGHTS,
            "convert",
            "IR version '7' is not supported",
        ),
        ("no_layers", '<net version="11"><edges/></net>', WEIGHTS, "convert", "missing <layers>"),
        ("no_edges", '<net version="11"><layers/></net>', WEIGHTS, "convert", "missing <edges>"),
        ("duplicate_layer_id", tiny(result_id=2), WEIGHTS, "convert", "duplicate layer id 2"),
        (
            "edge_to_missing_layer",
            tiny(extra='\n    <edge from-layer="9" from-port="0" to-layer="2" to-port="0"/>'),
            WEIGHTS,
            "convert",
            "refers to missing layer 9",
        ),
        (
            "edge_to_missing_port",
            tiny(extra='\n    <edge from-layer="0" from-port="5" to-layer="3" to-port="0"/>'),
            WEIGHTS,
            "convert",
            "missing output port 5",
        ),
        (
            "cycle",
            tiny(edge1='\n    <edge from-layer="2" from-port="2" to-layer="2" to-port="1"/>'),
            WEIGHTS,
            "convert",
            "cycle",
        ),
        (
            "wrong_input_count",
            tiny(second="", edge1=""),
            WEIGHTS,
            "convert",
            "takes 2 input(s), got 1",
        ),
        (
            "negative_dim",
            tiny(dims="<dim>2</dim><dim>-7</dim>"),
            WEIGHTS,
            "convert",
            "dimension -7 is negative",
        ),
        (
            "absurd_dim",
            tiny(dims="<dim>2</dim><dim>99999999999999999</dim>"),
            WEIGHTS,
            "convert",
            "absurdly large",
        ),
        (
            "dim_not_a_number",
            tiny(dims="<dim>2</dim><dim>three</dim>"),
            WEIGHTS,
            "convert",
            "dimension 'three' is not a number",
        ),
        (
            "unknown_element_type",
            tiny(etype="q7"),
            WEIGHTS,
            "convert",
            "element type 'q7' is not supported",
        ),
        (
            "attribute_wrong_type",
            tiny(optype="Elu", attrs='alpha="lots"', second="", edge1=""),
            WEIGHTS,
            "convert",
            "alpha='lots' is not a number",
        ),
        (
            "absurd_input_for_check",
            tiny(optype="ReLU", attrs="", second="", edge1="", shape="1000000,1000000").replace(
                "<dim>2</dim><dim>3</dim>", "<dim>1000000</dim><dim>1000000</dim>"
            ),
            WEIGHTS,
            "check",
            "refusing",
        ),
        ("bin_missing", valid, None, "convert", "no such file"),
        ("bin_shorter_than_offset_plus_size", valid, WEIGHTS[:8], "convert", "lie past the end"),
        ("bin_size_not_matching_shape", tiny(size=8), WEIGHTS, "convert", "does not match shape"),
        ("bin_offset_past_end", tiny(offset=4096), WEIGHTS, "convert", "lie past the end"),
        (
            "bin_negative_offset",
            tiny(offset=-4),
            WEIGHTS,
            "convert",
            "attribute offset='-4': must be >= 0",
        ),
    ]


def _b2s(index=None, shape=(4, 2, 3)):
    index = index or {"block_shape": [1, 2, 2], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]}
    graph = helper.make_graph(
        [
            helper.make_node(
                "BatchToSpace",
                ["data", "block_shape", "crops_begin", "crops_end"],
                ["y"],
                domain="org.openvinotoolkit",
                name="b2s",
            )
        ],
        "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(shape))],
        [helper.make_tensor(k, TensorProto.INT64, [len(v)], v) for k, v in index.items()],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)],
    )


def _external(model: onnx.ModelProto, location: str, length: int = 24) -> onnx.ModelProto:
    tensor = model.graph.initializer[0]
    tensor.ClearField("int64_data")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return model


def onnx_cases() -> list[tuple[str, bytes, dict[str, bytes], str, str]]:
    """(name, model bytes, side files, command, expected message fragment)."""
    valid = single_op_model(
        "BatchToSpace",
        [4, 3, 4, 2],
        index={"block_shape": [1, 2, 2, 1], "crops_begin": [0] * 4, "crops_end": [0] * 4},
    )
    wrong_count = _b2s()
    del wrong_count.graph.node[0].input[3]
    float_index = _b2s()
    float_index.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.array([1.0, 2.0, 2.0], np.float32), "block_shape")
    )
    missing = _b2s()
    del missing.graph.initializer[1]
    unknown_rank = _b2s()
    unknown_rank.graph.input[0].type.tensor_type.ClearField("shape")
    cases = [
        (
            "not_protobuf",
            b"\xff\xfe this is definitely not a protobuf \x00\x01",
            {},
            "lower",
            "not a readable ONNX model",
        ),
        ("truncated", valid.SerializeToString()[:37], {}, "lower", ""),
        ("wrong_input_count", wrong_count.SerializeToString(), {}, "lower", "expects 4 inputs"),
        (
            "float_index_input",
            float_index.SerializeToString(),
            {},
            "lower",
            "block_shape must be an integer tensor",
        ),
        (
            "index_wrong_length",
            _b2s(
                {"block_shape": [1, 2], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]}
            ).SerializeToString(),
            {},
            "lower",
            "block_shape has 2 elements but data has rank 3",
        ),
        (
            "zero_block",
            _b2s(
                {"block_shape": [1, 0, 2], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]}
            ).SerializeToString(),
            {},
            "lower",
            "block_shape[1] = 0 must be >= 1",
        ),
        (
            "negative_block",
            _b2s(
                {"block_shape": [1, -2, 2], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]}
            ).SerializeToString(),
            {},
            "lower",
            "block_shape[1] = -2 must be >= 1",
        ),
        (
            "crops_larger_than_extent",
            _b2s(
                {"block_shape": [1, 2, 2], "crops_begin": [0, 3, 0], "crops_end": [0, 2, 0]}
            ).SerializeToString(),
            {},
            "lower",
            "exceeds block_shape[1] * data.shape[1] = 4",
        ),
        (
            "block_product_overflow",
            _b2s(
                {"block_shape": [1, 2**40, 2**40], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]}
            ).SerializeToString(),
            {},
            "lower",
            "overflows int64",
        ),
        (
            "missing_initializer",
            missing.SerializeToString(),
            {},
            "lower",
            "nothing in the model defines",
        ),
        ("unknown_rank", unknown_rank.SerializeToString(), {}, "lower", "rank of input 'data'"),
        (
            "external_path_traversal",
            _external(_b2s(), "../../../../etc/passwd").SerializeToString(),
            {},
            "lower",
            "path traversal refused",
        ),
        (
            "external_absolute_path",
            _external(_b2s(), "/etc/passwd").SerializeToString(),
            {},
            "lower",
            "must be a relative path",
        ),
        (
            "external_past_end",
            _external(_b2s(), "weights.bin", length=4096).SerializeToString(),
            {"weights.bin": b"\x00" * 16},
            "lower",
            "lies outside",
        ),
    ]
    return cases


def main() -> None:
    manifest = []
    for name, text, weights, command, message in ir_cases():
        folder = HERE / "ir" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.xml").write_text(text)
        if weights is not None:
            (folder / "model.bin").write_bytes(weights)
        manifest.append(
            {"file": f"ir/{name}/model.xml", "command": command, "exit": 2, "message": message}
        )
    for name, data, side_files, command, message in onnx_cases():
        folder = HERE / "onnx" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(data)
        for side_name, side_data in side_files.items():
            (folder / side_name).write_bytes(side_data)
        manifest.append(
            {"file": f"onnx/{name}/model.onnx", "command": command, "exit": 2, "message": message}
        )
    (HERE / "cases.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(manifest)} hostile cases")


if __name__ == "__main__":
    main()
