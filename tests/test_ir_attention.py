"""ScaledDotProductAttention against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset13 as o13  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32

COVERED_LAYERS = {("ScaledDotProductAttention", "opset13")}

SHAPES = [[2, 3, 5, 4], [2, 3, 6, 4], [2, 3, 6, 3]]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_without_mask(tmp_path, causal, scale):
    def build(q, k, v):
        extra = (
            []
            if scale is None
            else [o1.constant(np.zeros([1, 1, 5, 6], F32)), o1.constant(np.asarray(scale, F32))]
        )
        return o13.scaled_dot_product_attention(q, k, v, *extra, causal=causal)

    pairs, _ = run_both(tmp_path, build, SHAPES)
    assert_close(pairs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_with_mask(tmp_path, kind):
    rng = np.random.default_rng(3)
    keep = rng.random([1, 3, 5, 6]) > 0.3
    keep[..., 0] = True  # every query keeps a key
    mask = o1.constant(keep if kind == "bool" else rng.standard_normal([2, 1, 5, 6]).astype(F32))
    pairs, _ = run_both(
        tmp_path, lambda q, k, v: o13.scaled_dot_product_attention(q, k, v, mask), SHAPES
    )
    assert_close(pairs, atol=1e-5, rtol=1e-4)


def test_attention_with_a_non_boolean_causal_is_refused(tmp_path):
    params = [o1.parameter(s, F32, name=f"in{i}") for i, s in enumerate(SHAPES)]
    xml = tmp_path / "m.xml"
    node = o13.scaled_dot_product_attention(*params, causal=True)
    ov.save_model(ov.Model([node], params), xml)
    xml.write_text(xml.read_text().replace('causal="true"', 'causal="sometimes"'))
    with pytest.raises(b2s_onnx.B2SError, match="causal"):
        b2s_onnx.convert_ir(xml)
