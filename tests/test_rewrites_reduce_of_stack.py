"""`reduce-of-stack-as-elementwise`: ReduceMax/ReduceMin over a Concat of Unsqueezed tensors
(PyTorch's ``torch.stack(...).max(dim)``) as one Max/Min; the same bits but for -0/+0 ties
and NaN, where it now takes the second operand as OpenVINO does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.reduce_of_stack import ReduceOfStack
from tests.helpers import assert_same_bits, assert_well_formed, converted_matches_openvino

NAME = ReduceOfStack.name


def _model(parts, reduce="ReduceMax", axis=1, keepdims=0, opset=18, extra_outputs=(), shape=(6,)):
    """Inputs ``a``, ``b`` (float32 ``shape``); ``parts`` name what is stacked: an input
    (Unsqueezed at ``axis``), or a numpy constant (already of size 1 there)."""
    rank = len(shape) + 1
    nodes, inits, names = [], [], []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            if opset >= 13:
                inits.append(numpy_helper.from_array(np.asarray([axis], np.int64), f"ax{i}"))
                nodes.append(helper.make_node("Unsqueeze", [part, f"ax{i}"], [f"u{i}"]))
            else:
                nodes.append(helper.make_node("Unsqueeze", [part], [f"u{i}"], axes=[axis]))
            names.append(f"u{i}")
        else:
            inits.append(numpy_helper.from_array(part, f"k{i}"))
            names.append(f"k{i}")
    nodes.append(helper.make_node("Concat", names, ["stack"], axis=axis - rank))
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.asarray([axis], np.int64), "raxes"))
        nodes.append(helper.make_node(reduce, ["stack", "raxes"], ["y"], keepdims=keepdims))
    else:
        nodes.append(helper.make_node(reduce, ["stack"], ["y"], axes=[axis], keepdims=keepdims))
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in "ab"]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", *extra_outputs)
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _initializer(model, name):
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


def _reduce_over(model, axis):
    model.graph.initializer[-1].CopyFrom(
        numpy_helper.from_array(np.asarray([axis], np.int64), "raxes")
    )
    return model


def _rewritten(model):
    before = onnx.ModelProto()
    before.CopyFrom(model)
    report = apply_rewrites(model, (ReduceOfStack(),))
    assert_well_formed(model)
    return report, before, model


def _pairs():
    special = np.asarray([np.nan, -0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, 2.5], np.float32)
    return np.repeat(special, special.size), np.tile(special, special.size)


@pytest.mark.parametrize(("reduce", "op"), [("ReduceMax", "Max"), ("ReduceMin", "Min")])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_two_stacked_tensors_become_one_elementwise_op(reduce, op, opset):
    a, b = _pairs()
    shape = (a.size,)
    report, before, model = _rewritten(_model(["a", "b"], reduce, opset=opset, shape=shape))
    assert [f.rewrite for f in report.fired] == [NAME]
    assert [n.op_type for n in model.graph.node] == [op]
    assert list(model.graph.node[0].input) == ["a", "b"]
    feeds = {"a": a, "b": b}
    old = run_onnxruntime(before, feeds)["y"]
    new = run_onnxruntime(model, feeds)["y"]
    tie = (a == b) & (a.view(np.uint32) != b.view(np.uint32))
    nan = np.isnan(a) | np.isnan(b)
    plain = ~tie & ~nan
    assert_same_bits(new[plain], old[plain])
    # Where they differ, the second operand wins, as in OpenVINO's ReduceMax and Maximum.
    assert_same_bits(new[tie], b[tie])
    assert np.isnan(new[np.isnan(b)]).all()


def test_a_broadcast_constant_becomes_a_scalar():
    """face-detection-0205's clamp: max(x, 0) with the 0 expanded to x's shape."""
    rng = np.random.default_rng(0)
    zeros = np.zeros((5, 1), np.float32)
    report, before, model = _rewritten(_model(["a", zeros], shape=(5,)))
    assert report.fired[0].detail == "Max of 2"
    (node,) = model.graph.node
    constant = _initializer(model, node.input[1])
    assert constant.shape == ()
    feeds = {"a": rng.standard_normal(5).astype(np.float32), "b": np.zeros(5, np.float32)}
    assert_same_bits(run_onnxruntime(model, feeds)["y"], run_onnxruntime(before, feeds)["y"])


def test_a_constant_of_mixed_zeros_keeps_its_shape():
    signed = np.asarray([[0.0], [-0.0], [0.0]], np.float32)
    _, _, model = _rewritten(_model(["a", signed], shape=(3,)))
    (node,) = model.graph.node
    constant = _initializer(model, node.input[1])
    assert constant.shape == (3,)
    assert np.signbit(constant).tolist() == [False, True, False]


def test_keepdims_uses_the_stacked_parts_as_they_are():
    rng = np.random.default_rng(1)
    report, before, model = _rewritten(_model(["a", "b"], "ReduceMin", keepdims=1, shape=(4, 3)))
    assert [f.rewrite for f in report.fired] == [NAME]
    assert [n.op_type for n in model.graph.node] == ["Unsqueeze", "Unsqueeze", "Min"]
    feeds = {k: rng.standard_normal((4, 3)).astype(np.float32) for k in "ab"}
    old, new = (run_onnxruntime(m, feeds)["y"] for m in (before, model))
    assert new.shape == (4, 1, 3)
    assert_same_bits(new, old)


def test_an_unsqueeze_read_elsewhere_stays():
    model = _model(["a", "b"], extra_outputs=("u0",))
    report, _, model = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    assert sorted(n.op_type for n in model.graph.node) == ["Max", "Unsqueeze"]
    assert {"stack", "u1"} <= set(report.absorbed)
    assert "u0" not in report.absorbed


def test_declines_a_stack_read_elsewhere():
    report, before, model = _rewritten(_model(["a", "b"], extra_outputs=("stack",)))
    assert not report.fired
    assert [d.reason for d in report.declined] == ["the stacked tensor is read elsewhere too"]
    assert model.graph.node == before.graph.node


def test_declines_parts_stacked_along_another_axis():
    """Unsqueeze at axis 1 but Concat and reduction at axis 0: not a stack of the parts."""
    model = _model(["a", "b"], axis=1, shape=(1, 4))
    for node in model.graph.node:
        if node.op_type == "Concat":
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("axis", 0))
    report, _, _ = _rewritten(_reduce_over(model, 0))
    assert not report.fired
    reason = "part u0 is not an Unsqueeze at the reduced axis"
    assert [d.reason for d in report.declined] == [reason]


def test_leaves_reductions_over_other_axes_alone():
    report, _, _ = _rewritten(_reduce_over(_model(["a", "b"], shape=(3, 4)), 2))
    assert not report.fired
    assert not report.declined


def test_declines_an_all_constant_stack():
    constants = [np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32)]
    report, _, _ = _rewritten(_model(constants, shape=(2,)))
    assert [d.reason for d in report.declined] == ["every part is constant (left to folding)"]


@settings(max_examples=40, deadline=None)
@given(
    parts=st.lists(st.sampled_from(["a", "b", "const", "scalar"]), min_size=2, max_size=4).filter(
        lambda p: any(x in "ab" for x in p)
    ),
    reduce=st.sampled_from(["ReduceMax", "ReduceMin"]),
    axis=st.integers(0, 2),
    keepdims=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_any_stack_gives_the_same_values(parts, reduce, axis, keepdims, seed):
    rng = np.random.default_rng(seed)
    shape = (3, 5)
    stacked = list(np.expand_dims(np.zeros(shape, np.float32), axis).shape)
    made = []
    for part in parts:
        if part == "const":
            made.append(rng.standard_normal(stacked).astype(np.float32))
        elif part == "scalar":
            made.append(np.full(stacked, rng.standard_normal(), np.float32))
        else:
            made.append(part)
    report, before, model = _rewritten(_model(made, reduce, axis, keepdims, shape=shape))
    assert [f.rewrite for f in report.fired] == [NAME]
    feeds = {k: rng.standard_normal(shape).astype(np.float32) for k in "ab"}
    assert_same_bits(run_onnxruntime(model, feeds)["y"], run_onnxruntime(before, feeds)["y"])


def test_openvino_stack_max_converts_to_max(tmp_path):
    ov = pytest.importorskip("openvino")
    ops = pytest.importorskip("openvino.opset13")
    data = ops.parameter([1, 2704], np.float32, name="data")
    axis = ops.constant(np.asarray([2], np.int64))
    zero = ops.broadcast(ops.constant(np.zeros(1, np.float32)), ops.shape_of(data))
    stacked = ops.concat([ops.unsqueeze(data, axis), ops.unsqueeze(zero, axis)], 2)
    model = ov.Model([ops.reduce_max(stacked, axis, False)], [data])
    feeds = {"data": np.random.default_rng(2).standard_normal([1, 2704]).astype(np.float32)}
    result = converted_matches_openvino(model, tmp_path, feeds, rtol=0, atol=0)
    assert result.rewrites.counts().get(NAME) == 1
    assert [n.op_type for n in result.model.graph.node] == ["Max"]
