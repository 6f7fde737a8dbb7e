"""Nodes whose outputs nothing reads leave the converted graph (onnxruntime would run them
on every call); what a graph output, a kept node or a subgraph reads stays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from b2s_onnx.graph.dead_code import drop_dead_nodes, restored

MODELS = Path(__file__).resolve().parents[1] / "models" / "int8"


def _graph(nodes, outputs=("y",), initializers=(), inputs=("x",)) -> onnx.GraphProto:
    return helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in outputs],
        list(initializers),
    )


def _weight(name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(2, np.float32), name)


def test_a_chain_nothing_reads_goes_with_the_weights_only_it_read():
    graph = _graph(
        [
            helper.make_node("Relu", ["x"], ["y"]),
            helper.make_node("Mul", ["x", "w_dead"], ["a"]),
            helper.make_node("Add", ["a", "w_shared"], ["b"]),
            helper.make_node("Sub", ["y", "w_shared"], ["c"]),
        ],
        initializers=[_weight("w_dead"), _weight("w_shared")],
    )
    graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]))
    removed = drop_dead_nodes(graph)
    assert [n.op_type for n in removed.nodes] == ["Mul", "Add", "Sub"]
    assert [t.name for t in removed.initializers] == ["w_dead", "w_shared"]
    assert [n.op_type for n in graph.node] == ["Relu"]
    assert not graph.initializer
    assert not graph.value_info


def test_a_node_with_one_output_read_stays_whole():
    graph = _graph(
        [
            helper.make_node("Split", ["x"], ["s0", "s1"], axis=0, num_outputs=2),
            helper.make_node("Concat", ["s0", "s0"], ["y"], axis=0),
        ]
    )
    assert drop_dead_nodes(graph).nodes == []
    assert len(graph.node) == 2


def test_what_a_subgraph_reads_from_outside_stays():
    branch = helper.make_graph(
        [helper.make_node("Neg", ["outer"], ["z"])],
        "branch",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )
    graph = _graph(
        [
            helper.make_node("Abs", ["x"], ["outer"]),
            helper.make_node(
                "Constant",
                [],
                ["flag"],
                value=helper.make_tensor("v", TensorProto.BOOL, [], [True]),
            ),
            helper.make_node("If", ["flag"], ["y"], then_branch=branch, else_branch=branch),
        ]
    )
    assert drop_dead_nodes(graph).nodes == []
    assert [n.op_type for n in graph.node] == ["Abs", "Constant", "If"]


def test_an_initializer_declared_as_an_input_stays():
    graph = _graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["fed"], ["dead"])],
        initializers=[_weight("fed")],
        inputs=("x", "fed"),
    )
    drop_dead_nodes(graph)
    assert [n.op_type for n in graph.node] == ["Relu"]
    assert [t.name for t in graph.initializer] == ["fed"]


@pytest.mark.parametrize("name", ["concat_branches", "ssd_head", "residual_block"])
def test_converted_int8_networks_keep_no_node_nothing_reads(name):
    """A rewrite that stops reading a dequantized input used to leave its DequantizeLinear,
    which onnxruntime still ran."""
    converted = b2s_onnx.convert_ir(MODELS / name / "int8.xml")
    read = {i for n in converted.graph.node for i in n.input} | {
        o.name for o in converted.graph.output
    }
    unread = [n.name for n in converted.graph.node if not any(o in read for o in n.output)]
    assert unread == []


def test_restored_puts_back_what_the_graph_lacks_and_takes_it_away_again():
    graph = _graph(
        [
            helper.make_node("Relu", ["x"], ["y"]),
            helper.make_node("Mul", ["x", "w_dead"], ["a"]),
            helper.make_node("Neg", ["a"], ["b"]),
        ],
        initializers=[_weight("w_dead")],
    )
    unread = drop_dead_nodes(graph)
    with restored(graph, unread):
        assert [n.op_type for n in graph.node] == ["Relu", "Mul", "Neg"]
        assert [t.name for t in graph.initializer] == ["w_dead"]
    assert [n.op_type for n in graph.node] == ["Relu"]
    assert not graph.initializer
    # A graph that already computes one of them (another conversion) takes only the rest.
    graph.node.append(helper.make_node("Abs", ["x"], ["a"]))
    with restored(graph, unread):
        assert [n.op_type for n in graph.node] == ["Relu", "Abs", "Neg"]
    assert [n.op_type for n in graph.node] == ["Relu", "Abs"]


def test_per_layer_still_compares_a_layer_whose_only_node_nothing_reads():
    """concat_branches' input FakeQuantize: a rewrite reads its quantized bytes, so its
    DequantizeLinear is dropped; per-layer comparison puts it back to judge the layer."""
    pytest.importorskip("openvino")
    from b2s_onnx.ir.convert import convert_ir_model
    from b2s_onnx.parity.ir_check import check_ir

    xml = MODELS / "concat_branches" / "int8.xml"
    conversion = convert_ir_model(xml)
    dropped = conversion.ports.unread.outputs()
    assert dropped
    result = check_ir(xml, conversion.model, per_layer=True, ports=conversion.ports)
    rows = [r for r in result.per_layer["layers"] if r["tensor"] in dropped]
    assert rows
    assert all(r["status"] == "ok" for r in rows)
    assert not dropped & {o for n in conversion.model.graph.node for o in n.output}
