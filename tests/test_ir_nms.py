"""Non-maximum suppression layers (NonMaxSuppression-1/3/4/5/9, NMSRotated-13,
MulticlassNms-8/9, MatrixNms-8) converted and run against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset4 as o4  # noqa: E402
import openvino.opset5 as o5  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset9 as o9  # noqa: E402
import openvino.opset13 as o13  # noqa: E402

from tests.ir_detection_support import (  # noqa: E402
    EXAMPLES,
    F32,
    compare,
    const,
    detections,
    refused,
    save,
)

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("MatrixNms", "opset8"),
    ("MulticlassNms", "opset8"),
    ("MulticlassNms", "opset9"),
    ("NMSRotated", "opset13"),
    ("NonMaxSuppression", "opset1"),
    ("NonMaxSuppression", "opset3"),
    ("NonMaxSuppression", "opset4"),
    ("NonMaxSuppression", "opset5"),
    ("NonMaxSuppression", "opset9"),
}


MAKERS = {
    1: lambda b, s, args, enc, srt, out: o1.non_max_suppression(b, s, *args[:3], enc, srt),
    3: lambda b, s, args, enc, srt, out: o3.non_max_suppression(b, s, *args[:3], enc, srt, out),
    4: lambda b, s, args, enc, srt, out: o4.non_max_suppression(b, s, *args[:3], enc, srt, out),
    5: lambda b, s, args, enc, srt, out: o5.non_max_suppression(b, s, *args, enc, srt, out),
    9: lambda b, s, args, enc, srt, out: o9.non_max_suppression(b, s, *args, enc, srt, out),
}


def run_nms(tmp_path, version, *, max_boxes=4, iou=0.4, score=0.2, sigma=0.0, **kwargs):
    encoding = kwargs.get("encoding", "corner")
    sort = kwargs.get("sort", False)
    output_type = kwargs.get("output_type", "i64")
    boxes, scores = detections(center=encoding == "center", seed=kwargs.get("seed", 0))
    args = [const(max_boxes, np.int64), const(iou), const(score), const(sigma)]

    def build(b, s):
        node = MAKERS[version](b, s, args, encoding, sort, output_type)
        return list(node.outputs())

    return run_both(
        tmp_path,
        build,
        [list(boxes.shape), list(scores.shape)],
        feeds={"in0": boxes, "in1": scores},
    )


@pytest.mark.parametrize("version", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("encoding", ["corner", "center"])
@pytest.mark.parametrize("sort", [False, True])
def test_nms_matches_openvino(tmp_path, version, encoding, sort):
    pairs, converted = run_nms(tmp_path, version, encoding=encoding, sort=sort)
    assert len(pairs) == (3 if version >= 5 else 1)
    assert_close(pairs, exact=True)
    assert pairs[0][0].shape[0] > 0
    assert "NonMaxSuppression" in {n.op_type for n in converted.graph.node}


@pytest.mark.parametrize("version", [3, 4, 5, 9])
def test_nms_output_type_i32(tmp_path, version):
    pairs, _ = run_nms(tmp_path, version, output_type="i32")
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == np.int32


@pytest.mark.parametrize(
    ("iou", "score", "max_boxes"),
    [
        (1.0, 0.2, 4),  # identical boxes are suppressed at IoU == threshold
        (0.0, 0.2, 4),  # every box suppresses every other: one per class
        (1.5, 0.2, 4),  # nothing suppressed
        (0.4, 0.99, 4),  # nothing scores high enough: empty outputs
        (0.4, 0.0, 100),  # more boxes allowed than there are
    ],
)
def test_nms_thresholds_match_openvino_at_the_edges(tmp_path, iou, score, max_boxes):
    pairs, _ = run_nms(tmp_path, 9, iou=iou, score=score, max_boxes=max_boxes, sort=True)
    assert_close(pairs, exact=True)


def test_nms_with_no_boxes_allowed_selects_none(tmp_path):
    """OpenVINO's CPU plugin leaves valid_outputs uninitialised here; the rows agree."""
    indices, scores, valid = run_nms(tmp_path, 9, max_boxes=0)[0]
    assert_close([indices, scores], exact=True)
    assert indices[0].shape == (0, 3)
    assert valid[0].tolist() == [0]


@pytest.mark.parametrize("version", [5, 9])
@pytest.mark.parametrize("sort", [False, True])
@pytest.mark.parametrize("sigma", [0.3, 1.0])
def test_soft_nms_matches_openvino(tmp_path, version, sort, sigma):
    pairs, converted = run_nms(tmp_path, version, sigma=sigma, sort=sort, iou=0.6, score=0.1)
    indices, scores, valid = pairs
    assert_close([indices, valid], exact=True)
    assert_close([scores], atol=1e-6, rtol=1e-6)
    assert "Loop" in {n.op_type for n in converted.graph.node}
    _, original = detections()
    batch, cls, box = indices[0].T
    assert (scores[0][:, 2] < original[batch, cls, box]).any(), "no score was decayed"


def test_soft_nms_ignores_the_iou_threshold_as_the_cpu_plugin_does(tmp_path):
    """With soft-NMS the CPU plugin only decays scores; an IoU threshold of 0 suppresses
    nothing (hard NMS would keep one box per class)."""
    (indices, expected), *_ = run_nms(tmp_path, 9, sigma=0.5, iou=0.0, score=0.05)[0]
    assert indices.tobytes() == expected.tobytes()
    assert len(indices) > 2 * 3 * 1


def test_nms_thresholds_may_be_run_time_inputs(tmp_path):
    boxes, scores = detections()

    def build(b, s, iou, score, sigma):
        node = o9.non_max_suppression(b, s, const(5, np.int64), iou, score, sigma, "corner")
        return list(node.outputs())

    feeds = {
        "in0": boxes,
        "in1": scores,
        "in2": np.array(0.5, F32),
        "in3": np.array(0.3, F32),
        "in4": np.array(0.0, F32),
    }
    shapes = [list(boxes.shape), list(scores.shape), [], [], []]
    pairs, _ = run_both(tmp_path, build, shapes, feeds=feeds)
    assert_close(pairs, exact=True)


def test_nms_refuses_an_unknown_box_encoding(tmp_path):
    boxes, scores = detections()
    b = o1.parameter(list(boxes.shape), F32, name="b")
    s = o1.parameter(list(scores.shape), F32, name="s")
    node = o9.non_max_suppression(b, s, const(3, np.int64), const(0.5), const(0.1))
    xml = save(tmp_path, list(node.outputs()), [b, s])
    refused(xml, "box_encoding", "corner", "diagonal")


def rotated_detections(seed=0, batches=2, boxes=8, classes=2):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(4, 8, (batches, boxes, 2))
    sizes = rng.uniform(2, 5, (batches, boxes, 2))
    angles = rng.uniform(-1.5, 1.5, (batches, boxes, 1))
    rotated = np.concatenate([centres, sizes, angles], -1).astype(F32)
    rotated[:, 1] = rotated[:, 0]  # a copy: IoU 1
    rotated[:, 2, 4] = 0.0  # an upright box
    return rotated, rng.uniform(0, 1, (batches, classes, boxes)).astype(F32)


@pytest.mark.parametrize("clockwise", [True, False])
@pytest.mark.parametrize("sort", [True, False])
@pytest.mark.parametrize(("iou", "score"), [(0.3, 0.2), (0.6, 0.0)])
def test_nms_rotated_matches_openvino(tmp_path, clockwise, sort, iou, score):

    boxes, scores = rotated_detections()
    pairs = compare(
        tmp_path,
        lambda b, s: list(
            o13.nms_rotated(
                b, s, const(5, np.int64), const(iou), const(score), sort, "i64", clockwise
            ).outputs()
        ),
        {"boxes": boxes, "scores": scores},
    )
    assert_close(pairs, exact=True)
    assert len(pairs[0][0]) > 0


@pytest.mark.parametrize("clockwise", [True, False])
def test_nms_rotated_angle_direction_matters(tmp_path, clockwise):
    """Box 1, turned by 45 degrees about (2, 2), crosses box 0 only in OpenVINO's clockwise
    direction (image coordinates, y downwards)."""

    boxes = np.array([[[0, 0, 6, 1, 0], [2, 2, 6, 1, np.pi / 4]]], F32)
    scores = np.array([[[0.5, 0.9]]], F32)
    pairs = compare(
        tmp_path,
        lambda b, s: list(
            o13.nms_rotated(
                b, s, const(5, np.int64), const(0.01), const(0.0), True, "i64", clockwise
            ).outputs()
        ),
        {"boxes": boxes, "scores": scores},
    )
    assert_close(pairs, exact=True)
    assert len(pairs[0][0]) == (1 if clockwise else 2)


MULTICLASS_CASES = {
    "defaults": {},
    "score-across": {"sort_result_type": "score", "sort_result_across_batch": True},
    "class": {"sort_result_type": "classid"},
    "class-across": {"sort_result_type": "classid", "sort_result_across_batch": True},
    "tops-background": {"nms_top_k": 3, "keep_top_k": 4, "background_class": 1},
    "pixels-i32": {"normalized": False, "output_type": "i32", "iou_threshold": 0.3},
    "thresholds": {"iou_threshold": 1.0, "score_threshold": 0.5, "keep_top_k": 0},
    "adaptive": {"iou_threshold": 0.8, "nms_eta": 0.7, "sort_result_type": "classid"},
    "adaptive-pixels-top": {
        "iou_threshold": 0.6,
        "nms_eta": 0.9,
        "normalized": False,
        "nms_top_k": 5,
    },
}


def multiclass_attrs(**changes):
    attrs = {"iou_threshold": 0.45, "score_threshold": 0.2, "sort_result_type": "score"}
    attrs.update(changes)
    return attrs


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("case", MULTICLASS_CASES)
def test_multiclass_nms_matches_openvino(tmp_path, version, case):
    boxes, scores = detections(seed=3)
    boxes = np.sort(boxes.reshape(2, 10, 2, 2), axis=2).reshape(2, 10, 4) * 4  # x1 <= x2
    scores[0, 1, 5] = 0.2  # exactly at the score threshold: kept (>=)
    attrs = multiclass_attrs(**MULTICLASS_CASES[case])
    make = o8.multiclass_nms if version == 8 else o9.multiclass_nms
    pairs = compare(
        tmp_path,
        lambda b, s: list(make(b, s, **attrs).outputs()),
        {"boxes": boxes, "scores": scores},
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("case", ["defaults", "class", "tops-background", "adaptive"])
def test_multiclass_nms_9_with_boxes_per_class_and_image_matches_openvino(tmp_path, case):
    rng = np.random.default_rng(7)
    counts = np.array([4, 0, 6], np.int32)
    start = rng.uniform(0, 8, (3, 10, 2))
    boxes = np.concatenate([start, start + rng.uniform(1, 3, (3, 10, 2))], -1).astype(F32)
    scores = rng.uniform(0, 1, (3, 10)).astype(F32)
    attrs = multiclass_attrs(**MULTICLASS_CASES[case])
    pairs = compare(
        tmp_path,
        lambda b, s, n: list(o9.multiclass_nms(b, s, n, **attrs).outputs()),
        {"boxes": boxes, "scores": scores, "counts": counts},
    )
    assert_close(pairs, exact=True)


def test_multiclass_nms_refuses_an_eta_above_one(tmp_path):
    boxes, scores = detections()
    b = o1.parameter(list(boxes.shape), F32, name="b")
    s = o1.parameter(list(scores.shape), F32, name="s")
    xml = save(tmp_path, list(o9.multiclass_nms(b, s, nms_eta=1.0).outputs()), [b, s])
    refused(xml, "nms_eta", "1", "1.5")


MATRIX_CASES = {
    "linear": {},
    "gaussian": {"decay_function": "gaussian", "gaussian_sigma": 0.5},
    "score-across": {"sort_result_type": "score", "sort_result_across_batch": True},
    "class": {"sort_result_type": "classid"},
    "class-across": {"sort_result_type": "classid", "sort_result_across_batch": True},
    "tops-background-post": {
        "nms_top_k": 4,
        "keep_top_k": 5,
        "background_class": 0,
        "post_threshold": 0.3,
    },
    "pixels-i32": {"normalized": False, "output_type": "i32"},
}


@pytest.mark.parametrize("case", MATRIX_CASES)
def test_matrix_nms_matches_openvino(tmp_path, case):
    boxes, scores = detections(seed=5)
    boxes = np.sort(boxes.reshape(2, 10, 2, 2), axis=2).reshape(2, 10, 4) * 3
    attrs = {"score_threshold": 0.2, **MATRIX_CASES[case]}
    pairs = compare(
        tmp_path,
        lambda b, s: list(o8.matrix_nms(b, s, **attrs).outputs()),
        {"boxes": boxes, "scores": scores},
    )
    (outputs, expected), *indices = pairs
    assert_close(indices, exact=True)
    assert_close([(outputs, expected)], atol=1e-6, rtol=1e-6)
    assert len(outputs) > 0


@settings(max_examples=EXAMPLES)
@given(
    seed=st.integers(0, 2**16),
    iou=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
    sigma=st.sampled_from([0.0, 0.4]),
    sort=st.booleans(),
)
def test_nms_9_matches_openvino_on_random_clusters(tmp_path_factory, seed, iou, sigma, sort):
    boxes, scores = detections(batches=1, boxes=12, classes=2, seed=seed)
    tmp_path = tmp_path_factory.mktemp("nms")
    pairs = compare(
        tmp_path,
        lambda b, s: list(
            o9.non_max_suppression(
                b, s, const(6, np.int64), const(iou), const(0.05), const(sigma), "corner", sort
            ).outputs()
        ),
        {"boxes": boxes, "scores": scores},
    )
    indices, selected_scores, valid = pairs
    assert_close([indices, valid], exact=True)
    assert_close([selected_scores], atol=1e-6, rtol=1e-6)


@settings(max_examples=EXAMPLES)
@given(
    seed=st.integers(0, 2**16),
    sort=st.sampled_from(["none", "score", "classid"]),
    across=st.booleans(),
    nms_top_k=st.sampled_from([-1, 2, 5]),
    keep_top_k=st.sampled_from([-1, 3, 7]),
    eta=st.sampled_from([1.0, 0.8]),
    normalized=st.booleans(),
    background=st.sampled_from([-1, 0, 2]),
)
def test_multiclass_nms_matches_openvino_on_random_attributes(
    tmp_path_factory, seed, sort, across, nms_top_k, keep_top_k, eta, normalized, background
):
    boxes, scores = detections(batches=2, boxes=9, classes=3, seed=seed)
    boxes = np.sort(boxes.reshape(2, 9, 2, 2), axis=2).reshape(2, 9, 4) * 3
    attrs = {
        "sort_result_type": sort,
        "sort_result_across_batch": across,
        "nms_top_k": nms_top_k,
        "keep_top_k": keep_top_k,
        "nms_eta": eta,
        "normalized": normalized,
        "background_class": background,
        "iou_threshold": 0.6,
        "score_threshold": 0.1,
    }
    pairs = compare(
        tmp_path_factory.mktemp("multiclass"),
        lambda b, s: list(o9.multiclass_nms(b, s, **attrs).outputs()),
        {"boxes": boxes, "scores": scores},
    )
    assert_close(pairs, exact=True)


@settings(max_examples=EXAMPLES)
@given(
    seed=st.integers(0, 2**16),
    decay=st.sampled_from(["linear", "gaussian"]),
    nms_top_k=st.sampled_from([-1, 4]),
    keep_top_k=st.sampled_from([-1, 5]),
    post=st.sampled_from([0.0, 0.3]),
    normalized=st.booleans(),
)
def test_matrix_nms_matches_openvino_on_random_attributes(
    tmp_path_factory, seed, decay, nms_top_k, keep_top_k, post, normalized
):
    boxes, scores = detections(batches=2, boxes=9, classes=3, seed=seed)
    boxes = np.sort(boxes.reshape(2, 9, 2, 2), axis=2).reshape(2, 9, 4) * 3
    attrs = {
        "decay_function": decay,
        "nms_top_k": nms_top_k,
        "keep_top_k": keep_top_k,
        "post_threshold": post,
        "normalized": normalized,
        "score_threshold": 0.1,
        "sort_result_type": "score",
        "sort_result_across_batch": True,
    }
    pairs = compare(
        tmp_path_factory.mktemp("matrix"),
        lambda b, s: list(o8.matrix_nms(b, s, **attrs).outputs()),
        {"boxes": boxes, "scores": scores},
    )
    (outputs, expected), *counts = pairs
    assert_close(counts, exact=True)
    assert_close([(outputs, expected)], atol=1e-6, rtol=1e-6)


EMPTY_CASES = {
    "nms": lambda b, s: list(
        o9.non_max_suppression(b, s, const(3, np.int64), const(0.5), const(0.1)).outputs()
    ),
    "soft-nms": lambda b, s: list(
        o9.non_max_suppression(
            b, s, const(3, np.int64), const(0.5), const(0.1), const(0.5)
        ).outputs()
    ),
    "multiclass-nms": lambda b, s: list(o9.multiclass_nms(b, s).outputs()),
    "adaptive-multiclass-nms": lambda b, s: list(
        o9.multiclass_nms(b, s, nms_eta=0.5, iou_threshold=0.7).outputs()
    ),
    "matrix-nms": lambda b, s: list(o8.matrix_nms(b, s).outputs()),
}


@pytest.mark.parametrize("case", EMPTY_CASES)
def test_nms_layers_select_nothing_from_no_boxes(tmp_path, case):
    """With no boxes, MulticlassNms and MatrixNms in OpenVINO's CPU plugin return an empty
    ``selected_num``; the spec (and b2s_onnx) give one zero per image."""
    boxes = o1.parameter(ov.PartialShape([-1, -1, 4]), F32, name="b")
    scores = o1.parameter(ov.PartialShape([-1, 2, -1]), F32, name="s")
    xml = save(tmp_path, EMPTY_CASES[case](boxes, scores), [boxes, scores])
    feeds = {"b": np.zeros((2, 0, 4), F32), "s": np.zeros((2, 2, 0), F32)}
    ours = list(run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values())
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = [np.asarray(compiled(feeds)[port]) for port in compiled.outputs]
    assert_close(list(zip(ours[:2], theirs[:2], strict=True)), exact=True)
    assert ours[0].shape[0] == 0
    per_image = "multiclass" in case or "matrix" in case
    assert ours[2].tolist() == ([0, 0] if per_image else [0])
