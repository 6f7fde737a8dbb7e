"""Detection and vision layers (NonZero, CTC decoding, YOLO, resampling, proposals,
deformable convolution, ExperimentalDetectron*) converted and run against OpenVINO's CPU
plugin; also refused attributes, target opsets and dynamic dimensions for the whole family."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset2 as o2  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset4 as o4  # noqa: E402
import openvino.opset6 as o6  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset9 as o9  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

from tests.ir_detection_support import (  # noqa: E402
    EXAMPLES,
    F32,
    compare,
    const,
    detections,
    refused,
    roi_feeds,
    save,
)

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("AdaptiveAvgPool", "opset8"),
    ("AdaptiveMaxPool", "opset8"),
    ("CTCGreedyDecoder", "opset1"),
    ("CTCGreedyDecoderSeqLen", "opset6"),
    ("DeformableConvolution", "opset1"),
    ("DeformableConvolution", "opset8"),
    ("ExperimentalDetectronDetectionOutput", "opset6"),
    ("ExperimentalDetectronGenerateProposalsSingleImage", "opset6"),
    ("ExperimentalDetectronPriorGridGenerator", "opset6"),
    ("ExperimentalDetectronROIFeatureExtractor", "opset6"),
    ("ExperimentalDetectronTopKROIs", "opset6"),
    ("ExtractImagePatches", "opset3"),
    ("GenerateProposals", "opset9"),
    ("GridSample", "opset9"),
    ("NonZero", "opset3"),
    ("Proposal", "opset1"),
    ("Proposal", "opset4"),
    ("ROIPooling", "opset1"),
    ("RegionYolo", "opset1"),
    ("ReorgYolo", "opset1"),
    ("ReorgYolo", "opset2"),
}


@pytest.mark.parametrize("dtype", [F32, np.int64, np.int32, np.int8, np.uint8, np.bool_])
@pytest.mark.parametrize("shape", [[7], [3, 4], [2, 3, 2]])
def test_non_zero_matches_openvino(tmp_path, dtype, shape):
    rng = np.random.default_rng(len(shape))
    data = (rng.integers(0, 3, shape) * rng.integers(-2, 3, shape)).astype(dtype)
    pairs, _ = run_both(tmp_path, lambda x: o3.non_zero(x), [shape], [dtype], feeds={"in0": data})
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("output_type", ["i64", "i32"])
def test_non_zero_output_type(tmp_path, output_type):
    data = np.array([[0, 1.5, 0], [2, 0, -1]], F32)
    pairs, _ = run_both(
        tmp_path, lambda x: o3.non_zero(x, output_type), [[2, 3]], feeds={"in0": data}
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == (np.int64 if output_type == "i64" else np.int32)


def test_non_zero_of_all_zeros_is_empty(tmp_path):
    pairs, _ = run_both(
        tmp_path, lambda x: o3.non_zero(x), [[2, 3]], feeds={"in0": np.zeros((2, 3), F32)}
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].shape == (2, 0)


def test_non_zero_size_is_not_folded_from_a_static_declaration(tmp_path):
    """ShapeOf(NonZero(x)) is a run-time value, even where the IR states the input size."""

    def build(x):
        found = o3.non_zero(x)
        return o1.convert(o3.shape_of(found), "f32")

    data = np.array([0, 1, 0, 2, 3], F32)
    pairs, _ = run_both(tmp_path, build, [[5]], feeds={"in0": data})
    assert_close(pairs, exact=True)
    assert pairs[0][0].tolist() == [1, 3]


def test_non_zero_refuses_an_unknown_output_type(tmp_path):
    param = o1.parameter([4], F32, name="x")
    xml = save(tmp_path, [o3.non_zero(param, "i32")], [param])
    refused(xml, "output_type", "i32", "f32")


def peaked_logits(shape, seed=0):
    """Logits whose argmax repeats and hits the blank often (classes drawn from 4)."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(shape).astype(F32)
    picks = rng.integers(0, min(4, shape[-1]), shape[:-1])
    picks[..., 1::3] = shape[-1] - 1
    np.put_along_axis(logits, picks[..., None], 5.0, axis=-1)
    return logits


@pytest.mark.parametrize("merge", [True, False])
def test_ctc_greedy_decoder_matches_openvino(tmp_path, merge):
    steps, batch, classes = 9, 3, 5
    data = peaked_logits([steps, batch, classes])
    mask = np.ones((steps, batch), F32)
    mask[6:, 1] = 0
    mask[2:, 2] = 0
    mask[7, 2] = 1  # a sequence ends at its first zero, whatever follows
    pairs, _ = run_both(
        tmp_path,
        lambda x, m: o1.ctc_greedy_decoder(x, m, merge),
        [list(data.shape), list(mask.shape)],
        feeds={"in0": data, "in1": mask},
    )
    assert_close(pairs, exact=True)
    assert (pairs[0][0] == -1).any()


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("blank", [None, 0, 2])
@pytest.mark.parametrize(("classes_type", "lengths_type"), [("i32", "i32"), ("i64", "i32")])
def test_ctc_greedy_decoder_seq_len_matches_openvino(
    tmp_path, merge, blank, classes_type, lengths_type
):
    batch, steps, classes = 3, 8, 5
    data = peaked_logits([batch, steps, classes], seed=1)
    lengths = np.array([8, 5, 0], np.int32)

    def build(x, length):
        blank_input = None if blank is None else const(blank, np.int32)
        node = o6.ctc_greedy_decoder_seq_len(
            x, length, blank_input, merge, classes_type, lengths_type
        )
        return list(node.outputs())

    pairs, _ = run_both(
        tmp_path,
        build,
        [list(data.shape), [batch]],
        [F32, np.int32],
        feeds={"in0": data, "in1": lengths},
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == (np.int32 if classes_type == "i32" else np.int64)


def test_ctc_greedy_decoder_refuses_a_non_boolean_merge_flag(tmp_path):
    data = o1.parameter([4, 1, 3], F32, name="x")
    mask = o1.parameter([4, 1], F32, name="m")
    xml = save(tmp_path, [o1.ctc_greedy_decoder(data, mask, True)], [data, mask])
    refused(xml, "ctc_merge_repeated", "true", "maybe")


@pytest.mark.parametrize(
    ("coords", "classes", "num", "softmax", "mask", "axis", "end_axis"),
    [
        (4, 3, 5, True, [], 1, 3),  # YOLOv2: softmax, all regions, flattened
        (4, 3, 5, True, [], 2, 3),
        (4, 5, 9, False, [0, 1, 2], 1, 3),  # YOLOv3: sigmoids, the masked regions
        (4, 0, 2, False, [3, 4], 1, 3),
    ],
)
def test_region_yolo_matches_openvino(
    tmp_path, coords, classes, num, softmax, mask, axis, end_axis
):
    regions = num if softmax else len(mask)
    shape = [2, regions * (coords + 1 + classes), 3, 4]
    pairs, _ = run_both(
        tmp_path,
        lambda x: o1.region_yolo(
            x, coords, classes, num, softmax, mask, axis, end_axis, [1.0] * (2 * num)
        ),
        [shape],
    )
    assert_close(pairs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    ("stride", "shape"), [(2, [1, 8, 4, 6]), (3, [2, 9, 3, 6]), (1, [1, 2, 3, 3])]
)
def test_reorg_yolo_matches_openvino_exactly(tmp_path, stride, shape):
    pairs, _ = run_both(tmp_path, lambda x: o2.reorg_yolo(x, [stride]), [shape])
    assert_close(pairs, exact=True)


def test_roi_pooling_and_reorg_yolo_read_as_opset1_match_openvino(tmp_path):
    """OpenVINO writes both as opset2 but reads them under opset1 too (older IRs)."""
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((1, 8, 4, 6)).astype(F32),
        "r": np.array([[0, 0.5, 1, 4, 3]], F32),
    }
    x = o1.parameter([1, 8, 4, 6], F32, name="x")
    r = o1.parameter([1, 5], F32, name="r")
    outputs = [o2.roi_pooling(x, r, output_roi=[2, 2], spatial_scale=1.0), o2.reorg_yolo(x, [2])]
    xml = save(tmp_path, outputs, [x, r])
    xml.write_text(xml.read_text().replace('version="opset2"', 'version="opset1"'))
    assert 'type="ROIPooling" version="opset1"' in xml.read_text()
    ours = run_onnxruntime(b2s_onnx.convert_ir(xml), feeds)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = compiled(feeds)
    for port in compiled.outputs:
        name = next(n for n in ours if n in port.get_names())
        assert_close([(ours[name], np.asarray(theirs[port]))], exact=True)


def test_reorg_yolo_refuses_channels_not_divisible_by_the_stride(tmp_path):
    param = o1.parameter([1, 8, 4, 4], F32, name="x")
    xml = save(tmp_path, [o2.reorg_yolo(param, [2])], [param])
    text = xml.read_text()
    xml.write_text(text.replace('stride="2"', 'stride="3"'))
    with pytest.raises(b2s_onnx.B2SError, match="stride"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_openvino(tmp_path, mode, padding, align):
    rng = np.random.default_rng(0)
    feeds = {
        "data": rng.standard_normal((2, 3, 5, 7)).astype(F32),
        "grid": rng.uniform(-1.3, 1.3, (2, 4, 6, 2)).astype(F32),
    }
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    pairs = compare(tmp_path, lambda x, g: o9.grid_sample(x, g, attrs), feeds)
    assert_close(pairs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_grid_sample_at_opset_20_uses_the_renamed_modes(tmp_path, mode):
    rng = np.random.default_rng(1)
    feeds = {
        "data": rng.standard_normal((1, 2, 4, 5)).astype(F32),
        "grid": rng.uniform(-1.1, 1.1, (1, 3, 3, 2)).astype(F32),
    }
    attrs = {"mode": mode, "padding_mode": "border", "align_corners": False}
    pairs = compare(tmp_path, lambda x, g: o9.grid_sample(x, g, attrs), feeds, opset=20)
    assert_close(pairs, atol=1e-5, rtol=1e-5)


def test_grid_sample_below_opset_16_is_refused(tmp_path):
    data = o1.parameter([1, 2, 4, 5], F32, name="x")
    grid = o1.parameter([1, 3, 3, 2], F32, name="g")
    xml = save(tmp_path, [o9.grid_sample(data, grid, {"mode": "bilinear"})], [data, grid])
    with pytest.raises(b2s_onnx.B2SError, match="opset 16"):
        b2s_onnx.convert_ir(xml, opset=15)


@pytest.mark.parametrize(
    ("sizes", "strides", "rates", "pad"),
    [
        ([2, 2], [1, 1], [1, 1], "valid"),
        ([3, 2], [2, 3], [1, 1], "same_upper"),
        ([2, 3], [3, 2], [2, 1], "same_lower"),
        ([3, 3], [5, 5], [2, 2], "valid"),
    ],
)
def test_extract_image_patches_matches_openvino_exactly(tmp_path, sizes, strides, rates, pad):
    pairs, _ = run_both(
        tmp_path,
        lambda x: o3.extract_image_patches(x, sizes, strides, rates, pad),
        [[2, 3, 9, 10]],
    )
    assert_close(pairs, exact=True)
    # H and W known only at run time (TensorFlow's extract_patches on a dynamic image);
    # with 'valid' padding OpenVINO fails on an image smaller than one patch.
    extent = [(k - 1) * r + 1 for k, r in zip(sizes, rates, strict=True)]
    for h, w in ((9, 10), (4, 3), (1, 2)):
        if pad == "valid" and (h < extent[0] or w < extent[1]):
            continue
        feeds = {"in0": np.random.default_rng(h).standard_normal([1, 3, h, w]).astype(F32)}
        pairs, _ = run_both(
            tmp_path,
            lambda x: o3.extract_image_patches(x, sizes, strides, rates, pad),
            [[1, 3, -1, -1]],
            feeds=feeds,
        )
        assert_close(pairs, exact=True)


ADAPTIVE = [
    ([1, 2, 10], [4]),
    ([2, 3, 7, 9], [3, 4]),
    ([1, 2, 6, 5], [6, 5]),
    ([1, 1, 4, 5, 3], [3, 2, 2]),
]


@pytest.mark.parametrize(("shape", "out"), ADAPTIVE)
def test_adaptive_avg_pool_matches_openvino(tmp_path, shape, out):
    pairs, _ = run_both(tmp_path, lambda x: o8.adaptive_avg_pool(x, const(out, np.int64)), [shape])
    assert_close(pairs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(("shape", "out"), ADAPTIVE)
def test_adaptive_max_pool_matches_openvino_exactly(tmp_path, shape, out):
    pairs, _ = run_both(
        tmp_path,
        lambda x: list(o8.adaptive_max_pool(x, const(out, np.int32), "i32").outputs()),
        [shape],
    )
    assert_close(pairs, exact=True)
    assert pairs[1][0].dtype == np.int32


def test_adaptive_max_pool_i64_indices_equal_the_i32_ones(tmp_path):
    """OpenVINO's CPU plugin cannot run i64 indices; the values must not depend on it."""
    data = np.random.default_rng(5).standard_normal((2, 3, 7, 9)).astype(F32)
    param = o1.parameter([2, 3, 7, 9], F32, name="x")
    results = {}
    for index_type in ("i32", "i64"):
        node = o8.adaptive_max_pool(param, const([3, 4], np.int64), index_type)
        xml = save(tmp_path, list(node.outputs()), [param], f"{index_type}.xml")
        results[index_type] = list(run_onnxruntime(b2s_onnx.convert_ir(xml), {"x": data}).values())
    assert results["i64"][1].dtype == np.int64
    assert results["i64"][0].tobytes() == results["i32"][0].tobytes()
    assert results["i64"][1].tolist() == results["i32"][1].tolist()


def test_adaptive_max_pool_ties_pick_the_first_maximum(tmp_path):
    data = np.zeros((1, 1, 4, 6), F32)
    data[0, 0, 1:3, 2:4] = 1.0
    pairs, _ = run_both(
        tmp_path,
        lambda x: list(o8.adaptive_max_pool(x, const([2, 2], np.int64), "i32").outputs()),
        [[1, 1, 4, 6]],
        feeds={"in0": data},
    )
    assert_close(pairs, exact=True)


def proposal_attrs(**changes):
    attrs = {
        "base_size": np.uint32(16),
        "pre_nms_topn": np.uint32(100),
        "post_nms_topn": np.uint32(20),
        "nms_thresh": 0.6,
        "feat_stride": np.uint32(16),
        "min_size": np.uint32(4),
        "ratio": [0.5, 1.0, 2.0],
        "scale": [2.0, 4.0],
        "clip_before_nms": True,
        "clip_after_nms": False,
        "normalize": False,
        "box_size_scale": 1.0,
        "box_coordinate_scale": 1.0,
        "framework": "",
    }
    attrs.update(changes)
    return attrs


PROPOSAL_CASES = {
    "caffe": {},
    "tensorflow": {"framework": "tensorflow"},
    "clip-after-normalize-scaled": {
        "clip_after_nms": True,
        "normalize": True,
        "box_size_scale": 2.0,
        "box_coordinate_scale": 0.5,
    },
    "no-clip-short-list": {"clip_before_nms": False, "post_nms_topn": np.uint32(200)},
}


@pytest.mark.parametrize("version", [1, 4])
@pytest.mark.parametrize("case", PROPOSAL_CASES)
@pytest.mark.parametrize("info_size", [3, 4])
def test_proposal_matches_openvino(tmp_path, version, case, info_size):
    anchors, batch, height, width = 6, 2, 5, 6
    rng = np.random.default_rng(len(case))
    feeds = {
        "probs": rng.uniform(0, 1, (batch, 2 * anchors, height, width)).astype(F32),
        "deltas": (rng.standard_normal((batch, 4 * anchors, height, width)) * 0.2).astype(F32),
        "info": np.array([80, 96, 1.0, 0.8][:info_size], F32),
    }
    attrs = proposal_attrs(**PROPOSAL_CASES[case])
    make = o1.proposal if version == 1 else o4.proposal
    pairs = compare(tmp_path, lambda p, d, i: list(make(p, d, i, attrs).outputs()), feeds)
    assert len(pairs) == version // 4 + 1
    (rois, expected_rois), *probs = pairs
    assert_close([(rois, expected_rois)], atol=2e-5, rtol=1e-5)
    ends = np.flatnonzero(rois[:, 0] == -1)  # rows past each image's last box are padding
    valid = np.ones(len(rois), bool)
    for end in ends:
        valid[end : (end // attrs["post_nms_topn"] + 1) * attrs["post_nms_topn"]] = False
    assert valid.any()
    for ours, theirs in probs:  # OpenVINO leaves the probabilities of padding rows unset
        assert_close([(ours[valid], theirs[valid])], atol=1e-6)
        assert not ours[~valid].any()


def test_proposal_refuses_an_unknown_framework(tmp_path):
    params = [
        o1.parameter([1, 12, 3, 3], F32, name="p"),
        o1.parameter([1, 24, 3, 3], F32, name="d"),
        o1.parameter([3], F32, name="i"),
    ]
    xml = save(tmp_path, list(o4.proposal(*params, proposal_attrs()).outputs()), params)
    text = xml.read_text()
    assert 'framework=""' in text
    xml.write_text(text.replace('framework=""', 'framework="mxnet"'))
    with pytest.raises(b2s_onnx.B2SError, match="framework"):
        b2s_onnx.convert_ir(xml)


def rpn_inputs(batch, anchors=3, height=4, width=5, seed=0):
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 60, (height, width, anchors, 2))
    boxes = np.concatenate([start, start + rng.uniform(4, 30, start.shape)], -1).astype(F32)
    deltas = (rng.standard_normal((batch, anchors * 4, height, width)) * 0.3).astype(F32)
    scores = rng.uniform(0, 1, (batch, anchors, height, width)).astype(F32)
    return boxes, deltas, scores


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize(("info_size", "pre", "post"), [(3, 40, 12), (4, 30, 50)])
def test_generate_proposals_matches_openvino(tmp_path, normalized, info_size, pre, post):
    anchors, deltas, scores = rpn_inputs(2)
    info = np.array([[70, 80, 1.0, 0.9], [60, 90, 1.2, 1.0]], F32)[:, :info_size]
    feeds = {"info": info, "anchors": anchors, "deltas": deltas, "scores": scores}
    pairs = compare(
        tmp_path,
        lambda i, a, d, s: list(
            o15.generate_proposals(i, a, d, s, 6.0, 0.6, pre, post, normalized).outputs()
        ),
        feeds,
    )
    assert_close(pairs[2:], exact=True)
    assert_close(pairs[:2], atol=2e-5, rtol=1e-5)
    assert pairs[0][0].shape[0] > 0


def _single_image_proposals(tmp_path, feeds, attrs):
    """(ours, OpenVINO's) outputs of one ExperimentalDetectronGenerateProposalsSingleImage."""
    return compare(
        tmp_path,
        lambda *inputs: list(
            opset6_node(
                "ExperimentalDetectronGenerateProposalsSingleImage", list(inputs), attrs
            ).outputs()
        ),
        feeds,
    )


@pytest.mark.parametrize(("pre", "post"), [(40, 12), (30, 50)])
def test_generate_proposals_single_image_matches_openvino(tmp_path, pre, post):
    anchors, deltas, scores = rpn_inputs(1, seed=1)
    feeds = {
        "info": np.array([70, 80, 1.0], F32),
        "anchors": anchors.reshape(-1, 4),
        "deltas": deltas[0],
        "scores": scores[0],
    }
    # A small min_size: boxes it zeroes tie at score 0, an order OpenVINO leaves open.
    attrs = {"min_size": 2.0, "nms_threshold": 0.6, "pre_nms_count": pre, "post_nms_count": post}
    assert_close(_single_image_proposals(tmp_path, feeds, attrs), atol=2e-5, rtol=1e-5)


def test_generate_proposals_single_image_suppresses_by_exclusive_overlap(tmp_path):
    """Boxes are refined counting pixels inclusively but suppressed by plain overlap (offset
    0), in the plugin and the core reference alike: at threshold 0.3 two boxes overlap 0.287
    plainly and 0.308-0.326 inclusively, so the inclusive rule dropped one proposal."""
    rng = np.random.default_rng(0)
    count, height, width = 3, 2, 6
    corners = rng.uniform(0, 0.7, (height * width * count, 2)) * 60
    sizes = rng.uniform(0.05, 0.3, (height * width * count, 2)) * 60
    scores = (rng.permutation(count * height * width) + 0.5) / (count * height * width)
    feeds = {
        "info": np.array([60, 60, 1], F32),
        "anchors": np.concatenate([corners, corners + sizes], 1).astype(F32),
        "deltas": rng.uniform(-0.5, 0.5, (count * 4, height, width)).astype(F32),
        "scores": scores.reshape(count, height, width).astype(F32),
    }
    attrs = {"min_size": 0.0, "nms_threshold": 0.3, "pre_nms_count": 1000, "post_nms_count": 50}
    assert_close(_single_image_proposals(tmp_path, feeds, attrs), atol=2e-5, rtol=1e-5)


def deformable_feeds(channels, out_hw, taps, dgroups, seed=0, mask=False):
    rng = np.random.default_rng(seed)
    feeds = {
        "data": rng.standard_normal((2, channels, 7, 8)).astype(F32),
        # Offsets up to +-3 pixels push many samples past the borders.
        "offsets": rng.uniform(-3, 3, (2, dgroups * 2 * taps, *out_hw)).astype(F32),
    }
    if mask:
        feeds["mask"] = rng.uniform(0, 1, (2, dgroups * taps, *out_hw)).astype(F32)
    return feeds


DEFORMABLE_CASES = {
    "plain": {
        "kernel": (3, 3),
        "strides": [1, 1],
        "pads": [1, 1],
        "dil": [1, 1],
        "group": 1,
        "dg": 1,
    },
    "strided-dilated": {
        "kernel": (3, 2),
        "strides": [2, 1],
        "pads": [0, 1],
        "dil": [1, 2],
        "group": 1,
        "dg": 1,
    },
    "groups": {
        "kernel": (2, 2),
        "strides": [1, 2],
        "pads": [1, 0],
        "dil": [1, 1],
        "group": 2,
        "dg": 2,
    },
}


def _deformable_out(size, kernel, stride, pad, dil):
    return (size + 2 * pad - (kernel - 1) * dil - 1) // stride + 1


@pytest.mark.parametrize("case", DEFORMABLE_CASES)
@pytest.mark.parametrize(
    ("version", "mask", "padded"),
    [(1, False, False), (8, True, False), (8, True, True), (8, False, True)],
)
def test_deformable_convolution_matches_openvino(tmp_path, case, version, mask, padded):
    c = DEFORMABLE_CASES[case]
    (kh, kw), channels, out_channels = c["kernel"], 4, 6
    out_hw = [
        _deformable_out(7, kh, c["strides"][0], c["pads"][0], c["dil"][0]),
        _deformable_out(8, kw, c["strides"][1], c["pads"][1], c["dil"][1]),
    ]
    feeds = deformable_feeds(channels, out_hw, kh * kw, c["dg"], mask=mask)
    weights = (
        np.random.default_rng(9)
        .standard_normal((out_channels, channels // c["group"], kh, kw))
        .astype(F32)
    )
    common = (c["strides"], c["pads"], c["pads"], c["dil"])

    def build(x, off, *rest):
        if version == 1:
            return o1.deformable_convolution(
                x, off, const(weights), *common, group=c["group"], deformable_group=c["dg"]
            )
        return o8.deformable_convolution(
            x,
            off,
            const(weights),
            *common,
            mask=rest[0] if rest else None,
            group=c["group"],
            deformable_group=c["dg"],
            bilinear_interpolation_pad=padded,
        )

    pairs = compare(tmp_path, build, feeds)
    assert_close(pairs, atol=5e-5, rtol=1e-5)


def opset6_node(layer_type, inputs, attrs):
    """Builds a layer the Python opset API has no function for."""
    from openvino.utils.node_factory import NodeFactory

    return NodeFactory("opset6").create(layer_type, [i.output(0) for i in inputs], attrs)


@pytest.mark.parametrize("max_rois", [3, 7])
def test_topk_rois_matches_openvino(tmp_path, max_rois):
    rng = np.random.default_rng(max_rois)
    probs = rng.permutation(np.linspace(0.05, 0.95, 7)).astype(F32)
    probs[4] = probs[1]  # a tie keeps the earlier ROI first
    feeds = {"rois": rng.uniform(0, 50, (7, 4)).astype(F32), "probs": probs}
    pairs = compare(
        tmp_path,
        lambda r, p: opset6_node("ExperimentalDetectronTopKROIs", [r, p], {"max_rois": max_rois}),
        feeds,
    )
    assert_close(pairs, exact=True)


def test_topk_rois_pads_with_zeros_past_the_rois(tmp_path):
    """OpenVINO leaves rows past the number of ROIs unset; they are zeros here."""
    feeds = {
        "rois": np.arange(12, dtype=F32).reshape(3, 4),
        "probs": np.array([0.2, 0.9, 0.5], F32),
    }
    pairs = compare(
        tmp_path,
        lambda r, p: opset6_node("ExperimentalDetectronTopKROIs", [r, p], {"max_rois": 5}),
        feeds,
    )
    ((ours, theirs),) = pairs
    assert ours[:3].tobytes() == theirs[:3].tobytes()
    assert not ours[3:].any()


@pytest.mark.parametrize(
    "attrs",
    [
        {"flatten": True, "h": 0, "w": 0, "stride_x": 0.0, "stride_y": 0.0},
        {"flatten": False, "h": 0, "w": 0, "stride_x": 4.0, "stride_y": 5.0},
        {"flatten": True, "h": 3, "w": 2, "stride_x": 0.0, "stride_y": 0.0},
        {"flatten": False, "h": 3, "w": 2, "stride_x": 0.0, "stride_y": 0.0},
    ],
)
def test_prior_grid_generator_matches_openvino(tmp_path, attrs):
    feeds = {
        "priors": np.array([[-1, -2, 3, 4], [0, 0, 1, 1], [-5, -5, 5, 5]], F32),
        "feature": np.zeros((1, 2, 2, 3), F32),
        "image": np.zeros((1, 3, 20, 30), F32),
    }
    pairs = compare(
        tmp_path,
        lambda p, f, i: opset6_node("ExperimentalDetectronPriorGridGenerator", [p, f, i], attrs),
        feeds,
    )
    assert_close(pairs, atol=1e-6)


@pytest.mark.parametrize("flatten", [True, False])
def test_prior_grid_that_does_not_fill_the_feature_map_is_refused(tmp_path, flatten):
    """OpenVINO leaves the cells past h * w uninitialised: nothing defined to convert."""
    priors = o1.parameter([3, 4], F32, name="priors")
    feature = o1.parameter([1, 2, 4, 5], F32, name="feature")
    image = o1.parameter([1, 3, 20, 30], F32, name="image")
    attrs = {"flatten": flatten, "h": 3, "w": 6, "stride_x": 0.0, "stride_y": 0.0}
    layer = opset6_node("ExperimentalDetectronPriorGridGenerator", [priors, feature, image], attrs)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(layer.outputs(), [priors, feature, image]), xml)
    with pytest.raises(b2s_onnx.B2SError, match="does not fill the feature map"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_feature_extractor_matches_openvino(tmp_path, aligned, ratio):
    rng = np.random.default_rng(3)
    rois = np.array(
        [[0, 0, 40, 30], [10, 12, 200, 180], [5, 5, 600, 500], [30, 30, 30, 50], [2, 3, 9, 8]],
        F32,
    )
    feeds = {
        "rois": rois,
        "level0": rng.standard_normal((1, 3, 32, 40)).astype(F32),
        "level1": rng.standard_normal((1, 3, 16, 20)).astype(F32),
        "level2": rng.standard_normal((1, 3, 8, 10)).astype(F32),
    }
    attrs = {
        "output_size": 3,
        "sampling_ratio": ratio,
        "pyramid_scales": [4, 8, 16],
        "aligned": aligned,
    }
    pairs = compare(
        tmp_path,
        lambda *inputs: list(
            opset6_node("ExperimentalDetectronROIFeatureExtractor", list(inputs), attrs).outputs()
        ),
        feeds,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("max_detections", [5, 40])
def test_detectron_detection_output_matches_openvino(tmp_path, max_detections):
    rng = np.random.default_rng(max_detections)
    rois_count, classes = 12, 4
    start = rng.uniform(0, 40, (rois_count, 2))
    rois = np.concatenate([start, start + rng.uniform(5, 30, (rois_count, 2))], 1).astype(F32)
    rois[3, 2] = rois[3, 0]  # an empty box: no detections
    feeds = {
        "rois": rois,
        "deltas": (rng.standard_normal((rois_count, 4 * classes)) * 0.2).astype(F32),
        "scores": rng.uniform(0, 1, (rois_count, classes)).astype(F32),
        "info": np.array([[60, 80, 1]], F32),
    }
    attrs = {
        "score_threshold": 0.3,
        "nms_threshold": 0.5,
        "max_delta_log_wh": 2.0,
        "num_classes": classes,
        "post_nms_count": 6,
        "max_detections_per_image": max_detections,
        "class_agnostic_box_regression": False,
        "deltas_weights": [10.0, 10.0, 5.0, 5.0],
    }
    pairs = compare(
        tmp_path,
        lambda *inputs: list(
            opset6_node("ExperimentalDetectronDetectionOutput", list(inputs), attrs).outputs()
        ),
        feeds,
    )
    assert_close(pairs, atol=2e-5, rtol=1e-5)
    assert pairs[2][0].any()


REFUSALS = {
    "MatrixNms": (
        lambda x: list(o8.matrix_nms(const(np.zeros((1, 4, 4))), x).outputs()),
        [1, 1, 4],
        ("decay_function", "linear", "cubic"),
    ),
    "DeformableConvolution": (
        lambda x: o8.deformable_convolution(
            x,
            const(np.zeros((1, 8, 3, 3))),
            const(np.ones((2, 2, 2, 2))),
            [1, 1],
            [0, 0],
            [0, 0],
            [1, 1],
        ),
        [1, 2, 4, 4],
        ("bilinear_interpolation_pad", "false", "perhaps"),
    ),
    "RegionYolo": (
        lambda x: o1.region_yolo(x, 4, 3, 5, True, [], 1, 3),
        [1, 40, 2, 2],
        ("do_softmax", "true", "sometimes"),
    ),
    "ROIPooling": (
        lambda x: o2.roi_pooling(x, const([[0, 1, 1, 3, 3]]), output_roi=[2, 2], spatial_scale=1.0),
        [1, 2, 4, 4],
        ("method", "max", "min"),
    ),
    "PSROIPooling": (
        lambda x: o1.psroi_pooling(x, const([[0, 1, 1, 3, 3]]), 2, 1, 1.0, 1, 1, "average"),
        [1, 2, 4, 4],
        ("mode", "average", "median"),
    ),
    "GridSample": (
        lambda x: o9.grid_sample(x, const(np.zeros((1, 2, 2, 2))), {"padding_mode": "border"}),
        [1, 2, 4, 4],
        ("padding_mode", "border", "wrap"),
    ),
    "ExtractImagePatches": (
        lambda x: o3.extract_image_patches(x, [2, 2], [1, 1], [1, 1], "valid"),
        [1, 2, 4, 4],
        ("sizes", "2, 2", "2, 2, 2"),
    ),
    "AdaptiveMaxPool": (
        lambda x: list(o8.adaptive_max_pool(x, const([2, 2], np.int64), "i32").outputs()),
        [1, 2, 4, 4],
        ("index_element_type", "i32", "f32"),
    ),
}


@pytest.mark.parametrize("layer_type", REFUSALS)
def test_invalid_attribute_is_refused_naming_it(tmp_path, layer_type):
    build, shape, (key, old, new) = REFUSALS[layer_type]
    param = o1.parameter(shape, F32, name="x")
    outputs = build(param)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    xml = save(tmp_path, outputs, [param])
    refused(xml, key, old, new)


def _opset_cases():
    boxes, scores = detections(seed=2)
    sorted_boxes = np.sort(boxes.reshape(2, 10, 2, 2), axis=2).reshape(2, 10, 4)
    nms_feeds = {"boxes": sorted_boxes, "scores": scores}
    anchors, deltas, rpn_scores = rpn_inputs(1)
    rng = np.random.default_rng(0)
    return {
        "soft-nms": (
            lambda b, s: list(
                o9.non_max_suppression(
                    b, s, const(4, np.int64), const(0.5), const(0.1), const(0.4)
                ).outputs()
            ),
            nms_feeds,
        ),
        "adaptive-multiclass-nms": (
            lambda b, s: list(o9.multiclass_nms(b, s, iou_threshold=0.7, nms_eta=0.8).outputs()),
            nms_feeds,
        ),
        "matrix-nms": (lambda b, s: list(o8.matrix_nms(b, s).outputs()), nms_feeds),
        "roi-align-max": (
            lambda x, r, b: o9.roi_align(x, r, b, 2, 2, 0, 1.0, "max", "half_pixel"),
            roi_feeds(),
        ),
        "ctc": (
            lambda x, n: list(o6.ctc_greedy_decoder_seq_len(x, n).outputs()),
            {"x": peaked_logits([2, 6, 4]), "n": np.array([6, 3], np.int32)},
        ),
        "generate-proposals": (
            lambda i, a, d, s: list(o15.generate_proposals(i, a, d, s, 4.0, 0.6, 30, 10).outputs()),
            {
                "info": np.array([[70, 80, 1.0]], F32),
                "anchors": anchors,
                "deltas": deltas,
                "scores": rpn_scores,
            },
        ),
        "adaptive-pool": (
            lambda x: list(o8.adaptive_max_pool(x, const([3, 2], np.int64), "i32").outputs()),
            {"x": rng.standard_normal((1, 2, 7, 5)).astype(F32)},
        ),
        "adaptive-avg-pool-and-patches": (
            lambda x: [
                o8.adaptive_avg_pool(x, const([3, 2], np.int64)),
                o3.extract_image_patches(x, [2, 2], [2, 1], [1, 1], "same_upper"),
            ],
            {"x": rng.standard_normal((1, 2, 7, 5)).astype(F32)},
        ),
    }


@pytest.mark.parametrize("opset", [13, 21])
@pytest.mark.parametrize("case", list(_opset_cases()))
def test_layers_convert_at_the_oldest_and_newest_target_opsets(tmp_path, case, opset):
    build, feeds = _opset_cases()[case]
    pairs = compare(tmp_path, build, feeds, opset=opset)
    assert_close(pairs, atol=2e-5, rtol=1e-5)


def _nms_inputs(count, seed):
    boxes, scores = detections(batches=1, boxes=count, classes=2, seed=seed)
    return {"b": np.sort(boxes.reshape(1, count, 2, 2), axis=2).reshape(1, count, 4), "s": scores}


DYNAMIC_CASES = {
    "nms": (
        lambda b, s: list(
            o9.non_max_suppression(b, s, const(3, np.int64), const(0.4), const(0.1)).outputs()
        ),
        {"b": [-1, -1, 4], "s": [-1, 2, -1]},
        [_nms_inputs(6, 0), _nms_inputs(9, 1)],
    ),
    "soft-nms": (
        lambda b, s: list(
            o9.non_max_suppression(
                b, s, const(3, np.int64), const(0.4), const(0.1), const(0.5)
            ).outputs()
        ),
        {"b": [-1, -1, 4], "s": [-1, 2, -1]},
        [_nms_inputs(6, 0), _nms_inputs(9, 1)],
    ),
    "multiclass-nms": (
        lambda b, s: list(o9.multiclass_nms(b, s, score_threshold=0.1, keep_top_k=4).outputs()),
        {"b": [-1, -1, 4], "s": [-1, 2, -1]},
        [_nms_inputs(6, 2), _nms_inputs(9, 3)],
    ),
    "deformable-convolution": (
        lambda x, o: o8.deformable_convolution(
            x, o, const(np.ones((4, 2, 3, 3)) * 0.1), [1, 1], [1, 1], [1, 1], [1, 1]
        ),
        {"x": [-1, 2, -1, -1], "o": [-1, 18, -1, -1]},
        [
            {"x": np.ones((1, 2, 5, 6), F32), "o": np.full((1, 18, 5, 6), 0.3, F32)},
            {"x": np.ones((2, 2, 4, 4), F32), "o": np.full((2, 18, 4, 4), -0.6, F32)},
        ],
    ),
}


@pytest.mark.parametrize("case", DYNAMIC_CASES)
def test_layers_with_dynamic_dims_run_at_several_sizes(tmp_path, case):
    build, shapes, feeds_list = DYNAMIC_CASES[case]
    params = [o1.parameter(ov.PartialShape(shape), F32, name=k) for k, shape in shapes.items()]
    outputs = build(*params)
    xml = save(tmp_path, outputs if isinstance(outputs, list) else [outputs], params)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for feeds in feeds_list:
        ours = run_onnxruntime(converted, feeds)
        theirs = compiled(feeds)
        for port in compiled.outputs:
            name = next(n for n in ours if n in port.get_names())
            assert_close([(ours[name], np.asarray(theirs[port]))], atol=1e-5, rtol=1e-5)


@settings(max_examples=EXAMPLES)
@given(seed=st.integers(0, 2**16), merge=st.booleans(), blank=st.integers(0, 3))
def test_ctc_greedy_decoder_seq_len_matches_openvino_on_random_logits(
    tmp_path_factory, seed, merge, blank
):
    rng = np.random.default_rng(seed)
    logits = peaked_logits([3, 7, 4], seed=seed)
    lengths = rng.integers(0, 8, 3).astype(np.int32)
    pairs = compare(
        tmp_path_factory.mktemp("ctc"),
        lambda x, n: list(
            o6.ctc_greedy_decoder_seq_len(x, n, const(blank, np.int32), merge).outputs()
        ),
        {"x": logits, "n": lengths},
    )
    assert_close(pairs, exact=True)
