"""NV12/I420 to RGB/BGR against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset8 as o8  # noqa: E402

pytestmark = pytest.mark.openvino

F32, U8 = np.float32, np.uint8

COVERED_LAYERS = {
    ("NV12toRGB", "opset8"),
    ("NV12toBGR", "opset8"),
    ("I420toRGB", "opset8"),
    ("I420toBGR", "opset8"),
}

BATCH, HEIGHT, WIDTH = 2, 4, 6


def pixels(shape, dtype, seed):
    return np.random.default_rng(seed).integers(0, 256, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [U8, F32])
@pytest.mark.parametrize("make", [o8.nv12_to_rgb, o8.nv12_to_bgr, o8.i420_to_rgb, o8.i420_to_bgr])
def test_single_plane_conversion_matches_openvino(tmp_path, dtype, make):
    shape = [BATCH, HEIGHT * 3 // 2, WIDTH, 1]
    pairs, _ = run_both(tmp_path, make, [shape], [dtype], feeds={"in0": pixels(shape, dtype, 0)})
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("dtype", [U8, F32])
@pytest.mark.parametrize("make", [o8.nv12_to_rgb, o8.nv12_to_bgr])
def test_two_plane_nv12_matches_openvino(tmp_path, dtype, make):
    shapes = [[BATCH, HEIGHT, WIDTH, 1], [BATCH, HEIGHT // 2, WIDTH // 2, 2]]
    feeds = {f"in{i}": pixels(s, dtype, i) for i, s in enumerate(shapes)}
    pairs, _ = run_both(tmp_path, make, shapes, [dtype] * 2, feeds=feeds)
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("dtype", [U8, F32])
@pytest.mark.parametrize("make", [o8.i420_to_rgb, o8.i420_to_bgr])
def test_three_plane_i420_matches_openvino(tmp_path, dtype, make):
    chroma = [BATCH, HEIGHT // 2, WIDTH // 2, 1]
    shapes = [[BATCH, HEIGHT, WIDTH, 1], chroma, chroma]
    feeds = {f"in{i}": pixels(s, dtype, i) for i, s in enumerate(shapes)}
    pairs, _ = run_both(tmp_path, make, shapes, [dtype] * 3, feeds=feeds)
    assert_close(pairs, exact=True)
