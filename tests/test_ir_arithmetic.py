"""Round-5 in both modes and for every element type, against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset5 as o5  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("Round", "opset5")}
#: Ties of both parities and signs, and the float just below one half.
TIES = np.asarray(
    [
        -3.5,
        -2.5,
        -1.5,
        -0.5,
        0.5,
        1.5,
        2.5,
        3.5,
        0.49999997,
        -0.49999997,
        2.4999998,
        7.7,
        -0.0,
        1e7 + 0.5,
        np.inf,
        -np.inf,
    ],
    np.float32,
)


@pytest.mark.parametrize("mode", ["half_to_even", "half_away_from_zero"])
def test_round_matches_openvino_on_ties(tmp_path, mode):
    pairs, _ = run_both(tmp_path, lambda x: o5.round(x, mode), [[TIES.size]], feeds={"in0": TIES})
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("mode", ["half_to_even", "half_away_from_zero"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_round_passes_integers_through(tmp_path, mode, dtype):
    pairs, _ = run_both(tmp_path, lambda x: o5.round(x, mode), [[3, 4]], [dtype])
    assert_close(pairs, exact=True)


def test_round_refuses_an_unknown_mode(tmp_path):
    x = o5.parameter([2], np.float32, name="x")
    layer = o5.round(x, "half_to_even")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('mode="half_to_even"', 'mode="stochastic"'))
    with pytest.raises(B2SError, match="mode"):
        b2s_onnx.convert_ir(xml)
