"""Activation layers with tensor parameters, against OpenVINO's CPU plugin (f32)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
COVERED_LAYERS = {("HardSigmoid", "opset1")}


@pytest.mark.parametrize(("alpha", "beta"), [(0.2, 0.5), (1 / 6, 0.5), (-0.7, 0.1)])
def test_hard_sigmoid_with_constant_parameters_matches_openvino(tmp_path, alpha, beta):
    def build(x):
        return o1.hard_sigmoid(x, o1.constant(F32(alpha)), o1.constant(F32(beta)))

    pairs, _ = run_both(tmp_path, build, [[2, 3, 4, 5]])
    assert_close(pairs, atol=1e-6)


def test_hard_sigmoid_with_run_time_parameters_follows_the_spec_formula(tmp_path):
    """OpenVINO's CPU plugin needs constant alpha/beta, so the spec's formula is the reference."""
    x = o1.parameter([3, 7], F32, name="x")
    alpha, beta = o1.parameter([], F32, name="alpha"), o1.parameter([], F32, name="beta")
    layer = o1.hard_sigmoid(x, alpha, beta)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x, alpha, beta]), xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    feeds = {
        "x": np.random.default_rng(0).standard_normal([3, 7]).astype(F32) * 4,
        "alpha": np.asarray(0.3, F32),
        "beta": np.asarray(0.4, F32),
    }
    (ours,) = run_onnxruntime(converted, feeds).values()
    expected = np.clip(feeds["alpha"] * feeds["x"] + feeds["beta"], 0, 1)
    np.testing.assert_allclose(ours, expected, atol=1e-6)
