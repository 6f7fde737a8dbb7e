"""What lowering does to the model around the nodes: nothing, except what it must."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.graph.walk import all_graphs, all_nodes
from b2s_onnx.parity.reference_ops import reference_ops
from tests.helpers import ORT_ERRORS, assert_same_bits, run_lowered

DOMAIN = "org.openvinotoolkit"
INDEX = {"block_shape": [1, 2, 2], "crops_begin": [0, 1, 0], "crops_end": [0, 0, 1]}


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _sandwich(opset=17) -> onnx.ModelProto:
    """Relu -> BatchToSpace -> Neg -> SpaceToBatch -> Abs: custom nodes between standard
    ones, the second fed through a standard op by the first."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(
            "BatchToSpace", ["r", "blocks", "cb", "ce"], ["b"], domain=DOMAIN, name="b2s"
        ),
        helper.make_node("Neg", ["b"], ["n"], name="neg"),
        helper.make_node(
            "SpaceToBatch", ["n", "blocks", "cb", "ce"], ["s"], domain=DOMAIN, name="s2b"
        ),
        helper.make_node("Abs", ["s"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes,
        "sandwich",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4])],
        [
            _ints("blocks", [1, 2, 2]),
            _ints("cb", [0, 1, 0]),
            _ints("ce", [0, 0, 1]),
            _ints("unrelated", [5]),
        ],
        value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 3, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)]
    )
    model.ir_version = 7
    model.producer_name = "test-exporter"
    model.doc_string = "keep me"
    helper.set_model_props(model, {"author": "tests"})
    return model


def _reference(model, feeds):
    return ReferenceEvaluator(model, new_ops=reference_ops([DOMAIN])).run(None, feeds)[0]


def test_custom_nodes_between_standard_ops_are_lowered_and_compute_the_same():
    model = _sandwich()
    lowered = b2s_onnx.lower(model)
    assert {n.domain for n in all_nodes(lowered.graph)} == {""}
    x = np.random.default_rng(0).standard_normal((8, 3, 4)).astype(np.float32)
    assert_same_bits(
        run_lowered(lowered, {"x": x}, frozenset({"unrelated"})), _reference(model, {"x": x})
    )


def test_nothing_else_in_the_model_changes():
    model = _sandwich()
    lowered = b2s_onnx.lower(model)
    assert [i.SerializeToString() for i in lowered.graph.input] == [
        i.SerializeToString() for i in model.graph.input
    ]
    assert [o.SerializeToString() for o in lowered.graph.output] == [
        o.SerializeToString() for o in model.graph.output
    ]
    kept = [n for n in lowered.graph.node if n.name in ("relu", "neg", "abs")]
    assert [n.SerializeToString() for n in kept] == [
        n.SerializeToString() for n in model.graph.node if n.domain == ""
    ]
    assert lowered.producer_name == "test-exporter"
    assert lowered.doc_string == "keep me"
    assert [(p.key, p.value) for p in lowered.metadata_props] == [("author", "tests")]
    assert "unrelated" in {t.name for t in lowered.graph.initializer}
    assert [v.name for v in lowered.graph.value_info] == ["r"]


def test_index_constants_only_the_lowered_nodes_read_are_removed():
    lowered = b2s_onnx.lower(_sandwich())
    names = {t.name for t in lowered.graph.initializer}
    assert not names & {"blocks", "cb", "ce"}
    used = {i for n in lowered.graph.node for i in n.input}
    assert names <= used | {"unrelated"}


def test_custom_domain_import_is_dropped_once_unused():
    lowered = b2s_onnx.lower(_sandwich())
    assert [o.domain for o in lowered.opset_import] == [""]


def test_output_passes_the_full_checker_and_has_unique_derived_names():
    lowered = b2s_onnx.lower(_sandwich())
    onnx.checker.check_model(lowered, full_check=True)
    names = [n.name for n in lowered.graph.node]
    assert len(names) == len(set(names))
    new = [n for n in names if n not in ("relu", "neg", "abs")]
    assert new
    assert all(n.startswith(("b2s/", "s2b/")) for n in new)


@pytest.mark.parametrize("opset", range(13, 22))
def test_every_target_opset_checks_and_runs(opset):
    lowered = b2s_onnx.lower(_sandwich(opset=13), opset=opset)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [opset]
    assert lowered.ir_version <= MAX_RUNTIME_IR_VERSION
    onnx.checker.check_model(lowered, full_check=True)
    x = np.ones((4, 3, 4), np.float32)
    run_lowered(lowered, {"x": x}, frozenset({"unrelated"}))


def test_an_old_opset_is_raised_to_13():
    lowered = b2s_onnx.lower(_sandwich(opset=11))
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [13]
    run_lowered(lowered, {"x": np.ones((4, 3, 4), np.float32)}, frozenset({"unrelated"}))


def test_a_newer_ir_version_is_capped_to_what_onnxruntime_reads():
    model = _sandwich()
    model.ir_version = 14
    assert b2s_onnx.lower(model).ir_version == MAX_RUNTIME_IR_VERSION


def test_ir_version_cap_matches_the_installed_onnxruntime():
    """The pinned cap is the newest IR version onnxruntime accepts: one more is refused."""
    lowered = b2s_onnx.lower(_sandwich())
    lowered.ir_version = MAX_RUNTIME_IR_VERSION
    run_lowered(lowered, {"x": np.ones((4, 3, 4), np.float32)}, frozenset({"unrelated"}))
    lowered.ir_version = MAX_RUNTIME_IR_VERSION + 1
    with pytest.raises(ORT_ERRORS, match="IR version"):
        onnxruntime.InferenceSession(lowered.SerializeToString())


def _if_model() -> onnx.ModelProto:
    """BatchToSpace inside the then-branch, reading an outer tensor and outer constants;
    DepthToSpace inside the else-branch with its own constant-free inputs."""
    then_branch = helper.make_graph(
        [
            helper.make_node(
                "BatchToSpace", ["x", "blocks", "cb", "ce"], ["t"], domain=DOMAIN, name="inner_b2s"
            )
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 5, 7])],
    )
    else_branch = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "shape4"], ["x4"], name="to4d"),
            helper.make_node(
                "DepthToSpace",
                ["x4"],
                ["e4"],
                domain=DOMAIN,
                name="inner_d2s",
                block_size=2,
                mode="depth_first",
            ),
            helper.make_node("Reshape", ["e4", "shape3"], ["e"], name="to3d"),
        ],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 5, 7])],
        [_ints("shape4", [1, 8, 3, 4]), _ints("shape3", [2, 6, 8])],
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                name="branch",
                then_branch=then_branch,
                else_branch=else_branch,
            )
        ],
        "with_if",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 3, 4]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_ints("blocks", [1, 2, 2]), _ints("cb", [0, 1, 0]), _ints("ce", [0, 0, 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    model.ir_version = 8
    return model


def test_nodes_inside_if_branches_are_lowered():
    model = _if_model()
    lowered = b2s_onnx.lower(model)
    assert {n.domain for n in all_nodes(lowered.graph)} == {""}
    assert len(list(all_graphs(lowered.graph))) == 3
    x = np.random.default_rng(1).standard_normal((8, 3, 4)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        assert_same_bits(run_lowered(lowered, feeds), _reference(model, feeds))


def test_the_input_model_is_not_modified():
    model = _sandwich()
    before = model.SerializeToString()
    b2s_onnx.lower(model)
    assert model.SerializeToString() == before


def test_other_domains_are_left_alone_unless_named():
    model = single_op_model("BatchToSpace", [4, 2, 3], index=INDEX, domain="com.example")
    untouched = b2s_onnx.lower(model)
    assert [n.op_type for n in untouched.graph.node] == ["BatchToSpace"]
    lowered = b2s_onnx.lower(model, domains=["com.example"])
    assert "BatchToSpace" not in {n.op_type for n in lowered.graph.node}


def test_legacy_domain_name_is_accepted():
    model = single_op_model("BatchToSpace", [4, 2, 3], index=INDEX, domain="ai.intel.openvino")
    lowered = b2s_onnx.lower(model)
    assert {n.domain for n in lowered.graph.node} == {""}


def test_constant_node_index_inputs_are_folded_and_removed():
    model = single_op_model("BatchToSpace", [4, 2, 3], index=INDEX)
    init = {t.name: t for t in model.graph.initializer}
    constants = [
        helper.make_node("Constant", [], [name], name=f"const_{name}", value=init[name])
        for name in ("block_shape", "crops_begin", "crops_end")
    ]
    model.graph.ClearField("initializer")
    nodes = [*constants, *model.graph.node]
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    lowered = b2s_onnx.lower(model, strategy="direct")
    assert "Constant" not in {n.op_type for n in lowered.graph.node}
    assert [n.op_type for n in lowered.graph.node] == ["Reshape", "Transpose", "Reshape", "Slice"]


def test_static_lowering_uses_exactly_the_four_step_form():
    lowered = b2s_onnx.lower(
        single_op_model("BatchToSpace", [4, 2, 3], index=INDEX), strategy="direct"
    )
    assert [n.op_type for n in lowered.graph.node] == ["Reshape", "Transpose", "Reshape", "Slice"]


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (
            {"block_shape": [1, 1, 1], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]},
            ["Identity"],
        ),
        ({"block_shape": [1, 1, 1], "crops_begin": [0, 1, 0], "crops_end": [0, 0, 0]}, ["Slice"]),
        (
            {"block_shape": [1, 2, 2], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]},
            ["Reshape", "Transpose", "Reshape"],
        ),
        (
            {"block_shape": [1, 1, 2], "crops_begin": [0, 0, 0], "crops_end": [0, 0, 0]},
            ["Reshape", "Transpose", "Reshape"],
        ),
    ],
)
def test_steps_that_do_nothing_are_left_out(index, expected):
    lowered = b2s_onnx.lower(
        single_op_model("BatchToSpace", [4, 2, 3], index=index), strategy="direct"
    )
    assert [n.op_type for n in lowered.graph.node] == expected


def test_space_to_batch_without_pads_has_no_pad():
    index = {"block_shape": [1, 2, 3], "pads_begin": [0, 0, 0], "pads_end": [0, 0, 0]}
    lowered = b2s_onnx.lower(single_op_model("SpaceToBatch", [1, 4, 6], index=index))
    assert "Pad" not in {n.op_type for n in lowered.graph.node}


def test_an_unsorted_input_graph_comes_out_sorted():
    model = _sandwich()
    reversed_nodes = list(reversed(model.graph.node))
    model.graph.ClearField("node")
    model.graph.node.extend(reversed_nodes)
    lowered = b2s_onnx.lower(model)
    onnx.checker.check_model(lowered, full_check=True)
    x = np.ones((4, 3, 4), np.float32)
    run_lowered(lowered, {"x": x}, frozenset({"unrelated"}))


def test_many_identical_nodes_share_one_lowering_and_stay_exact():
    """Repeated static nodes reuse one lowering (renamed copies): names stay unique and
    derived from each node, and the chain still computes the identity it should."""
    from benchmarks.converter import chain_model

    model = chain_model(40)
    lowered = b2s_onnx.lower(model)
    names = [n.name for n in lowered.graph.node]
    assert len(names) == len(set(names))
    assert all(name.split("/")[0] in {f"n{i}" for i in range(40)} for name in names)
    onnx.checker.check_model(lowered, full_check=True)
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 2)).astype(np.float32)
    assert_same_bits(run_lowered(lowered, {"x": x}), x)
