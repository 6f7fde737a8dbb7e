"""SpaceToBatch -> MaxPool/AveragePool -> BatchToSpace becomes one dilated pool after an
explicit zero padding where that reads the same elements, and is lowered literally, with
a reason, where the pool's own padding or an unknown shape stands in the way."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.lowering import LoweringOptions, lower_model
from b2s_onnx.parity.runtime import run_onnxruntime


def pooled_model(
    pool: str = "MaxPool",
    *,
    rate: int = 2,
    kernel: int = 3,
    size: int = 9,
    channels: int | str = 3,
    opset: int = 18,
    inner_pads: int = 0,
    stride: int = 1,
    dynamic: bool = False,
    read_indices: bool = False,
) -> onnx.ModelProto:
    """TensorFlow's dilated 'SAME' pooling: the input padded to a multiple of ``rate``."""
    begin = end = (kernel - 1) * rate // 2
    extra = (rate - (size + begin + end) % rate) % rate
    ints = lambda name, v: numpy_helper.from_array(np.asarray(v, np.int64), name)  # noqa: E731
    attrs = {"kernel_shape": [kernel] * 2, "pads": [inner_pads] * 4, "strides": [stride] * 2}
    outputs = ["pooled", "indices"] if read_indices else ["pooled"]
    nodes = [
        helper.make_node(
            "SpaceToBatch", ["x", "block", "pb", "pe"], ["s2b"], domain=DEFAULT_DOMAIN, name="s2b"
        ),
        helper.make_node(pool, ["s2b"], outputs, name="pool", **attrs),
        helper.make_node(
            "BatchToSpace",
            ["pooled", "block", "cb", "ce"],
            ["y"],
            domain=DEFAULT_DOMAIN,
            name="b2s",
        ),
    ]
    graph_outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)]
    if read_indices:
        graph_outputs.append(
            helper.make_tensor_value_info("indices", TensorProto.INT64, [None] * 4)
        )
    spatial = ["H", "W"] if dynamic else [size, size]
    graph = helper.make_graph(
        nodes,
        "pooled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, *spatial])],
        graph_outputs,
        [
            ints("block", [1, 1, rate, rate]),
            ints("pb", [0, 0, begin, begin]),
            ints("pe", [0, 0, end + extra, end + extra]),
            ints("cb", [0, 0, 0, 0]),
            ints("ce", [0, 0, extra, extra]),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DEFAULT_DOMAIN, 1)],
    )
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _run_both(model: onnx.ModelProto, size: int = 9, channels: int = 3):
    fused = lower_model(model)
    literal = lower_model(model, options=LoweringOptions(fuse=False))
    # Mostly negative values: a zero from the padding wins where it takes part.
    x = np.random.default_rng(size).standard_normal([1, channels, size, size]) - 1.5
    feeds = {"x": x.astype(np.float32)}
    return fused, run_onnxruntime(fused.model, feeds)["y"], run_onnxruntime(literal.model, feeds)


CASES = {
    "max pool rate 2": ("MaxPool", {}),
    "max pool rate 3 kernel 2": ("MaxPool", {"rate": 3, "kernel": 2, "size": 10}),
    "average pool opset 18": ("AveragePool", {}),
    "average pool opset 19": ("AveragePool", {"opset": 19}),
    "average pool rate 4": ("AveragePool", {"rate": 4, "size": 11}),
}


@pytest.mark.parametrize(("pool", "params"), CASES.values(), ids=CASES.keys())
def test_dilated_pooling_patterns_fuse_with_the_same_values(pool, params):
    model = pooled_model(pool, **params)
    fused, ours, literal = _run_both(model, params.get("size", 9))
    assert [f.rewrite for f in fused.rewrites.fired] == ["atrous-convolution"]
    ops = [n.op_type for n in fused.model.graph.node]
    assert "Reshape" not in ops
    assert "Slice" not in ops
    onnx.checker.check_model(fused.model, full_check=True)
    ort.InferenceSession(fused.model.SerializeToString())
    if pool == "MaxPool":
        assert fused.rewrites.fired[0].exact is True
        assert ours.tobytes() == literal["y"].tobytes()
    else:
        assert fused.rewrites.fired[0].exact is False
        np.testing.assert_allclose(ours, literal["y"], rtol=1e-6, atol=1e-6)


DECLINES = {
    "pool pads its phases": ("MaxPool", {"inner_pads": 1}, "pads its phases itself"),
    "strided pool": ("AveragePool", {"stride": 2, "size": 12}, "is strided"),
    "indices are read": ("MaxPool", {"read_indices": True}, "returns indices"),
    "max pool, unknown height": ("MaxPool", {"dynamic": True}, "static shape"),
    "average pool, unknown channels": ("AveragePool", {"channels": "C"}, "channel count"),
}


@pytest.mark.parametrize(("pool", "params", "reason"), DECLINES.values(), ids=DECLINES.keys())
def test_pooling_patterns_that_are_not_a_dilated_pool_are_lowered_literally(pool, params, reason):
    result = lower_model(pooled_model(pool, **params))
    assert not result.rewrites.fired
    assert reason in result.rewrites.declined[0].reason
    assert "Reshape" in [n.op_type for n in result.model.graph.node]


def test_onnxruntime_still_folds_a_zero_pad_into_max_pool_as_minus_infinity():
    """Why the fused MaxPool concatenates its zeros instead of padding: if onnxruntime
    stops folding, a plain Pad would do and this test says so."""
    pad = helper.make_node("Pad", ["x", "pads"], ["padded"])
    pool = helper.make_node("MaxPool", ["padded"], ["y"], kernel_shape=[3])
    graph = helper.make_graph(
        [pad, pool],
        "pad_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
        [numpy_helper.from_array(np.asarray([0, 0, 2, 0, 0, 2], np.int64), "pads")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    x = np.full([1, 1, 4], -1.0, np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert y[0, 0, 0] == -1.0  # zeros padded in front would make it 0


@given(
    pool=st.sampled_from(["MaxPool", "AveragePool"]),
    rate=st.integers(2, 4),
    kernel=st.integers(1, 3),
    size=st.integers(1, 12),
    opset=st.sampled_from([18, 19]),
)
def test_any_fused_dilated_pool_computes_what_the_literal_pattern_does(
    pool, rate, kernel, size, opset
):
    model = pooled_model(pool, rate=rate, kernel=kernel, size=size, opset=opset)
    # Each phase holds ceil(size / rate) elements, padded by ~kernel: the pattern's output
    # is empty where the phase window is longer than the phase.
    phase = -(-(size + (kernel - 1) * rate // 2 * 2) // rate)
    if phase < kernel:
        result = lower_model(model)
        assert "output is empty" in result.rewrites.declined[0].reason
        return
    fused, ours, literal = _run_both(model, size)
    assert [f.rewrite for f in fused.rewrites.fired] == ["atrous-convolution"]
    if pool == "MaxPool":
        assert ours.tobytes() == literal["y"].tobytes()
    else:
        np.testing.assert_allclose(ours, literal["y"], rtol=1e-6, atol=1e-6)
