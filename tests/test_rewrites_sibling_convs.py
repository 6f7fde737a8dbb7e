"""`sibling-convs`: float Convs on the same tensor stacked into one where together they fill
fewer channel blocks of onnxruntime's blocked layout than apart."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.sibling_convs import BLOCK, SiblingConvs
from tests.helpers import converted_matches_openvino

NAME = SiblingConvs.name
INPUT = [1, 24, 10, 9]


def _heads(outputs, kernel=3, *, no_bias=(), pads=None, readers=None, seed=0) -> onnx.ModelProto:
    """Convs on one input "x", head ``i`` with ``outputs[i]`` channels and a bias unless
    ``i`` is in ``no_bias``; each output is read by ``readers[i]`` (an op type) or is a
    graph output itself."""
    rng = np.random.default_rng(seed)
    nodes, values, results = [], {}, []
    for i, count in enumerate(outputs):
        values[f"w{i}"] = rng.standard_normal([count, INPUT[1], kernel, kernel]).astype(np.float32)
        inputs = ["x", f"w{i}"]
        if i not in no_bias:
            values[f"b{i}"] = rng.standard_normal(count).astype(np.float32)
            inputs.append(f"b{i}")
        pad = (pads or [kernel // 2] * len(outputs))[i]
        nodes.append(helper.make_node("Conv", inputs, [f"c{i}"], name=f"head{i}", pads=[pad] * 4))
        op = (readers or {}).get(i)
        if op:
            nodes.append(helper.make_node(op, [f"c{i}"], [f"y{i}"]))
            results.append(f"y{i}")
        else:
            results.append(f"c{i}")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * 4) for name in results],
        [numpy_helper.from_array(v, k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _feeds(seed=1):
    return {"x": np.random.default_rng(seed).standard_normal(INPUT).astype(np.float32)}


def _stacks_within_rounding(model: onnx.ModelProto) -> dict:
    feeds = _feeds()
    before = run_onnxruntime(model, feeds)
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    after = run_onnxruntime(model, feeds)
    for name, value in before.items():
        bound = 1e-5 * max(1.0, float(np.abs(value).max()))
        np.testing.assert_allclose(after[name], value, rtol=0, atol=bound, err_msg=name)
    return report.counts()


@pytest.mark.parametrize(
    "outputs",
    [(36, 18), (1, 1), (8, 8, 8), (12, 6, 4, 2)],
    ids=["ssd-head", "one-channel-maps", "three-8s", "four"],
)
def test_layers_sharing_channel_blocks_stack_into_one_conv(outputs):
    model = _heads(outputs, no_bias={1})
    counts = _stacks_within_rounding(model)
    assert counts.get(NAME) == 1, counts
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 1
    assert ops.count("Split") == 1


@pytest.mark.parametrize(
    ("outputs", "kernel", "why"),
    [
        ((32, 32), 3, "whole blocks apart"),
        ((BLOCK, 1), 3, "no block saved"),
        ((36, 18), 1, "a 1x1 kernel"),
    ],
)
def test_layers_that_would_not_gain_are_left_alone(outputs, kernel, why):
    model = _heads(outputs, kernel)
    assert NAME not in apply_rewrites(model).counts(), why


def test_a_layer_with_a_folded_activation_stays_apart():
    model = _heads((36, 18, 1), readers={0: "Relu"})
    counts = _stacks_within_rounding(model)
    assert counts.get(NAME) == 1
    stacked = next(n for n in model.graph.node if n.op_type == "Split")
    assert list(stacked.output) == ["c1", "c2"]
    assert [n.op_type for n in model.graph.node].count("Conv") == 2


def test_different_padding_is_not_stacked():
    model = _heads((36, 18), pads=[1, 0])
    assert NAME not in apply_rewrites(model).counts()


def test_layers_on_different_inputs_are_not_stacked():
    model = _heads((36, 18))
    conv = model.graph.node[1]
    model.graph.node.insert(1, helper.make_node("Neg", ["x"], ["negated"]))
    conv.input[0] = "negated"
    assert NAME not in apply_rewrites(model).counts()


@settings(max_examples=30, deadline=None)
@given(
    outputs=st.lists(st.integers(1, 40), min_size=2, max_size=4),
    kernel=st.sampled_from([2, 3, 5]),
    seed=st.integers(0, 2**16),
)
def test_stacks_exactly_when_blocks_are_saved_and_keeps_the_outputs(outputs, kernel, seed):
    model = _heads(tuple(outputs), kernel, seed=seed, pads=[0] * len(outputs))
    blocks = sum(-(-c // BLOCK) for c in outputs)
    saved = -(-sum(outputs) // BLOCK) < blocks
    assert (_stacks_within_rounding(model).get(NAME) == 1) == saved


def test_converted_detector_heads_match_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset8 as ops

    rng = np.random.default_rng(5)
    data = ops.parameter([1, 16, 20, 20], np.float32, name="features")
    heads = [
        ops.convolution(
            data,
            ops.constant(rng.standard_normal([count, 16, 3, 3]).astype(np.float32)),
            [1, 1],
            [1, 1],
            [1, 1],
            [1, 1],
        )
        for count in (8, 6)
    ]
    feeds = {"features": rng.standard_normal([1, 16, 20, 20]).astype(np.float32)}
    model = ov.Model(heads, [data])
    result = converted_matches_openvino(model, tmp_path, feeds, rtol=1e-5, atol=1e-4)
    assert result.rewrites.counts().get(NAME) == 1
