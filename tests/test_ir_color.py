"""YUV 4:2:0 to RGB/BGR layers against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset8 as o8  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("NV12toRGB", "opset8"),
    ("NV12toBGR", "opset8"),
    ("I420toRGB", "opset8"),
    ("I420toBGR", "opset8"),
}
N, H, W = 2, 6, 4
BUILDERS = {
    ("nv12", "rgb"): o8.nv12_to_rgb,
    ("nv12", "bgr"): o8.nv12_to_bgr,
    ("i420", "rgb"): o8.i420_to_rgb,
    ("i420", "bgr"): o8.i420_to_bgr,
}


def _feeds(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {f"in{i}": rng.integers(0, 256, shape).astype(dtype) for i, shape in enumerate(shapes)}


@pytest.mark.parametrize("family", ["nv12", "i420"])
@pytest.mark.parametrize("order", ["rgb", "bgr"])
@pytest.mark.parametrize("planes", [1, "separate"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_yuv_to_rgb_matches_openvino(tmp_path, family, order, planes, dtype):
    if planes == 1:
        shapes = [[N, H * 3 // 2, W, 1]]
    elif family == "nv12":
        shapes = [[N, H, W, 1], [N, H // 2, W // 2, 2]]
    else:
        shapes = [[N, H, W, 1], [N, H // 2, W // 2, 1], [N, H // 2, W // 2, 1]]
    pairs, _ = run_both(
        tmp_path,
        lambda *planes_in: BUILDERS[family, order](*planes_in),
        shapes,
        [dtype] * len(shapes),
        feeds=_feeds(shapes, dtype),
    )
    if dtype == np.uint8:
        assert_close(pairs, atol=1, rtol=0)
    else:
        assert_close(pairs, atol=1e-4, rtol=0)


def test_nv12_refuses_rows_that_are_not_three_halves_of_a_height(tmp_path):
    image = o8.parameter([1, 6, 4, 1], np.uint8, name="in0")
    xml = tmp_path / "model.xml"
    layer = o8.nv12_to_rgb(image)
    ov.save_model(ov.Model([layer.output(0)], [image]), xml)
    xml.write_text(
        xml.read_text().replace("<dim>6</dim>", "<dim>8</dim>").replace("1,6,4,1", "1,8,4,1")
    )
    with pytest.raises(B2SError, match="rows"):
        b2s_onnx.convert_ir(xml)
