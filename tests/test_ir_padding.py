"""Pad-1/12 in every mode, with negative pads, against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset12 as o12  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("Pad", "opset1"), ("Pad", "opset12")}
MODES = ["constant", "edge", "reflect", "symmetric"]


def i64(values):
    return o1.constant(np.asarray(values, np.int64))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("begins", "ends"), [([0, 1, 2], [1, 0, 3]), ([1, 3, 0], [0, 2, 4])])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_pad_1_matches_openvino_exactly(tmp_path, mode, begins, ends, dtype):
    def build(x):
        value = o1.constant(dtype(7)) if mode == "constant" else None
        return o1.pad(x, i64(begins), i64(ends), mode, value)

    pairs, _ = run_both(tmp_path, build, [[2, 4, 5]], [dtype])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("begins", "ends"),
    [([0, -1, 2], [1, 2, -3]), ([0, 3, -2], [0, -4, 1]), ([-1, 0, 0], [0, 0, -1])],
)
def test_pad_12_with_negative_pads_matches_openvino_exactly(tmp_path, mode, begins, ends):
    pairs, _ = run_both(tmp_path, lambda x: o12.pad(x, i64(begins), i64(ends), mode), [[2, 4, 5]])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_with_run_time_pads_matches_openvino(tmp_path, mode):
    feeds = {
        "in0": np.random.default_rng(0).standard_normal([3, 4]).astype(np.float32),
        "in1": np.asarray([1, 2], np.int64),
        "in2": np.asarray([2, 0], np.int64),
    }
    pairs, _ = run_both(
        tmp_path,
        lambda x, b, e: o12.pad(x, b, e, mode),
        [[3, 4], [2], [2]],
        [np.float32, np.int64, np.int64],
        feeds=feeds,
    )
    assert_close(pairs, exact=True)


def test_pad_refuses_an_unknown_mode(tmp_path):
    x = o1.parameter([2, 3], np.float32, name="x")
    layer = o12.pad(x, i64([0, 1]), i64([0, 0]), "edge")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('pad_mode="edge"', 'pad_mode="wrap"'))
    with pytest.raises(B2SError, match="pad_mode"):
        b2s_onnx.convert_ir(xml)
