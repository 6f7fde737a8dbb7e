"""The default reference isolates the lowering: standard ops in onnxruntime, custom nodes in
numpy. A pure data-movement lowering must then agree bit for bit, whatever surrounds it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.partitioned import ONNX_REFERENCE, PARTITIONED, run_partitioned
from b2s_onnx.parity.references import run_reference
from models.make_examples import dilated_block

DTYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT32: np.int32,
}


def _const(name: str, values) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def chained_model(elem_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """x -> SpaceToBatch -> Add(self) -> BatchToSpace -> Mul(x) -> y, plus the intermediate
    sum as a second output and a DepthToSpace reading the graph input directly."""
    nodes = [
        helper.make_node(
            "SpaceToBatch", ["x", "b", "p", "p"], ["s2b"], name="s2b", domain=DEFAULT_DOMAIN
        ),
        helper.make_node("Add", ["s2b", "s2b"], ["sum"], name="add"),
        helper.make_node(
            "BatchToSpace", ["sum", "b", "p", "p"], ["b2s"], name="b2s", domain=DEFAULT_DOMAIN
        ),
        helper.make_node("Mul", ["b2s", "x"], ["y"], name="mul"),
        helper.make_node(
            "DepthToSpace",
            ["x"],
            ["d2s"],
            name="d2s",
            domain=DEFAULT_DOMAIN,
            block_size=2,
            mode="depth_first",
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", elem_type, [1, 4, 4, 6])],
        [
            helper.make_tensor_value_info("y", elem_type, [1, 4, 4, 6]),
            helper.make_tensor_value_info("sum", elem_type, None),
            helper.make_tensor_value_info("d2s", elem_type, None),
        ],
        [_const("b", [1, 1, 2, 2]), _const("p", [0, 0, 0, 0])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = 8
    return model


@pytest.mark.parametrize("elem_type", list(DTYPES))
def test_chained_custom_nodes_are_bit_exact_under_the_default_reference(elem_type):
    result = b2s_onnx.check(chained_model(elem_type), seed=1)
    assert result.passed, [o.reason for o in result.outputs]
    assert result.reference == PARTITIONED
    assert "3 custom node(s)" in result.reference_detail
    assert all(o.max_abs_error == 0 and o.atol == 0 for o in result.outputs)


def test_partitioned_outputs_equal_the_numpy_composition():
    model = chained_model()
    x = np.arange(96, dtype=np.float32).reshape(1, 4, 4, 6)
    run = run_partitioned(model, {"x": x}, [DEFAULT_DOMAIN])
    np.testing.assert_array_equal(run.outputs["y"], 2 * x * x)  # S2B then B2S is identity
    assert run.outputs["sum"].shape == (4, 4, 2, 3)
    # depth_first DepthToSpace of [1,4,4,6], block 2: channel c*4 + i*2 + j -> (c, i, j).
    expected = x.reshape(1, 1, 4, 4, 6).reshape(1, 1, 2, 2, 4, 6)
    assert run.outputs["d2s"].shape == (1, 1, 8, 12)
    assert run.outputs["d2s"][0, 0, 0, 1] == expected[0, 0, 0, 1, 0, 0]


def test_a_float_model_is_bit_exact_because_its_conv_runs_in_onnxruntime_on_both_sides():
    result = b2s_onnx.check(dilated_block())
    assert result.passed
    assert result.outputs[0].max_abs_error == 0
    onnx_ref = b2s_onnx.check(dilated_block(), reference="onnx", atol=1e-4, rtol=1e-4)
    assert onnx_ref.reference == ONNX_REFERENCE
    assert onnx_ref.outputs[0].max_abs_error > 0  # another runtime rounds differently


def test_a_model_with_nothing_to_lower_passes_trivially():
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = b2s_onnx.check(model)
    assert result.passed
    assert result.reference_detail.startswith("nothing to lower")


def test_custom_nodes_in_an_if_body_fall_back_to_onnx_reference_and_say_so():
    branch_nodes = [
        helper.make_node(
            "DepthToSpace",
            ["x"],
            ["out"],
            domain=DEFAULT_DOMAIN,
            block_size=2,
            mode="blocks_first",
        )
    ]
    then_branch = helper.make_graph(
        branch_nodes, "then", [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out2"])],
        "else",
        [],
        [helper.make_tensor_value_info("out2", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "if",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2, 2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = 8
    inputs = {"cond": np.array(True), "x": np.ones((1, 8, 2, 2), np.float32)}
    result = b2s_onnx.check(model, inputs=inputs)
    assert result.passed
    assert result.reference == ONNX_REFERENCE
    assert "inside If/Loop/Scan bodies" in result.reference_detail


def _contrib_model() -> onnx.ModelProto:
    """An op onnxruntime runs but onnx's reference evaluator does not know."""
    graph = helper.make_graph(
        [
            helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
            helper.make_node(
                "DepthToSpace",
                ["g"],
                ["y"],
                domain=DEFAULT_DOMAIN,
                block_size=2,
                mode="blocks_first",
            ),
        ],
        "contrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        value_info=[helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 8, 2, 2])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", 17),
            helper.make_opsetid(DEFAULT_DOMAIN, 1),
            helper.make_opsetid("com.microsoft", 1),
        ],
    )
    model.ir_version = 8
    return model


def test_a_failure_of_onnx_reference_is_bad_input_naming_that_reference():
    model = _contrib_model()
    assert b2s_onnx.check(model).passed
    with pytest.raises(B2SError, match=r"^reference onnx-reference failed \(.*try --reference"):
        b2s_onnx.check(model, reference="onnx")


def test_an_unknown_reference_is_refused():
    with pytest.raises(B2SError, match="does not apply to an ONNX model"):
        run_reference(chained_model(), {}, [DEFAULT_DOMAIN], "openvino")


@pytest.mark.parametrize("bad", [3, None, b"bytes"])
def test_lower_accepts_paths_and_refuses_other_types(tmp_path, bad):
    path = tmp_path / "m.onnx"
    onnx.save(chained_model(), path)
    for as_path in (path, str(path)):
        lowered = b2s_onnx.lower(as_path)
        assert not {n.domain for n in lowered.graph.node} & {DEFAULT_DOMAIN}
    with pytest.raises(B2SError, match=r"must be an onnx\.ModelProto or a path"):
        b2s_onnx.lower(bad)


def test_lower_of_a_folder_says_it_is_a_folder(tmp_path):
    with pytest.raises(B2SError, match="is a folder"):
        b2s_onnx.lower(tmp_path)


def _random_dag(draw_ops: list[tuple[str, int, int]], outputs: list[int]) -> onnx.ModelProto:
    """Standard ops and SpaceToDepth -> DepthToSpace round trips, each reading any earlier
    tensor of the input's shape, so custom nodes land between, beside and after others."""
    nodes, names = [], ["x"]
    for index, (op, first, second) in enumerate(draw_ops):
        a, b = names[first % len(names)], names[second % len(names)]
        out = f"t{index}"
        if op == "roundtrip":
            nodes.append(
                helper.make_node(
                    "SpaceToDepth",
                    [a],
                    [f"{out}_s2d"],
                    name=f"s2d{index}",
                    domain=DEFAULT_DOMAIN,
                    block_size=2,
                    mode="blocks_first",
                )
            )
            nodes.append(
                helper.make_node(
                    "DepthToSpace",
                    [f"{out}_s2d"],
                    [out],
                    name=f"d2s{index}",
                    domain=DEFAULT_DOMAIN,
                    block_size=2,
                    mode="depth_first",
                )
            )
        elif op == "Add":
            nodes.append(helper.make_node("Add", [a, b], [out], name=f"add{index}"))
        else:
            nodes.append(helper.make_node(op, [a], [out], name=f"{op}{index}"))
        names.append(out)
    returned = sorted({names[-1], *(names[1 + i % (len(names) - 1)] for i in outputs)})
    graph = helper.make_graph(
        nodes,
        "dag",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in returned],
        value_info=[
            helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 4, 6]) for n in names[1:]
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = 8
    return model


OPS = st.tuples(
    st.sampled_from(["roundtrip", "Neg", "Abs", "Add"]),
    st.integers(0, 20),
    st.integers(0, 20),
)


@given(st.lists(OPS, min_size=1, max_size=8), st.lists(st.integers(0, 20), max_size=3))
def test_partitioned_reference_equals_onnx_reference_on_any_dag(ops, outputs):
    """Exact ops only, so both references must agree bit for bit however the graph is cut."""
    model = _random_dag(ops, outputs)
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 6)).astype(np.float32)
    split = run_partitioned(model, {"x": x}, [DEFAULT_DOMAIN])
    whole = run_reference(model, {"x": x}, [DEFAULT_DOMAIN], "onnx")
    assert split.outputs.keys() == whole.outputs.keys()
    for name, value in whole.outputs.items():
        assert split.outputs[name].tobytes() == np.asarray(value).tobytes(), name
    assert b2s_onnx.check(model).passed


@pytest.mark.openvino
def test_check_of_an_ir_path_converts_and_compares_with_openvino(tmp_path):
    """``b2s_onnx.check("model.xml")`` checks the conversion as ``b2s-onnx check`` does; a
    wrong ``lowered`` model is a failure, not a crash."""
    pytest.importorskip("openvino")
    xml = str(Path(__file__).parent.parent / "models" / "ir" / "dilated_block.xml")
    result = b2s_onnx.check(xml, seed=3)
    assert result.passed
    assert result.reference == "openvino-cpu"
    assert result.outputs[0].atol == pytest.approx(1e-4)
    wrong = b2s_onnx.convert_ir(xml)
    bias = next(t for t in wrong.graph.initializer if t.data_type == TensorProto.FLOAT)
    array = onnx.numpy_helper.to_array(bias) + 1.0
    bias.CopyFrom(onnx.numpy_helper.from_array(array.astype(np.float32), bias.name))
    assert not b2s_onnx.check(xml, lowered=wrong).passed


def _ir_without_output_names(tmp_path: Path) -> Path:
    """Two Results whose tensors have no names, as PyTorch's frontend writes them."""
    import re

    ov = pytest.importorskip("openvino")
    import openvino.opset1 as o1

    x = o1.parameter([2, 3], np.float32, name="x")
    model = ov.Model([o1.sigmoid(x).output(0), o1.relu(x).output(0)], [x])
    xml = tmp_path / "unnamed.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    xml.write_text(re.sub(r' names="Result_\d+"', "", xml.read_text()))
    return xml


@pytest.mark.openvino
def test_check_matches_outputs_without_tensor_names_by_their_result_layers(tmp_path):
    xml = _ir_without_output_names(tmp_path)
    result = b2s_onnx.check(str(xml))
    assert result.passed
    assert len(result.outputs) == 2
    assert all(o.max_abs_error < 1e-6 for o in result.outputs)
    swapped = b2s_onnx.convert_ir(xml)
    first, second = (o.name for o in swapped.graph.output)
    for node in swapped.graph.node:
        node.output[:] = [{first: second, second: first}.get(n, n) for n in node.output]
    assert not b2s_onnx.check(str(xml), lowered=swapped).passed


@pytest.mark.openvino
def test_check_of_an_ir_that_returns_its_input(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset1 as o1

    x = o1.parameter([2, 3], np.float32, name="x")
    xml = tmp_path / "identity.xml"
    ov.save_model(ov.Model([x.output(0)], [x]), xml, compress_to_fp16=False)
    result = b2s_onnx.check(str(xml))
    assert result.passed
    assert result.outputs[0].max_abs_error == 0
