"""ErfInv-17 against OpenVINO's CPU plugin, its polynomial and the inverse it approximates."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.ir.converters.inverse_erf import reference
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset16 as o16  # noqa: E402
import openvino.opset17 as o17  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("ErfInv", "opset17")}
SPECIAL = [0.0, -0.0, 1.0, -1.0, 1.5, -3.0, np.nan, np.inf, -np.inf]


def _points(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    tails = 1 - np.logspace(-8, -1, 400)
    body = rng.uniform(-1, 1, 20000)
    return np.concatenate([body, tails, -tails, SPECIAL]).astype(dtype)


def _convert(tmp_path, dtype):
    x = o16.parameter([-1], dtype, name="x")
    model = ov.Model([o17.erfinv(x)], [x])
    xml = tmp_path / "erfinv.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    return xml, converted


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_erfinv_matches_openvino(tmp_path, dtype):
    """Within check's default tolerance of the plugin everywhere, tails included (where
    the approximation is 0.019 from the true inverse), and identical non-finite results."""
    xml, converted = _convert(tmp_path, dtype)
    x = _points(dtype)
    (ours,) = run_onnxruntime(converted, {"x": x}).values()
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = compiled(x)[0]
    assert ours.dtype == theirs.dtype == dtype
    finite = np.isfinite(theirs)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs))
    assert np.array_equal(ours[np.isinf(theirs)], theirs[np.isinf(theirs)])
    np.testing.assert_allclose(
        ours[finite].astype(np.float64), theirs[finite].astype(np.float64), atol=1e-4, rtol=1e-3
    )
    assert np.array_equal(np.signbit(ours[x == 0]), np.signbit(x[x == 0]))


def test_erfinv_is_giles_polynomial_not_the_exact_inverse(tmp_path):
    """The converted graph computes the numpy form of the approximation to a few ulps; at
    0.99999994 both sit 0.0187 below the exact inverse, where OpenVINO sits too."""
    _, converted = _convert(tmp_path, np.float32)
    x = _points(np.float32)
    (ours,) = run_onnxruntime(converted, {"x": x}).values()
    expected = reference(x)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(ours[finite], expected[finite], rtol=4e-7, atol=1e-7)
    (tail,) = run_onnxruntime(converted, {"x": np.array([0.99999994], np.float32)}).values()
    assert tail[0] == pytest.approx(3.8139, abs=2e-4)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-0.9966, max_value=0.9966, allow_nan=False))
def test_erfinv_inverts_erf_where_its_central_polynomial_applies(x):
    """erf(erfinv(x)) is x to single precision while w < 5 (|x| below 0.9966)."""
    y = float(reference(np.array([x], np.float64))[0])
    assert math.erf(y) == pytest.approx(x, abs=2e-6)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.9967, max_value=1 - 1e-7, allow_nan=False))
def test_erfinv_tail_polynomial_is_within_0_6_percent(x):
    """OpenVINO's tail polynomial is coarser (0.53% relative at most); the model keeps it."""
    y = float(reference(np.array([x], np.float64))[0])
    lo, hi = y * 0.994, y * 1.006
    assert math.erf(lo) <= x <= math.erf(hi)


def test_erfinv_of_integers_is_refused(tmp_path):
    """OpenVINO's validation refuses integer data; an IR edited to carry it is refused
    naming the layer and the rule."""
    xml, _ = _convert(tmp_path, np.float32)
    text = xml.read_text().replace('element_type="f32"', 'element_type="i32"')
    xml.write_text(text.replace('precision="FP32"', 'precision="I32"'))
    with pytest.raises(b2s_onnx.B2SError, match=r"ErfInv.*'data' must be floating point"):
        b2s_onnx.convert_ir(xml)
