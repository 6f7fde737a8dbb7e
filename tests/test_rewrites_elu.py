"""`elu-as-exponential`: Elu with 0 < alpha <= 1 as Max(x, alpha (Exp(Min(x, 0)) - 1)),
within float rounding of onnxruntime's Elu and of float64; other alphas and types declined."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.elu_as_exponential import EluAsExponential
from tests.helpers import assert_well_formed, converted_matches_openvino, float_model

NAME = EluAsExponential.name
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, -1e-8, 3e38, -3e38, -88.0, -104.0]
SIZE = len(SPECIAL) + 200


def _elu_model(alpha: float | None, shape=(SIZE,)):
    attrs = {} if alpha is None else {"alpha": alpha}
    return float_model([helper.make_node("Elu", ["x"], ["y"], name="elu", **attrs)], {}, shape)


def _elu64(x: np.ndarray, alpha: float) -> np.ndarray:
    wide = x.astype(np.float64)
    return np.where(wide > 0, wide, alpha * np.expm1(np.minimum(wide, 0)))


def _rewritten(model):
    report = apply_rewrites(model, (EluAsExponential(),))
    return report, model


def _values(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([SPECIAL, rng.standard_normal(200) * 5]).astype(np.float32)


@pytest.mark.parametrize("alpha", [None, 1.0, 0.5, 0.1])
def test_elu_becomes_a_max_of_exponentials_within_rounding(alpha):
    feeds = {"x": _values()}
    before = run_onnxruntime(_elu_model(alpha), feeds)["y"]
    report, model = _rewritten(_elu_model(alpha))
    assert [f.rewrite for f in report.fired] == [NAME]
    assert report.fired[0].exact is False
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Min", "Exp", "Sub"] + (["Mul"] if alpha not in (None, 1.0) else []) + ["Max"]
    assert_well_formed(model)
    after = run_onnxruntime(model, feeds)["y"]
    np.testing.assert_array_equal(np.isnan(after), np.isnan(before))
    finite = ~np.isnan(before)
    np.testing.assert_allclose(after[finite], before[finite], rtol=1e-6, atol=1e-7)
    exact = _elu64(feeds["x"], 1.0 if alpha is None else alpha)
    np.testing.assert_allclose(after[finite], exact[finite], rtol=1e-6, atol=1e-7)
    # -inf maps to -alpha, +inf to +inf
    assert after[SPECIAL.index(-np.inf)] == np.float32(-(1.0 if alpha is None else alpha))
    assert after[SPECIAL.index(np.inf)] == np.inf


@pytest.mark.parametrize(
    ("alpha", "reason"),
    [(1.5, "alpha 1.5 is outside (0, 1]"), (0.0, "alpha 0 is outside (0, 1]")],
)
def test_an_alpha_outside_zero_to_one_is_declined_with_the_reason(alpha, reason):
    report, model = _rewritten(_elu_model(alpha))
    assert not report.fired
    assert next(d.reason for d in report.declined).startswith(reason)
    assert [n.op_type for n in model.graph.node] == ["Elu"]


def test_a_double_elu_is_declined():
    model = _elu_model(1.0)
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    report, _ = _rewritten(model)
    assert [d.reason for d in report.declined] == ["only float32 is rewritten"]


@settings(max_examples=30, deadline=None)
@given(
    alpha=st.floats(min_value=1e-3, max_value=1.0),
    values=st.lists(st.floats(min_value=-100, max_value=100, width=32), min_size=1, max_size=64),
)
def test_the_max_form_holds_for_any_alpha_up_to_one(alpha, values):
    x = np.asarray(values, np.float32)
    feeds = {"x": x}
    before = run_onnxruntime(_elu_model(alpha, x.shape), feeds)["y"]
    _, model = _rewritten(_elu_model(alpha, x.shape))
    after = run_onnxruntime(model, feeds)["y"]
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)


def test_a_converted_elu_ir_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    rng = np.random.default_rng(6)
    data = ops.parameter([1, 16, 20, 20], np.float32, name="features")
    weights = ops.constant((rng.standard_normal([16, 16, 3, 3]) * 0.3).astype(np.float32))
    conv = ops.convolution(data, weights, [1, 1], [1, 1], [1, 1], [1, 1])
    feeds = {"features": rng.standard_normal([1, 16, 20, 20]).astype(np.float32)}
    model = ov.Model([ops.elu(conv, 0.7)], [data])
    result = converted_matches_openvino(model, tmp_path, feeds, rtol=1e-5, atol=1e-5)
    assert result.rewrites.counts().get(NAME) == 1
