"""layer-norm-spelled-out: Keras's LayerNormalization as OpenVINO writes it (ReduceMean,
SquaredDifference, Add epsilon, Power -0.5, Multiply gamma, ...) becomes one ONNX
LayerNormalization, within float rounding of OpenVINO's CPU plugin; every arrangement the
kernel cannot compute stays as it was, and says why."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from tests.helpers import float_model

ov = pytest.importorskip("openvino")
ops = pytest.importorskip("openvino.opset13")

pytestmark = pytest.mark.openvino

NAME = "layer-norm-spelled-out"
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
#: Both sides round a normalised value of order 1 (times gamma, plus beta) differently.
TOLERANCE = 1e-5


@dataclass(frozen=True)
class Spelling:
    """One layer norm as a Keras model converted by OpenVINO could spell it."""

    shape: tuple[int, ...] = (1, 10, 16)
    axes: tuple[int, ...] = (-1,)
    #: "keras": x * inv + (-mean * inv + beta); "batchnorm": x * inv + (beta - mean * inv)
    #: (tf.nn.batch_normalization); "divide": (x - mean) / sqrt(var + eps) * gamma + beta.
    form: str = "keras"
    gamma: bool = True
    beta: bool = True
    #: -mean as Negative instead of Multiply by -1 (both occur).
    negative: bool = False
    #: The Transpose to channels-last after a channel-axis norm (ConvNeXt's blocks).
    then_transpose: bool = False
    #: Shape of gamma when it should not be the normalised dims' (broadcast over the rest).
    gamma_shape: tuple[int, ...] | None = None
    #: gamma is a second model input instead of a constant.
    gamma_input: bool = False
    #: sqrt(var) + eps instead of sqrt(var + eps) (the "divide" form).
    epsilon_outside: bool = False
    #: The variance also feeds the output another way.
    variance_read_elsewhere: bool = False
    #: The mean of the squares runs over other axes than the mean.
    variance_axes: tuple[int, ...] | None = None
    #: The norm's output plus x (the norm is still one; the Add stays).
    plus_input: bool = False


def _constant(value) -> object:
    return ops.constant(np.asarray(value, np.float32))


def _spelled(spelling: Spelling, rng: np.random.Generator) -> ov.Model:
    shape = spelling.shape
    rank = len(shape)
    axes = sorted(a % rank for a in spelling.axes)
    param_shape = [shape[a] if a in axes else 1 for a in range(rank)]
    scalar = [1] * rank
    data = ops.parameter(list(shape), np.float32, name="x")
    inputs = [data]
    reduce_axes = ops.constant(np.asarray(axes, np.int64))
    mean = ops.reduce_mean(data, reduce_axes, True)
    variance_axes = reduce_axes
    if spelling.variance_axes is not None:
        variance_axes = ops.constant(np.asarray(spelling.variance_axes, np.int64))
    variance = ops.reduce_mean(ops.squared_difference(data, mean), variance_axes, True)
    epsilon = _constant(np.full(scalar, 1e-3))
    if spelling.gamma_input:
        gamma = ops.parameter(param_shape, np.float32, name="gamma")
        inputs.append(gamma)
    else:
        gamma_shape = spelling.gamma_shape or param_shape
        gamma = _constant(rng.uniform(0.5, 2.0, gamma_shape))
    beta = _constant(rng.standard_normal(param_shape))

    if spelling.form == "divide":
        if spelling.epsilon_outside:
            deviation = ops.add(ops.sqrt(variance), epsilon)
        else:
            deviation = ops.sqrt(ops.add(variance, epsilon))
        out = ops.divide(ops.subtract(data, mean), deviation)
        if spelling.gamma:
            out = ops.multiply(out, gamma)
        if spelling.beta:
            out = ops.add(out, beta)
    else:
        inv = ops.power(ops.add(variance, epsilon), _constant(np.full(scalar, -0.5)))
        if spelling.gamma:
            inv = ops.multiply(inv, gamma)
        if spelling.form == "batchnorm":
            shifted = ops.multiply(mean, inv)
            shifted = ops.subtract(beta, shifted) if spelling.beta else ops.negative(shifted)
        else:
            minus = (
                ops.negative(mean)
                if spelling.negative
                else ops.multiply(mean, _constant(np.full(scalar, -1.0)))
            )
            shifted = ops.multiply(minus, inv)
            if spelling.beta:
                shifted = ops.add(shifted, beta)
        out = ops.add(ops.multiply(data, inv), shifted)
    if spelling.variance_read_elsewhere:
        out = ops.add(out, ops.multiply(variance, _constant(np.full(scalar, 2.0))))
    if spelling.plus_input:
        out = ops.add(out, data)
    if spelling.then_transpose:
        out = ops.transpose(out, ops.constant(np.asarray([0, 2, 3, 1], np.int64)))
    return ov.Model([out], inputs)


def _convert(spelling: Spelling, tmp_path, opset: int = 18, seed: int = 0):
    """(conversion result, onnxruntime's outputs, OpenVINO's outputs) on the same data."""
    rng = np.random.default_rng(seed)
    xml = tmp_path / "layer_norm.xml"
    ov.save_model(_spelled(spelling, rng), xml, compress_to_fp16=False)
    result = convert_ir_model(xml, opset=opset)
    onnx.checker.check_model(result.model, full_check=True)
    feeds = {"x": (rng.standard_normal(spelling.shape) * 3 + 0.5).astype(np.float32)}
    if spelling.gamma_input:
        shape = [d.dim_value for d in result.model.graph.input[1].type.tensor_type.shape.dim]
        feeds["gamma"] = rng.uniform(0.5, 2.0, shape).astype(np.float32)
    compiled = ov.Core().compile_model(xml, "CPU", CONFIG)
    expected = np.asarray(compiled(feeds)[compiled.outputs[0]])
    (actual,) = run_onnxruntime(result.model, feeds).values()
    return result, actual, expected


def _ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def _declined(result) -> list[str]:
    return [d.reason for d in result.rewrites.declined if d.rewrite == NAME]


# -- what it rewrites --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "transposes"),
    [
        (Spelling(), 0),
        (Spelling(shape=(1, 128, 768)), 0),
        (Spelling(shape=(1, 2, 2, 768)), 0),
        (Spelling(negative=True), 0),
        (Spelling(form="batchnorm", shape=(2, 7, 32)), 0),
        (Spelling(form="batchnorm", beta=False), 0),
        (Spelling(form="divide", shape=(2, 5, 24)), 0),
        (Spelling(gamma=False, beta=False), 0),
        (Spelling(shape=(1, 4, 6, 8), axes=(-2, -1)), 0),
        (Spelling(gamma_shape=(16,)), 0),
        (Spelling(plus_input=True), 0),
        (Spelling(shape=(1, 96, 8, 8), axes=(1,), then_transpose=True), 1),
        (Spelling(shape=(1, 64, 4, 4), axes=(1,)), 2),
        (Spelling(shape=(2, 48, 3, 5), axes=(1,), form="batchnorm"), 2),
        (Spelling(shape=(2, 8, 3, 6), axes=(1, 3)), 2),
    ],
    ids=[
        "keras",
        "keras-128x768",
        "keras-2x2x768",
        "negative-mean",
        "tf-batchnorm",
        "tf-batchnorm-no-beta",
        "sqrt-divide",
        "no-gamma-no-beta",
        "two-trailing-axes",
        "gamma-as-vector",
        "output-plus-input",
        "nchw-channels-then-transpose",
        "nchw-channels",
        "nchw-channels-batchnorm",
        "two-separate-axes",
    ],
)
def test_spelled_layer_norm_becomes_one_kernel_within_rounding_of_openvino(
    spelling, transposes, tmp_path
):
    result, actual, expected = _convert(spelling, tmp_path)
    fired = [f for f in result.rewrites.fired if f.rewrite == NAME]
    assert len(fired) == 1, result.rewrites.to_dict()
    assert fired[0].exact is False
    kinds = _ops(result.model)
    assert kinds.count("LayerNormalization") == 1
    assert not {"ReduceMean", "Pow", "Sqrt", "Div"} & set(kinds)
    assert kinds.count("Transpose") == transposes
    assert kinds.count("Add") == int(spelling.plus_input)
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE)


def test_the_scale_and_bias_are_gamma_and_beta_over_the_normalised_axes(tmp_path):
    spelling = Spelling(shape=(1, 3, 4, 8), axes=(-2, -1), form="batchnorm")
    result, _, _ = _convert(spelling, tmp_path)
    (norm,) = [n for n in result.model.graph.node if n.op_type == "LayerNormalization"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in norm.attribute}
    assert attrs["axis"] == 2
    assert attrs["epsilon"] == pytest.approx(1e-3)
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in result.model.graph.initializer}
    rng = np.random.default_rng(0)  # the same draws as the model's constants
    gamma = rng.uniform(0.5, 2.0, [1, 1, 4, 8]).astype(np.float32)
    beta = rng.standard_normal([1, 1, 4, 8]).astype(np.float32)
    np.testing.assert_array_equal(weights[norm.input[1]], gamma.reshape(4, 8))
    np.testing.assert_array_equal(weights[norm.input[2]], beta.reshape(4, 8))


# -- what it leaves alone ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "reason"),
    [
        (
            Spelling(form="divide", epsilon_outside=True),
            "epsilon is added outside the square root",
        ),
        (Spelling(gamma_input=True), "which is not a constant"),
        (Spelling(gamma_shape=(1, 10, 1)), "varies along axis 1, which is not normalised"),
        (Spelling(shape=(1, 8, 6, 6), axes=(1,)), "not the trailing ones"),
        (Spelling(variance_read_elsewhere=True), "is also read by"),
        (Spelling(form="divide", variance_read_elsewhere=True), "is also read by"),
    ],
    ids=[
        "epsilon-outside-root",
        "gamma-not-constant",
        "gamma-per-row",
        "short-non-trailing-rows",
        "variance-read-elsewhere",
        "divide-variance-read-elsewhere",
    ],
)
def test_arrangements_the_kernel_cannot_take_stay_and_say_why(spelling, reason, tmp_path):
    result, actual, expected = _convert(spelling, tmp_path)
    assert NAME not in result.rewrites.counts()
    declined = _declined(result)
    assert len(declined) == 1
    assert reason in declined[0]
    assert "LayerNormalization" not in _ops(result.model)
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE)


def test_below_opset_17_there_is_no_layer_normalization_to_use(tmp_path):
    result, actual, expected = _convert(Spelling(), tmp_path, opset=16)
    assert _declined(result) == ["LayerNormalization needs opset 17 (the model has 16)"]
    assert "LayerNormalization" not in _ops(result.model)
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE)


def test_statistics_over_other_axes_are_no_layer_norm(tmp_path):
    spelling = Spelling(shape=(1, 6, 16), axes=(-1,), variance_axes=(1,))
    result, actual, expected = _convert(spelling, tmp_path)
    assert NAME not in result.rewrites.counts()
    assert _declined(result) == []
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE)


# -- on an ONNX graph directly ---------------------------------------------------------------


def _moments_graph(square_twice: bool) -> onnx.ModelProto:
    """Keras's arrangement in ONNX ops; optionally with the squares also read elsewhere."""
    nodes = [
        onnx.helper.make_node("ReduceMean", ["x", "axes"], ["mean"]),
        onnx.helper.make_node("Sub", ["x", "mean"], ["centred"]),
        onnx.helper.make_node("Mul", ["centred", "centred"], ["squares"]),
        onnx.helper.make_node("ReduceMean", ["squares", "axes"], ["variance"]),
        onnx.helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        onnx.helper.make_node("Pow", ["shifted", "half"], ["inv"]),
        onnx.helper.make_node("Mul", ["x", "inv"], ["scaled"]),
        onnx.helper.make_node("Mul", ["mean", "inv"], ["mean_scaled"]),
        onnx.helper.make_node("Sub", ["scaled", "mean_scaled"], ["y" if not square_twice else "n"]),
    ]
    if square_twice:
        nodes.append(onnx.helper.make_node("Add", ["n", "squares"], ["y"]))
    constants = {
        "axes": np.asarray([-1], np.int64),
        "eps": np.float32(1e-5),
        "half": np.float32(-0.5),
    }
    return float_model(nodes, constants, [2, 3, 40])


@pytest.mark.parametrize("square_twice", [False, True], ids=["alone", "squares-read-again"])
def test_onnx_spelling_is_rewritten_only_when_nothing_else_reads_its_parts(square_twice):
    model = _moments_graph(square_twice)
    feeds = {"x": np.random.default_rng(3).standard_normal([2, 3, 40]).astype(np.float32)}
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    onnx.checker.check_model(model, full_check=True)
    after = run_onnxruntime(model, feeds)["y"]
    if square_twice:
        assert NAME not in report.counts()
        (declined,) = [d.reason for d in report.declined if d.rewrite == NAME]
        assert "'squares' is also read by Add" in declined
        assert before.tobytes() == after.tobytes()
    else:
        assert _ops(model) == ["LayerNormalization"]
        assert set(report.absorbed) >= {"mean", "centred", "squares", "variance", "inv"}
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
