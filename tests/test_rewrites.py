"""Rewrites into onnxruntime's fast forms: each fires where it should (and says why not
elsewhere), and keeps the outputs bit-exact or within the float rounding it documents."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from tests.helpers import float_model, spelled_prelu_nodes

SHAPE = [2, 3, 5, 4]


def _model(nodes, initializers=(), shape=SHAPE, opset=18) -> onnx.ModelProto:
    return float_model(nodes, initializers, shape, opset)


def _inputs(shape=SHAPE) -> dict[str, np.ndarray]:
    values = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    values.reshape(-1)[:4] = [0.0, -0.0, np.inf, -np.inf]
    return {"x": values}


def _rewrite(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None):
    """(outputs before, outputs after, report, rewritten model), checking validity."""
    if feeds is None:
        feeds = _inputs([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
    before = run_onnxruntime(model, feeds)["y"]
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    after = run_onnxruntime(rewritten, feeds)["y"]
    return before, after, report, rewritten


def _ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    # -0.0 and +0.0 may trade places only where a product is a zero; compare values there.
    assert np.array_equal(a, b, equal_nan=True)
    nonzero = a != 0
    assert a[nonzero].tobytes() == b[nonzero].tobytes()


@pytest.mark.parametrize("slope_shape", [[1], [3, 1, 1], [1, 1, 1, 1]])
def test_prelu_with_one_slope_becomes_leaky_relu_with_the_same_bits(slope_shape):
    slope = np.full(slope_shape, 0.125, np.float32)
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"], name="p")], [("s", slope)])
    before, after, report, rewritten = _rewrite(model)
    assert _ops(rewritten) == ["LeakyRelu"]
    assert [f.rewrite for f in report.fired] == ["prelu-as-leaky-relu"]
    assert not rewritten.graph.initializer, "the slope constant is dropped with its reader"
    _same_bits(before, after)


def test_prelu_per_channel_slopes_in_unit_range_become_max_with_the_same_bits():
    slope = np.asarray([0.01, 0.5, 1.0], np.float32).reshape(3, 1, 1)
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"], name="p")], [("s", slope)])
    before, after, _, rewritten = _rewrite(model)
    assert _ops(rewritten) == ["Mul", "Max"]
    _same_bits(before, after)


@pytest.mark.parametrize(
    "slope",
    [
        np.asarray([0.5, 2.0, 0.1], np.float32).reshape(3, 1, 1),
        np.asarray([0.5, 0.0, 0.1], np.float32).reshape(3, 1, 1),
        np.asarray([-1.3, 0.7, 1.2], np.float32).reshape(3, 1, 1),
        np.asarray([-0.2, 0.3, 0.4, -0.5], np.float32),
    ],
)
def test_prelu_with_other_slopes_becomes_where_with_every_bit(slope):
    """Learned slopes (negative, zero, above 1) on any layout: PRelu's own definition,
    signed zeros, infinities and NaNs included, where onnxruntime's PRelu is ~8x slower."""
    shape = [32, 3, 128, 4]  # 49152 elements, past WHERE_FORM_MIN_SIZE
    model = _model(
        [helper.make_node("PRelu", ["x", "s"], ["y"], name="p")], [("s", slope)], shape=shape
    )
    feeds = _inputs(shape)
    feeds["x"].reshape(-1)[4:6] = [np.nan, -np.nan]
    before, after, report, rewritten = _rewrite(model, feeds)
    assert _ops(rewritten) == ["Less", "Where", "Mul"]
    assert report.fired[0].detail == "x * Where(x < 0, slope, 1)"
    assert report.fired[0].exact
    assert before.tobytes() == after.tobytes()


def test_prelu_on_a_small_tensor_stays_a_prelu():
    slope = np.asarray([-0.5, 2.0, 0.1], np.float32).reshape(3, 1, 1)
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"], name="p")], [("s", slope)])
    _, _, report, rewritten = _rewrite(model)
    assert _ops(rewritten) == ["PRelu"]
    assert "120 elements: below 32768" in report.declined[0].reason


@pytest.mark.parametrize(
    ("slope", "reason"),
    [
        (np.asarray([0.5, np.nan, 0.1], np.float32).reshape(3, 1, 1), "non-finite"),
        (np.asarray([0.5, np.inf, 0.1], np.float32).reshape(3, 1, 1), "non-finite"),
    ],
)
def test_prelu_is_kept_where_no_exact_fast_form_exists(slope, reason):
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"], name="p")], [("s", slope)])
    _, _, report, rewritten = _rewrite(model)
    assert _ops(rewritten) == ["PRelu"]
    assert not report.fired
    assert reason in report.declined[0].reason


def test_prelu_with_a_computed_slope_is_declined_with_the_reason():
    nodes = [
        helper.make_node("Abs", ["x"], ["s"]),
        helper.make_node("PRelu", ["x", "s"], ["y"], name="p"),
    ]
    _, _, report, rewritten = _rewrite(_model(nodes))
    assert _ops(rewritten) == ["Abs", "PRelu"]
    assert report.declined[0].reason == "the slope is not a constant"


def _spelled(scale: np.ndarray, extra_reader: bool = False):
    nodes = spelled_prelu_nodes("x", "sum", "a")
    if extra_reader:
        nodes.append(helper.make_node("Add", ["sum", "neg"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    return _model(nodes, [("c", scale)])


def test_prelu_spelled_out_with_one_slope_becomes_leaky_relu():
    before, after, report, rewritten = _rewrite(_spelled(np.asarray(-0.2, np.float32)))
    assert _ops(rewritten) == ["LeakyRelu"]
    assert report.absorbed == {"pos": "y", "negx": "y", "neg": "y", "scaled": "y"}
    _same_bits(before, after)


def test_prelu_spelled_out_per_channel_becomes_max():
    scale = -np.asarray([0.1, 0.2, 0.3], np.float32).reshape(1, 3, 1, 1)
    before, after, _, rewritten = _rewrite(_spelled(scale))
    assert _ops(rewritten) == ["Mul", "Max"]
    _same_bits(before, after)


def test_prelu_spelled_out_is_left_alone_when_a_part_is_read_elsewhere():
    _, _, report, rewritten = _rewrite(_spelled(np.asarray(-0.2, np.float32), extra_reader=True))
    assert "LeakyRelu" not in _ops(rewritten)
    assert report.declined[0].reason == "a part of the pattern is read elsewhere"


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("axis", "opset"), [(1, 18), (-3, 18), (1, 13), (0, 17)])
def test_softmax_over_an_inner_axis_becomes_reductions_within_rounding(op_type, axis, opset):
    model = _model([helper.make_node(op_type, ["x"], ["y"], name="s", axis=axis)], opset=opset)
    before, after, report, rewritten = _rewrite(model)
    assert "Softmax" not in "".join(_ops(rewritten))
    assert report.fired[0].rewrite == "softmax-inner-axis"
    finite = np.isfinite(before)
    np.testing.assert_allclose(after[finite], before[finite], rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.isnan(before), np.isnan(after))


@pytest.mark.parametrize(("axis", "shape"), [(-1, SHAPE), (3, SHAPE), (1, [2, 3, 1, 1])])
def test_softmax_along_the_contiguous_axis_is_kept(axis, shape):
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], shape=shape)
    _, _, report, rewritten = _rewrite(model)
    assert _ops(rewritten) == ["Softmax"]
    assert not report.fired
    assert not report.declined


def test_softmax_before_opset_13_is_another_computation_and_is_kept():
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], opset=11)
    _, _, report, rewritten = _rewrite(model)
    assert _ops(rewritten) == ["Softmax"]
    assert not report.fired


def _conv_transpose(bias: np.ndarray, group: int = 1):
    weights = np.random.default_rng(1).standard_normal([3, 4 // group, 2, 2]).astype(np.float32)
    nodes = [
        helper.make_node(
            "ConvTranspose", ["x", "w"], ["t"], name="ct", strides=[2, 2], group=group
        ),
        helper.make_node("Add", ["b", "t"], ["y"]),
    ]
    return _model(nodes, [("w", weights), ("b", bias)], shape=[1, 3, 5, 4])


@pytest.mark.parametrize(
    "bias_shape",
    [[4, 1, 1], [1, 4, 1, 1], [1], [1, 1, 1, 1]],
    ids=["C11", "1C11", "scalar", "1111"],
)
def test_conv_transpose_absorbs_a_per_channel_add_with_the_same_bits(bias_shape):
    bias = np.random.default_rng(2).standard_normal(bias_shape).astype(np.float32)
    before, after, report, rewritten = _rewrite(_conv_transpose(bias))
    assert _ops(rewritten) == ["ConvTranspose"]
    assert len(rewritten.graph.node[0].input) == 3
    assert report.absorbed == {"t": "y"}
    _same_bits(before, after)


def test_conv_transpose_keeps_an_add_that_is_not_per_channel():
    bias = np.ones([1, 1, 10, 1], np.float32)
    _, _, report, rewritten = _rewrite(_conv_transpose(bias))
    assert _ops(rewritten) == ["ConvTranspose", "Add"]
    assert "is not per-channel" in report.declined[0].reason


def test_converted_ir_gets_the_fast_forms_and_still_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset8 as ops

    import b2s_onnx

    data = ops.parameter([1, 3, 6, 5], np.float32, name="data")
    conv = ops.convolution(
        data,
        ops.constant(np.random.default_rng(3).standard_normal([4, 3, 3, 3]).astype(np.float32)),
        [1, 1],
        [1, 1],
        [1, 1],
        [1, 1],
    )
    act = ops.prelu(conv, ops.constant(np.asarray([0.2], np.float32)))
    out = ops.softmax(act, 1)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([out], [data]), xml, compress_to_fp16=False)

    fused = b2s_onnx.convert_ir(xml)
    plain = b2s_onnx.convert_ir(xml, fuse=False)
    assert {"LeakyRelu", "ReduceMax"} <= set(_ops(fused))
    assert {"PRelu", "Softmax"} <= set(_ops(plain))
    feeds = {"data": np.random.default_rng(4).standard_normal([1, 3, 6, 5]).astype(np.float32)}
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = np.asarray(compiled(feeds)[compiled.outputs[0]])
    for model in (fused, plain):
        (actual,) = run_onnxruntime(model, feeds).values()
        np.testing.assert_allclose(actual, expected, atol=1e-6, rtol=1e-5)


def test_constant_chains_fold_so_a_reshaped_slope_becomes_a_fast_form():
    nodes = [
        helper.make_node("Reshape", ["s", "shape"], ["s3"], name="r"),
        helper.make_node("PRelu", ["x", "s3"], ["y"], name="p"),
    ]
    slope = np.asarray([0.1, 0.2, 0.3], np.float32)
    model = _model(nodes, [("s", slope), ("shape", np.asarray([3, 1, 1], np.int64))])
    before, after, report, rewritten = _rewrite(model)
    assert [f.rewrite for f in report.fired] == ["fold-constants", "prelu-as-leaky-relu"]
    assert _ops(rewritten) == ["Mul", "Max"]
    assert {t.name for t in rewritten.graph.initializer} == {"p/slope"}
    _same_bits(before, after)


def test_folding_leaves_graph_outputs_and_run_time_values_alone():
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    _, _, report, rewritten = _rewrite(_model(nodes))
    assert _ops(rewritten) == ["Shape", "Reshape"]
    assert not report.fired


def _mish_float64(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    return wide * np.tanh(np.logaddexp(0.0, wide))


@pytest.mark.parametrize("spelled", [True, False], ids=["softplus-tanh-mul", "mish-op"])
def test_mish_becomes_exponentials_at_least_as_close_to_the_function(spelled):
    if spelled:
        nodes = [
            helper.make_node("Softplus", ["x"], ["sp"]),
            helper.make_node("Tanh", ["sp"], ["t"]),
            helper.make_node("Mul", ["t", "x"], ["y"], name="m"),
        ]
    else:
        nodes = [helper.make_node("Mish", ["x"], ["y"], name="m")]
    model = _model(nodes)
    feeds = {"x": np.linspace(-120, 120, 2 * 3 * 5 * 4, dtype=np.float32).reshape(SHAPE)}
    feeds["x"].reshape(-1)[:3] = [0.0, -0.0, 1e-30]
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    assert [f.rewrite for f in report.fired] == ["mish-as-exponentials"]
    assert "Softplus" not in _ops(model)
    assert "Mish" not in _ops(model)
    after = run_onnxruntime(model, feeds)["y"]
    exact = _mish_float64(feeds["x"])
    assert np.abs(after - exact).max() <= max(np.abs(before - exact).max(), 1e-6)
    np.testing.assert_allclose(after, before, rtol=2e-6, atol=2e-6)


def test_softplus_standing_alone_becomes_exponentials_with_openvinos_threshold():
    """OpenVINO's SoftPlus-4: ln(1 + e^x) up to 20, x above (exactly), within 2e-6 of the
    function below; infinities and NaN as the function has them."""
    model = _model([helper.make_node("Softplus", ["x"], ["y"], name="sp")], shape=[1, 4, 50, 40])
    x = np.linspace(-120, 120, 8000, dtype=np.float32)
    x[:7] = [0.0, -0.0, np.inf, -np.inf, np.nan, 20.0, 88.9]
    feeds = {"x": x.reshape(1, 4, 50, 40)}
    report = apply_rewrites(model)
    assert [(f.rewrite, f.exact) for f in report.fired] == [("softplus-as-exponential", False)]
    assert "Softplus" not in _ops(model)
    after = run_onnxruntime(model, feeds)["y"].reshape(-1)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = np.where(wide > 20, wide, np.logaddexp(0.0, wide))
    finite = np.isfinite(exact)
    assert np.abs(after[finite] - exact[finite]).max() <= 2e-6
    above = wide > 20
    assert after[above].tobytes() == x[above].tobytes()
    assert after[2] == np.inf
    assert after[3] == 0.0
    assert np.isnan(after[4])


def test_softplus_of_a_mish_is_left_to_the_mish_rewrite():
    nodes = [
        helper.make_node("Softplus", ["x"], ["sp"]),
        helper.make_node("Tanh", ["sp"], ["t"]),
        helper.make_node("Mul", ["t", "x"], ["y"], name="m"),
    ]
    report = apply_rewrites(_model(nodes))
    assert [f.rewrite for f in report.fired] == ["mish-as-exponentials"]


def test_a_tensor_a_subgraph_reads_counts_that_reader():
    """A tensor read by one node and by an If's branch has two readers: a rewrite that asks
    for the only reader gets none, and nothing may rename it."""
    from b2s_onnx.rewrites._index import GraphIndex

    branch = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["n"])],
        "branch",
        [],
        [helper.make_tensor_value_info("n", onnx.TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["t"]),
        helper.make_node("Sigmoid", ["t"], ["s"]),
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Greater", ["m", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["b"], then_branch=branch, else_branch=branch),
        helper.make_node("Add", ["s", "b"], ["y"]),
    ]
    model = _model(nodes, {"zero": np.float32(0)})
    index = GraphIndex(model)
    assert [n.op_type for n in index.consumers["t"]] == ["Sigmoid", "If"]
    assert index.only_consumer("t") is None
    assert not index.can_rename("t")
    assert index.only_consumer("s") is not None
