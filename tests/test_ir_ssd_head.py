"""An SSD head (PriorBoxClustered or PriorBox + DetectionOutput) on static and on dynamic
feature-map sizes, against OpenVINO's CPU plugin: with dynamic H and W the priors are
computed at run time and the number of candidates is padded to top_k."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
PRIORS_PER_CELL = 2
CLASSES = 3


def _const(values, dtype=np.int64):
    return o1.constant(np.asarray(values, dtype))


def _priors(feature_size, image_size, clustered: bool):
    """Two priors per cell, from PriorBoxClustered or from PriorBox (a square and a 2:1)."""
    if clustered:
        attrs = {"width": [12.0, 30.0], "height": [16.0, 24.0], "clip": False, "offset": 0.5}
        return o1.prior_box_clustered(
            feature_size, image_size, {**attrs, "variance": [0.1, 0.1, 0.2, 0.2]}
        )
    attrs = {"min_size": [14.0], "aspect_ratio": [2.0], "flip": False, "offset": 0.5}
    return o1.prior_box(
        feature_size, image_size, {**attrs, "clip": True, "variance": [0.1, 0.1, 0.2, 0.2]}
    )


def _ssd_head(shape: list[int], top_k: int, keep_top_k: int, clustered: bool = True) -> ov.Model:
    rng = np.random.default_rng(7)
    feature = o1.parameter(shape, F32, name="feature")
    image = o1.parameter([1, 3, -1, -1] if -1 in shape else [1, 3, 64, 64], F32, name="image")

    def head(channels: int):
        weights = (rng.standard_normal([channels, shape[1], 3, 3]) * 0.4).astype(F32)
        conv = o1.convolution(feature, o1.constant(weights), [1, 1], [1, 1], [1, 1], [1, 1])
        nhwc = o1.transpose(conv, _const([0, 2, 3, 1]))
        return o1.reshape(nhwc, _const([1, -1]), False)

    locations = head(4 * PRIORS_PER_CELL)
    scores = o1.reshape(
        o1.softmax(o1.reshape(head(CLASSES * PRIORS_PER_CELL), _const([1, -1, CLASSES]), False), 2),
        _const([1, -1]),
        False,
    )

    def spatial(node):
        return o1.strided_slice(o3.shape_of(node), _const([2]), _const([4]), _const([1]), [0], [0])

    priors = _priors(spatial(feature), spatial(image), clustered)
    detections = o1.detection_output(
        locations,
        scores,
        o1.unsqueeze(priors, _const([0])),
        {
            "num_classes": CLASSES,
            "background_label_id": 0,
            "top_k": top_k,
            "keep_top_k": [keep_top_k],
            "code_type": "caffe.PriorBoxParameter.CENTER_SIZE",
            "nms_threshold": 0.45,
            "confidence_threshold": 0.05,
            "share_location": True,
            "normalized": True,
            "variance_encoded_in_target": False,
        },
    )
    return ov.Model([detections], [feature, image])


@pytest.mark.parametrize(
    ("shape", "sizes"),
    [
        ([1, 4, 8, 8], [(8, 8)]),
        # 3x4 cells: 24 priors, fewer than top_k; 9x11: 198, more.
        ([1, 4, -1, -1], [(3, 4), (9, 11), (8, 8)]),
    ],
)
@pytest.mark.parametrize("clustered", [True, False], ids=["clustered", "prior-box"])
def test_ssd_head_matches_openvino(tmp_path, shape, sizes, clustered):
    xml = tmp_path / "ssd.xml"
    head = _ssd_head(shape, top_k=40, keep_top_k=25, clustered=clustered)
    ov.save_model(head, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for h, w in sizes:
        feeds = {
            "feature": np.random.default_rng(h * w).standard_normal([1, 4, h, w]).astype(F32),
            "image": np.zeros([1, 3, 8 * h, 8 * w], F32),
        }
        (ours,) = run_onnxruntime(converted, feeds).values()
        theirs = compiled(feeds)[0]
        assert ours.shape == theirs.shape == (1, 1, 25, 7)
        assert (theirs[0, 0, :, 0] >= 0).sum() > 3  # some detections
        np.testing.assert_allclose(ours, theirs, atol=2e-6, rtol=1e-5)


def test_dynamic_prior_count_needs_a_positive_top_k(tmp_path):
    xml = tmp_path / "ssd.xml"
    ov.save_model(_ssd_head([1, 4, -1, -1], top_k=-1, keep_top_k=25), xml)
    with pytest.raises(b2s_onnx.B2SError, match=r"DetectionOutput on a run-time .*positive top_k"):
        b2s_onnx.convert_ir(xml)
