"""Property: for any rate, kernel, size, padding and layout, the atrous rewrite either
fuses into a Conv that computes what the literal pattern computes (to float rounding), or
declines with a reason and leaves the literal lowering."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from b2s_onnx.lowering import LoweringOptions, lower_model
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_atrous_fusion import atrous_model


@given(
    rate=st.integers(1, 4),
    kernel=st.integers(1, 4),
    size=st.integers(1, 11),
    same=st.booleans(),
    inner=st.integers(0, 1),
    depthwise=st.booleans(),
    nhwc=st.booleans(),
)
def test_a_fused_atrous_conv_computes_what_the_literal_pattern_does(
    rate, kernel, size, same, inner, depthwise, nhwc
):
    base = (kernel - 1) * rate // 2 if same else 0
    model = atrous_model(
        rate=rate,
        kernel=kernel,
        size=size,
        base_pads=(base, base),
        inner_pads=(inner, inner),
        depthwise=depthwise,
        nhwc=nhwc,
        bias="channel",
    )
    # The literal pattern needs a non-empty phase convolution to be a valid model at all.
    phase = -(-(size + 2 * base) // rate)
    if phase + 2 * inner < kernel:
        return
    fused = lower_model(model)
    literal = lower_model(model, options=LoweringOptions(fuse=False))
    assert [f.rewrite for f in fused.rewrites.fired] == ["atrous-convolution"], (
        fused.rewrites.declined
    )
    shape = [1, size, size, 4] if nhwc else [1, 4, size, size]
    feeds = {"x": np.random.default_rng(size).standard_normal(shape).astype(np.float32)}
    ours = run_onnxruntime(fused.model, feeds)["y"]
    expected = run_onnxruntime(literal.model, feeds)["y"]
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
