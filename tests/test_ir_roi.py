"""ROI layers (ROIAlign-3/9, ROIAlignRotated-15, ROIPooling, PSROIPooling-1,
DeformablePSROIPooling-1) converted and run against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset2 as o2  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset9 as o9  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

from tests.ir_detection_support import (  # noqa: E402
    EXAMPLES,
    F32,
    ROIS,
    compare,
    refused,
    roi_feeds,
    save,
)

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("DeformablePSROIPooling", "opset1"),
    ("PSROIPooling", "opset1"),
    ("ROIAlign", "opset3"),
    ("ROIAlign", "opset9"),
    ("ROIAlignRotated", "opset15"),
    ("ROIPooling", "opset2"),
}


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_roi_align_3_matches_openvino(tmp_path, mode, ratio, scale):
    pairs = compare(
        tmp_path,
        lambda x, r, b: o3.roi_align(x, r, b, 3, 4, ratio, scale, mode),
        roi_feeds(),
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", ["asymmetric", "half_pixel_for_nn", "half_pixel"])
@pytest.mark.parametrize("opset", [13, 18])
def test_roi_align_9_matches_openvino(tmp_path, mode, aligned, opset):
    pairs = compare(
        tmp_path,
        lambda x, r, b: o9.roi_align(x, r, b, 2, 3, 0, 0.5, mode, aligned),
        roi_feeds(1),
        opset=opset,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("clockwise", [False, True])
@pytest.mark.parametrize(("ratio", "scale"), [(0, 1.0), (2, 0.5)])
def test_roi_align_rotated_matches_openvino(tmp_path, clockwise, ratio, scale):
    feeds = roi_feeds(4)
    feeds["rois"] = np.array(
        [
            [4, 5, 6, 3, 0.3],
            [6.5, 4.2, 9.1, 5.5, -1.2],
            [1, 1, 4, 4, 2.5],
            [11, 9, 5, 7, 0.0],
            [5, 5, 0.5, 0.2, 0.7],
        ],
        F32,
    )
    pairs = compare(
        tmp_path,
        lambda x, r, b: o15.roi_align_rotated(x, r, b, 3, 2, ratio, scale, clockwise),
        feeds,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


def test_roi_align_refuses_an_unknown_mode(tmp_path):
    feeds = roi_feeds()
    params = [o1.parameter(list(v.shape), v.dtype, name=k) for k, v in feeds.items()]
    xml = save(tmp_path, [o9.roi_align(*params, 2, 2, 1, 1.0, "avg", "half_pixel")], params)
    refused(xml, "aligned_mode", "half_pixel", "quarter_pixel")


@pytest.mark.parametrize("scale", [1.0, 0.7])
@pytest.mark.parametrize("pooled", [(2, 3), (1, 1), (4, 4)])
def test_roi_pooling_max_matches_openvino(tmp_path, scale, pooled):
    feeds = roi_feeds(2)
    feeds["rois"] = np.concatenate([feeds.pop("batch")[:, None].astype(F32), ROIS], axis=1)
    pairs = compare(
        tmp_path,
        lambda x, r: o2.roi_pooling(x, r, output_roi=list(pooled), spatial_scale=scale),
        feeds,
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("pooled", [(2, 3), (1, 1), (4, 5)])
def test_roi_pooling_bilinear_matches_openvino(tmp_path, pooled):
    feeds = roi_feeds(3)
    boxes = np.array(
        [[0.1, 0.1, 0.7, 0.6], [0.0, 0.2, 1.0, 0.9], [-0.2, -0.1, 0.3, 0.3], [0.4, 0.4, 0.45, 1.2]],
        F32,
    )
    feeds["rois"] = np.concatenate([np.array([[0], [1], [1], [0]], F32), boxes], axis=1)
    del feeds["batch"]
    pairs = compare(
        tmp_path,
        lambda x, r: o2.roi_pooling(
            x, r, output_roi=list(pooled), spatial_scale=1.0, method="bilinear"
        ),
        feeds,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("group", [1, 2, 3])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_psroi_pooling_average_matches_openvino(tmp_path, group, scale):
    rng = np.random.default_rng(group)
    output_dim = 2
    data = rng.standard_normal((2, output_dim * group * group, 9, 11)).astype(F32)
    rois = np.array(
        [[0, 1, 1, 7, 6], [1, 0.5, 2.5, 10.4, 8.6], [1, 3, 3, 3.2, 3.4], [0, 6, 2, 16, 12]], F32
    )
    pairs = compare(
        tmp_path,
        lambda x, r: o1.psroi_pooling(x, r, output_dim, group, scale, 1, 1, "average"),
        {"data": data, "rois": rois},
    )
    assert_close(pairs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("group", "bins_x", "bins_y"), [(1, 1, 1), (2, 2, 3), (3, 2, 1)])
def test_psroi_pooling_bilinear_matches_openvino(tmp_path, group, bins_x, bins_y):
    rng = np.random.default_rng(group)
    output_dim = 2
    data = rng.standard_normal((2, output_dim * bins_x * bins_y, 9, 11)).astype(F32)
    rois = np.array(
        [[0, 0.1, 0.1, 0.7, 0.6], [1, 0.0, 0.2, 1.0, 0.9], [1, 0.3, 0.3, 0.32, 0.4]], F32
    )
    pairs = compare(
        tmp_path,
        lambda x, r: o1.psroi_pooling(x, r, output_dim, group, 1.0, bins_x, bins_y, "bilinear"),
        {"data": data, "rois": rois},
    )
    assert_close(pairs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("group", "bins", "part", "with_offsets"),
    [(1, (1, 1), 1, False), (3, (2, 3), 3, False), (3, (2, 2), 3, True), (2, (1, 2), 1, True)],
)
def test_deformable_psroi_pooling_matches_openvino(tmp_path, group, bins, part, with_offsets):
    rng = np.random.default_rng(group)
    output_dim = 4
    feeds = {
        "data": rng.standard_normal((2, output_dim * group * group, 9, 11)).astype(F32),
        "rois": np.array(
            [[0, 1, 1, 7, 6], [1, 0.4, 2.5, 10.6, 8.5], [1, 3, 3, 3, 3.4], [0, 6, 2, 16, 12]], F32
        ),
    }
    if with_offsets:  # two offset classes: output channels 0-1 and 2-3 move differently
        feeds["offsets"] = rng.uniform(-0.4, 0.4, (4, 4, part, part)).astype(F32)
    pairs = compare(
        tmp_path,
        lambda *inputs: o1.deformable_psroi_pooling(
            *inputs[:2],
            output_dim,
            0.8,
            group,
            "bilinear_deformable",
            bins[1],
            bins[0],
            0.5,
            part,
            offsets=inputs[2] if len(inputs) > 2 else None,
        ),
        feeds,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


def test_psroi_pooling_stops_at_a_roi_of_batch_minus_one(tmp_path):
    rng = np.random.default_rng(0)
    feeds = {
        "data": rng.standard_normal((2, 8, 9, 11)).astype(F32),
        "rois": np.array([[0, 1, 1, 7, 6], [-1, 0, 0, 5, 5], [1, 2, 2, 8, 8]], F32),
    }
    pairs = compare(
        tmp_path, lambda x, r: o1.psroi_pooling(x, r, 2, 2, 1.0, 1, 1, "average"), feeds
    )
    assert_close(pairs, atol=1e-5, rtol=1e-5)
    assert not pairs[0][0][1:].any()


@settings(max_examples=EXAMPLES)
@given(
    seed=st.integers(0, 2**16),
    mode=st.sampled_from(["avg", "max"]),
    aligned=st.sampled_from(["asymmetric", "half_pixel_for_nn", "half_pixel"]),
    ratio=st.integers(0, 3),
)
def test_roi_align_matches_openvino_on_random_boxes(tmp_path_factory, seed, mode, aligned, ratio):
    rng = np.random.default_rng(seed)
    start = rng.uniform(-3, 10, (4, 2))
    rois = np.concatenate([start, start + rng.uniform(0, 8, (4, 2))], 1).astype(F32)
    feeds = {
        "data": rng.standard_normal((2, 2, 7, 9)).astype(F32),
        "rois": rois,
        "batch": rng.integers(0, 2, 4).astype(np.int32),
    }
    pairs = compare(
        tmp_path_factory.mktemp("roi_align"),
        lambda x, r, b: o9.roi_align(x, r, b, 2, 3, ratio, 0.75, mode, aligned),
        feeds,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


NO_ROI_CASES = {
    "roi-align-max": (lambda x, r, b: o9.roi_align(x, r, b, 2, 2, 0, 1.0, "max"), 4),
    "roi-align-avg": (lambda x, r, b: o9.roi_align(x, r, b, 2, 2, 0, 1.0, "avg"), 4),
    "roi-align-rotated": (lambda x, r, b: o15.roi_align_rotated(x, r, b, 2, 2, 0, 1.0, False), 5),
}


@pytest.mark.parametrize("case", NO_ROI_CASES)
@pytest.mark.parametrize("opset", [13, 18])
def test_roi_layers_pool_no_rois(tmp_path, case, opset):
    build, columns = NO_ROI_CASES[case]
    data = o1.parameter([1, 4, 6, 7], F32, name="x")
    rois = o1.parameter(ov.PartialShape([-1, columns]), F32, name="r")
    batch = o1.parameter(ov.PartialShape([-1]), np.int32, name="b")
    xml = save(tmp_path, [build(data, rois, batch)], [data, rois, batch])
    feeds = {
        "x": np.ones((1, 4, 6, 7), F32),
        "r": np.zeros((0, columns), F32),
        "b": np.zeros((0,), np.int32),
    }
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml, opset=opset), feeds).values()
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert ours.shape == np.asarray(compiled(feeds)[compiled.outputs[0]]).shape == (0, 4, 2, 2)
