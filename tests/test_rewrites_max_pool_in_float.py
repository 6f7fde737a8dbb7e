"""`max-pool-in-float`: an 8-bit MaxPool that only ConvIntegers read runs in float, the
quantization after it; bit for bit, and onnxruntime keeps it in float."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.ir.int8_coverage import optimized_graph
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.max_pool_in_float import MaxPoolInFloat
from tests.helpers import MAX_RUNTIME_IR_VERSION, assert_well_formed

NAME = MaxPoolInFloat.name
MODELS = Path(__file__).resolve().parents[1] / "models" / "int8"


def _model(
    source="quantize",
    reader="float",
    scale=0.05,
    zero=7,
    dtype=np.uint8,
    pool=None,
    second_scale=None,
    shape=(1, 4, 8, 8),
):
    """x -> [Mul 0.5 -> QuantizeLinear | two QuantizeLinears -> Concat] -> MaxPool -> DQ ->
    Conv (int8 weights) -> y; ``reader="quantized"`` adds a QuantizeLinear after the Conv
    (a QLinearConv), ``second_scale`` a second reader dequantizing with another scale."""
    pool = pool or {"kernel_shape": [2, 2], "strides": [2, 2]}
    channels = shape[1] * (2 if source == "concat" else 1)
    rng = np.random.default_rng(0)
    values = {
        "half": np.float32(0.5),
        "s": np.float32(scale),
        "z": np.asarray(zero, dtype),
        "w_q": rng.integers(-127, 128, [3, channels, 1, 1]).astype(np.int8),
        "w_s": np.full(3, 0.01, np.float32),
        "w_z": np.zeros(3, np.int8),
    }
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"])]
    if source == "quantize":
        nodes.append(helper.make_node("QuantizeLinear", ["h", "s", "z"], ["q"]))
    else:
        nodes += [
            helper.make_node("QuantizeLinear", ["h", "s", "z"], ["qa"]),
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["qb"]),
            helper.make_node("Concat", ["qa", "qb"], ["q"], axis=1),
        ]
    nodes += [
        helper.make_node("MaxPool", ["q"], ["p"], name="pool", **pool),
        helper.make_node("DequantizeLinear", ["p", "s", "z"], ["d"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=0),
        helper.make_node("Conv", ["d", "w"], ["c"]),
    ]
    if reader == "quantized":
        nodes += [
            helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
            helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if second_scale is not None:
        values["s2"] = np.float32(second_scale)
        nodes.append(helper.make_node("DequantizeLinear", ["p", "s2", "z"], ["y2"]))
        outputs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        outputs,
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def _feeds(shape=(1, 4, 8, 8), seed=0):
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * 6).astype(np.float32)}


def _rewritten(model):
    before = onnx.ModelProto()
    before.CopyFrom(model)
    report = apply_rewrites(model, (MaxPoolInFloat(),))
    assert_well_formed(model)
    return report, before


@pytest.mark.parametrize(
    ("source", "detail"),
    [("quantize", "pooled before its quantization"), ("concat", "pooled on its dequantized input")],
)
def test_a_pool_read_by_float_layers_runs_in_float_with_the_same_bits(source, detail):
    model = _model(source)
    report, before = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [(NAME, detail)]
    feeds = _feeds()
    assert (
        run_onnxruntime(model, feeds)["y"].tobytes()
        == run_onnxruntime(before, feeds)["y"].tobytes()
    )
    # onnxruntime keeps the pool in float: no QuantizeLinear or 8-bit tensor feeds it.
    graph = optimized_graph(model)
    producers = {o: n.op_type for n in graph.node for o in n.output}
    pools = [n for n in graph.node if n.op_type == "MaxPool"]
    assert pools
    for pool in pools:
        assert producers.get(pool.input[0]) not in ("QuantizeLinear", "Concat")


def test_a_pool_next_to_a_qlinearconv_stays_on_the_integers():
    report, _ = _rewritten(_model(reader="quantized"))
    assert not report.fired
    assert [d.reason for d in report.declined] == [
        "a QLinearConv reads it (onnxruntime pools it in NHWC)"
    ]


def test_a_pool_dequantized_two_ways_is_declined():
    report, _ = _rewritten(_model(second_scale=0.1))
    assert [d.reason for d in report.declined] == ["its readers dequantize it differently"]


def test_a_pool_with_indices_is_declined():
    model = _model()
    pool = next(n for n in model.graph.node if n.op_type == "MaxPool")
    pool.output.append("indices")
    report = apply_rewrites(model, (MaxPoolInFloat(),))
    assert [d.reason for d in report.declined] == ["the MaxPool has an indices output"]


@settings(max_examples=30, deadline=None)
@given(
    source=st.sampled_from(["quantize", "concat"]),
    signed=st.booleans(),
    scale=st.floats(0.001, 0.5),
    zero=st.integers(-20, 20),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    pad=st.integers(0, 1),
    ceil=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_any_pool_keeps_every_bit(source, signed, scale, zero, kernel, stride, pad, ceil, seed):
    dtype = np.int8 if signed else np.uint8
    zero = zero if signed else zero + 20
    pool = {
        "kernel_shape": [kernel, kernel],
        "strides": [stride, stride],
        "pads": [min(pad, kernel - 1)] * 4,
        "ceil_mode": ceil,
    }
    model = _model(source, scale=scale, zero=zero, dtype=dtype, pool=pool, shape=(1, 3, 7, 9))
    report, before = _rewritten(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    feeds = _feeds((1, 3, 7, 9), seed)
    assert (
        run_onnxruntime(model, feeds)["y"].tobytes()
        == run_onnxruntime(before, feeds)["y"].tobytes()
    )


def test_nncf_yolo_tiny_pools_in_float():
    """NNCF's YOLOv4-tiny-like network: its three pools run in float, and the converted model
    still gives OpenVINO's INT8 results (its layers are ConvIntegers: OpenVINO's arithmetic)."""
    ov = pytest.importorskip("openvino")
    xml = MODELS / "yolo_tiny" / "int8.xml"
    result = convert_ir_model(xml)
    assert result.rewrites.counts().get(NAME) == 3
    graph = optimized_graph(result.model)
    producers = {o: n.op_type for n in graph.node for o in n.output}
    for pool in (n for n in graph.node if n.op_type == "MaxPool"):
        assert producers.get(pool.input[0]) not in ("QuantizeLinear", "Concat")
    rng = np.random.default_rng(0)
    feeds = {"image": (rng.integers(0, 256, [1, 3, 128, 128]) / 64.0).astype(np.float32)}
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = compiled(feeds)
    ours = run_onnxruntime(result.model, feeds)
    for port, output in zip(compiled.outputs, result.model.graph.output, strict=True):
        np.testing.assert_allclose(ours[output.name], expected[port], atol=1e-4, rtol=1e-4)


def _float_pool_model(reader: str = "Relu") -> onnx.ModelProto:
    """x -> Q -> DQ -> MaxPool (float) -> ``reader``: BlazePalm's pool before its channel
    Pad and residual Add, read in float."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("MaxPool", ["d"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    if reader == "QuantizeLinear":
        nodes += [
            helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
            helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node(reader, ["p"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.float32(0.05), "s"),
            numpy_helper.from_array(np.uint8(100), "z"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return onnx.shape_inference.infer_shapes(model)


def test_a_float_pool_on_a_dequantization_read_in_float_stays_in_float():
    """onnxruntime would move the DequantizeLinear after the pool and run its slow 8-bit
    loop; the guard between them keeps the pool on floats, with the same bits."""
    model = _float_pool_model()
    before = optimized_graph(model)
    producers = {o: n.op_type for n in before.node for o in n.output}
    assert [producers[n.input[0]] for n in before.node if n.op_type == "MaxPool"] == [
        "QuantizeLinear"
    ]
    report, original = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [
        (NAME, "its dequantized input kept in float")
    ]
    graph = optimized_graph(model)
    producers = {o: n.op_type for n in graph.node for o in n.output}
    assert [producers[n.input[0]] for n in graph.node if n.op_type == "MaxPool"] == ["Max"]
    feeds = {"x": _feeds((1, 8, 16, 16))["x"]}
    assert (
        run_onnxruntime(model, feeds)["y"].tobytes()
        == run_onnxruntime(original, feeds)["y"].tobytes()
    )


def test_a_float_pool_between_quantizations_is_left_to_onnxruntime():
    """DQ -> MaxPool -> Q is onnxruntime's own 8-bit pool (NHWC next to QLinearConvs)."""
    report, _ = _rewritten(_float_pool_model("QuantizeLinear"))
    assert not report.fired


@pytest.mark.parametrize("reader", ["Conv", "Sigmoid-then-Q"])
def test_a_float_pool_whose_reader_joins_an_integer_group_is_left_to_onnxruntime(reader):
    """A Conv (an integer kernel once the DequantizeLinear moves after the pool) or an op a
    QuantizeLinear reads: the moved DequantizeLinear is what makes their group."""
    model = _float_pool_model("Relu")
    graph = model.graph
    if reader == "Conv":
        graph.initializer.append(
            numpy_helper.from_array(np.full([4, 8, 1, 1], 0.1, np.float32), "w")
        )
        graph.node[-1].CopyFrom(helper.make_node("Conv", ["p", "w"], ["y"]))
    else:
        graph.node[-1].CopyFrom(helper.make_node("Sigmoid", ["p"], ["g"]))
        graph.node.extend(
            [
                helper.make_node("QuantizeLinear", ["g", "s", "z"], ["gq"]),
                helper.make_node("DequantizeLinear", ["gq", "s", "z"], ["y"]),
            ]
        )
    report, _ = _rewritten(model)
    assert not report.fired


def test_with_all_rewrites_a_pool_read_in_float_ends_on_floats():
    """Through `dequantize-after-movement` (the pool on the bytes) and back to float here
    (its DequantizeLinear read by a float op): no 8-bit MaxPool in onnxruntime's graph."""
    model = _float_pool_model("Relu")
    original = onnx.ModelProto()
    original.CopyFrom(model)
    apply_rewrites(model)
    graph = optimized_graph(model)
    producers = {o: n.op_type for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type == "MaxPool":
            assert producers.get(node.input[0]) in (None, "Max"), node.input[0]
    feeds = {"x": _feeds((1, 8, 16, 16))["x"]}
    assert (
        run_onnxruntime(model, feeds)["y"].tobytes()
        == run_onnxruntime(original, feeds)["y"].tobytes()
    )


def test_a_quantization_that_ends_an_integer_group_stays_before_the_pool():
    """ResNet-50 v2's stride-2 shortcut pool of a residual sum: ``DQ + DQ -> Add -> Q`` is
    a QLinearAdd; pooling before that Q would leave the Add in float, so the pool runs on
    the sum dequantized, and the QLinearAdd stays."""
    model = _model()
    graph = model.graph
    mul = next(n for n in graph.node if n.op_type == "Mul")
    # h = DQ(Q(x)) + DQ(Q(x)) in place of h = 0.5 x.
    index = list(graph.node).index(mul)
    graph.node.remove(mul)
    graph.initializer.remove(next(t for t in graph.initializer if t.name == "half"))
    for offset, node in enumerate(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xa"]),
            helper.make_node("DequantizeLinear", ["xa", "s", "z"], ["xd"]),
            helper.make_node("Add", ["xd", "xd"], ["h"]),
        ]
    ):
        graph.node.insert(index + offset, node)
    report, before = _rewritten(model)
    assert [(f.rewrite, f.detail) for f in report.fired] == [
        (NAME, "pooled on its dequantized input")
    ]
    ops = [n.op_type for n in optimized_graph(model).node]
    assert "QLinearAdd" in ops
    feeds = _feeds()
    assert (
        run_onnxruntime(model, feeds)["y"].tobytes()
        == run_onnxruntime(before, feeds)["y"].tobytes()
    )
