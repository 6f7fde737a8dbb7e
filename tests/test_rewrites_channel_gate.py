"""Squeeze-and-excitation blocks kept in onnxruntime's blocked layout: `spatial-mean-as-pool`
(the squeeze as GlobalAveragePool, within rounding) and `channel-gate-in-blocks` (the gate
repeated by a nearest Resize so the product has equal shapes, bit-exact). Each fires only
where both sides are blocked, and onnxruntime's optimized graph then has no reorder in the
block."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites._blocked_layout import is_blocked
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites.channel_gate_in_blocks import ChannelGateInBlocks
from b2s_onnx.rewrites.spatial_mean_as_pool import SpatialMeanAsPool
from tests.helpers import converted_matches_openvino, float_model

GATE, POOL = ChannelGateInBlocks.name, SpatialMeanAsPool.name
INPUT = [1, 3, 12, 10]


def _se_block(
    *,
    data_act: str = "hswish",
    gate_act: str = "HardSigmoid",
    keepdims: int = 1,
    reshape: bool = True,
    gate: str = "computed",
    data: str = "conv",
    axes: tuple[int, ...] = (2, 3),
    opset: int = 18,
) -> onnx.ModelProto:
    """x -> Conv 3->32 (+ bias Add) -> ``data_act`` = t; the gate from t's spatial mean
    through Conv 32->8, Relu, Conv 8->32, ``gate_act``; y = Conv 32->16 (t * gate)."""
    rng = np.random.default_rng(3)
    constants = {
        "w0": rng.standard_normal([32, 3, 3, 3]).astype(np.float32) * 0.3,
        "b0": rng.standard_normal([1, 32, 1, 1]).astype(np.float32),
        "w1": rng.standard_normal([8, 32, 1, 1]).astype(np.float32) * 0.3,
        "w2": rng.standard_normal([32, 8, 1, 1]).astype(np.float32) * 0.3,
        "w3": rng.standard_normal([16, 32, 1, 1]).astype(np.float32) * 0.3,
        "axes": np.asarray(axes, np.int64),
        "squeezed": np.asarray([1, 32, 1, 1], np.int64),
        "k": rng.uniform(0.5, 1.5, [1, 32, 1, 1]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c0", "b0"], ["a0"]),
    ]
    if data_act == "hswish":
        nodes += [
            helper.make_node("HardSigmoid", ["a0"], ["hs"], alpha=1 / 6, beta=0.5),
            helper.make_node("Mul", ["a0", "hs"], ["t"]),
        ]
    else:
        nodes.append(helper.make_node(data_act, ["a0"], ["t"]))
    data_name = "t"
    if data == "input":  # the product reads the graph input, which is never blocked
        nodes.append(helper.make_node("Identity", ["x"], ["x_seen"]))
        data_name = "x_seen"
        constants["w1"] = constants["w1"][:, :3]
        constants["w2"] = constants["w2"][:3]
        constants["w3"] = constants["w3"][:, :3]
    mean_inputs = [data_name, "axes"] if opset >= 18 else [data_name]
    mean_attrs = {"keepdims": keepdims} if opset >= 18 else {"keepdims": keepdims, "axes": axes}
    nodes.append(helper.make_node("ReduceMean", mean_inputs, ["m"], **mean_attrs))
    squeezed = "m"
    if not keepdims and reshape:
        nodes.append(helper.make_node("Reshape", ["m", "squeezed"], ["m4"]))
        squeezed = "m4"
    nodes += [
        helper.make_node("Conv", [squeezed, "w1"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["s2"]),
    ]
    if gate_act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["s2"], ["g"], alpha=1 / 6, beta=0.5))
    else:
        nodes.append(helper.make_node(gate_act, ["s2"], ["g"]))
    gate_name = {"computed": "g", "constant": "k"}[gate]
    nodes += [
        helper.make_node("Mul", [data_name, gate_name], ["gated"], name="excite"),
        helper.make_node("Conv", ["gated", "w3"], ["y"]),
    ]
    return float_model(nodes, constants, INPUT, opset)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal(INPUT).astype(np.float32) * 3}


def _rewritten(model: onnx.ModelProto, rewrites=None):
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten) if rewrites is None else apply_rewrites(rewritten, rewrites)
    onnx.checker.check_model(rewritten, full_check=True)
    return report, rewritten


def _optimized(model: onnx.ModelProto, tmp_path) -> onnx.ModelProto:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(tmp_path / "optimized.onnx")


@pytest.mark.parametrize(
    ("data_act", "gate_act", "keepdims"),
    [("hswish", "HardSigmoid", 1), ("Relu", "Sigmoid", 1), ("hswish", "Sigmoid", 0)],
    ids=["mobilenet-v3", "relu-sigmoid", "keras-keepdims-0"],
)
def test_a_squeeze_excite_block_stays_blocked_within_rounding(
    tmp_path, data_act, gate_act, keepdims
):
    model = _se_block(data_act=data_act, gate_act=gate_act, keepdims=keepdims)
    report, rewritten = _rewritten(model)
    counts = report.counts()
    assert counts.get(POOL) == 1, counts
    assert counts.get(GATE) == 1, counts
    ops = [n.op_type for n in rewritten.graph.node]
    assert "ReduceMean" not in ops
    assert "GlobalAveragePool" in ops
    assert "Resize" in ops
    if not keepdims:
        assert "Reshape" not in ops  # the pool writes the [1, C, 1, 1] the Reshape made
    feeds = _feeds()
    before, after = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    optimized = _optimized(rewritten, tmp_path)
    if not any(n.domain == "com.microsoft.nchwc" for n in optimized.graph.node):
        pytest.skip("this CPU's onnxruntime has no blocked layout")
    produced = {out: n for n in optimized.graph.node for out in n.output}
    (product,) = [n for n in optimized.graph.node if n.op_type == "Mul"]
    assert all(produced[i].domain == "com.microsoft.nchwc" for i in product.input)
    assert {produced[i].op_type for i in product.input} == {"Conv", "Upsample"}
    (pool,) = [n for n in optimized.graph.node if n.op_type == "GlobalAveragePool"]
    assert pool.domain == "com.microsoft.nchwc"
    # Before: the full-size tensor went out of the blocked layout for the mean and the Mul.
    original = _optimized(model, tmp_path)
    kinds = collections.Counter(n.op_type for n in original.graph.node)
    assert kinds["ReorderOutput"] + kinds["ReorderInput"] >= 3, kinds


def test_the_gate_alone_keeps_every_bit():
    model = _se_block()
    report, rewritten = _rewritten(model, (ChannelGateInBlocks(),))
    assert report.counts() == {GATE: 1}
    feeds = _feeds()
    assert (
        run_onnxruntime(model, feeds)["y"].tobytes()
        == run_onnxruntime(rewritten, feeds)["y"].tobytes()
    )


def test_a_mean_without_keepdims_and_without_its_reshape_is_pool_then_flatten():
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r", "axes"], ["y"], keepdims=0),
    ]
    constants = {
        "w": rng.standard_normal([16, 3, 1, 1]).astype(np.float32),
        "axes": np.asarray([-1, -2], np.int64),
    }
    model = float_model(nodes, constants, INPUT)
    model.graph.output[0].CopyFrom(
        helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16])
    )
    report, rewritten = _rewritten(model, (SpatialMeanAsPool(),))
    assert report.counts() == {POOL: 1}
    assert [n.op_type for n in rewritten.graph.node][-2:] == ["GlobalAveragePool", "Reshape"]
    feeds = _feeds()
    after = run_onnxruntime(rewritten, feeds)["y"]
    assert after.shape == (1, 16)
    np.testing.assert_allclose(after, run_onnxruntime(model, feeds)["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "fired"),
    [
        ({"gate": "constant"}, {POOL: 1}),  # a constant scale: scale-shift-as-batchnorm's
        ({"data": "input"}, {}),  # the graph input is never blocked
        ({"gate_act": "Exp"}, {POOL: 1}),  # the gate leaves the blocked layout
        ({"axes": (1, 2)}, {}),  # not the spatial axes: no pool, and no [1, C, 1, 1] gate
    ],
    ids=["constant-gate", "unblocked-data", "unblocked-gate", "other-axes"],
)
def test_blocks_that_cannot_stay_blocked_are_left_alone(kwargs, fired):
    model = _se_block(**kwargs)
    report, _ = _rewritten(model, (SpatialMeanAsPool(), ChannelGateInBlocks()))
    assert report.counts() == fired


def test_the_gate_before_opset_13_is_declined_with_the_reason():
    report, rewritten = _rewritten(_se_block(opset=12), (ChannelGateInBlocks(),))
    assert [d.reason for d in report.declined] == ["Resize without roi needs opset 13"]
    assert "Resize" not in [n.op_type for n in rewritten.graph.node]


def test_activations_onnxruntime_folds_into_a_conv_keep_the_layout():
    index = GraphIndex(_se_block())
    assert is_blocked(index, "hs")  # HSwish, folded as one activation
    assert is_blocked(index, "t")
    assert is_blocked(index, "g")  # HardSigmoid, the Conv's only reader
    model = _se_block()
    model.graph.output.append(helper.make_tensor_value_info("a0", onnx.TensorProto.FLOAT, None))
    assert not is_blocked(GraphIndex(model), "hs")  # a third reader: not folded


def test_a_converted_squeeze_excite_block_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    rng = np.random.default_rng(9)

    def conv(x, cin, cout, k=1):
        weights = ops.constant(rng.standard_normal([cout, cin, k, k]).astype(np.float32) * 0.3)
        return ops.convolution(x, weights, [1, 1], [k // 2] * 2, [k // 2] * 2, [1, 1])

    data = ops.parameter([1, 3, 20, 20], np.float32, name="image")
    features = ops.hswish(conv(data, 3, 32, 3))
    squeezed = ops.reduce_mean(features, ops.constant(np.asarray([2, 3], np.int64)), True)
    gate = ops.hsigmoid(conv(ops.relu(conv(squeezed, 32, 8)), 8, 32))
    out = conv(ops.multiply(features, gate), 32, 16)
    feeds = {"image": rng.standard_normal([1, 3, 20, 20]).astype(np.float32)}
    model = ov.Model([out], [data])
    result = converted_matches_openvino(model, tmp_path, feeds, rtol=1e-4, atol=1e-4)
    counts = result.rewrites.counts()
    assert counts.get(POOL) == 1, counts
    assert counts.get(GATE) == 1, counts


def _quantized_mean(keepdims: int = 1, reader: str = "QuantizeLinear", per_axis: bool = False):
    """QLinearConv -> DequantizeLinear -> ReduceMean over H, W -> ``reader``: an INT8 IR's
    squeeze-and-excitation average between quantized layers."""
    rng = np.random.default_rng(4)
    scale = np.full([16], 0.05, np.float32) if per_axis else np.float32(0.05)
    zero = np.zeros([16], np.uint8) if per_axis else np.uint8(0)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1),
        helper.make_node("ReduceMean", ["d", "axes"], ["m"], keepdims=keepdims),
    ]
    if reader == "QuantizeLinear":
        nodes += [
            helper.make_node("QuantizeLinear", ["m", "ms", "mz"], ["mq"]),
            helper.make_node("DequantizeLinear", ["mq", "ms", "mz"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node(reader, ["m"], ["y"]))
    constants = {
        "xs": np.float32(0.03),
        "xz": np.uint8(128),
        "wq": rng.integers(-60, 60, [16, 3, 1, 1]).astype(np.int8),
        "ws": np.full([16], 0.01, np.float32),
        "wz": np.zeros([16], np.int8),
        "s": scale,
        "z": zero,
        "axes": np.asarray([2, 3], np.int64),
        "ms": np.float32(0.02),
        "mz": np.uint8(0),
    }
    model = float_model(nodes, constants, INPUT)
    rank = 4 if keepdims else 2
    output = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None] * rank)
    model.graph.output[0].CopyFrom(output)
    return model


def test_a_quantized_mean_becomes_onnxruntimes_integer_pool(tmp_path):
    """DQ -> ReduceMean -> Q: the ReduceMean stays float (and runs over NHWC data between
    QLinearConvs); as GlobalAveragePool onnxruntime fuses it into QLinearGlobalAveragePool,
    whose integer mean moves a value by at most one level."""
    model = _quantized_mean()
    report, rewritten = _rewritten(model, (SpatialMeanAsPool(),))
    assert report.counts() == {POOL: 1}
    assert "ReduceMean" not in [n.op_type for n in rewritten.graph.node]
    fused = collections.Counter(n.op_type for n in _optimized(rewritten, tmp_path).graph.node)
    assert fused["QLinearGlobalAveragePool"] == 1
    feeds = {"x": (np.random.default_rng(5).random(INPUT) * 7).astype(np.float32)}
    before, after = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
    assert np.max(np.abs(after - before)) <= 0.02 * 1.001


@pytest.mark.parametrize(
    "case",
    [
        {"reader": "Sigmoid"},  # read in float: no integer pool forms
        {"keepdims": 0, "reader": "Sigmoid"},
        {"per_axis": True},  # per-channel bytes: no integer kernel takes them
    ],
    ids=["read-in-float", "keepdims-0", "per-axis"],
)
def test_a_quantized_mean_no_integer_pool_takes_is_left_alone(case):
    report, _ = _rewritten(_quantized_mean(**case), (SpatialMeanAsPool(),))
    assert report.counts() == {}
