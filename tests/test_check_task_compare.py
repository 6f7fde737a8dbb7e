"""Task-level comparison: detections matched by image, label and IoU; top-K classes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from b2s_onnx.errors import B2SError
from b2s_onnx.parity.task_compare import (
    compare_detections,
    compare_topk,
    detection_rows,
    iou,
    parse_task,
)

BOX_A = [0.1, 0.1, 0.4, 0.4]
BOX_B = [0.5, 0.5, 0.9, 0.8]


def detections(*rows, capacity: int = 6) -> np.ndarray:
    """A [1, 1, capacity, 7] DetectionOutput tensor: the rows, then a -1 row, then junk."""
    out = np.full((capacity, 7), 7.0, np.float32)  # junk after the terminator must be ignored
    out[: len(rows)] = rows
    out[len(rows)] = [-1, 0, 0, 0, 0, 0, 0]
    return out.reshape(1, 1, capacity, 7)


def test_rows_end_at_the_first_minus_one_image_id():
    assert detection_rows(detections([0, 1, 0.9, *BOX_A])).shape == (1, 7)
    full = np.ones((1, 1, 3, 7), np.float32)
    assert detection_rows(full).shape == (3, 7)


def test_reordered_rows_with_slightly_different_scores_match():
    expected = detections([0, 1, 0.90, *BOX_A], [0, 2, 0.85, *BOX_B])
    actual = detections([0, 2, 0.8501, *BOX_B], [0, 1, 0.9002, *BOX_A])
    outcome = compare_detections(expected, actual, atol=1e-3, rtol=0)
    assert outcome.passed
    counts = outcome.to_dict()
    assert (counts["matched"], counts["missed"], counts["extra"]) == (2, 0, 0)
    assert counts["max_score_diff"] == pytest.approx(2e-4, abs=1e-6)


def test_a_score_outside_tolerance_fails_although_the_boxes_match():
    expected = detections([0, 1, 0.9, *BOX_A])
    actual = detections([0, 1, 0.8, *BOX_A])
    outcome = compare_detections(expected, actual, atol=1e-3, rtol=0)
    assert not outcome.passed
    assert outcome.to_dict()["score_mismatches"] == 1


@pytest.mark.parametrize(
    ("actual_row", "missed", "extra"),
    [
        ([0, 2, 0.9, *BOX_A], 1, 1),  # another label
        ([1, 1, 0.9, *BOX_A], 1, 1),  # another image
        ([0, 1, 0.9, *BOX_B], 1, 1),  # no overlap
    ],
)
def test_detections_of_another_label_image_or_place_are_missed_and_extra(actual_row, missed, extra):
    common = [0, 3, 0.3, 0, 0, 1, 1], [1, 3, 0.3, 0, 0, 1, 1]  # each image's cut-off: 0.3
    expected = detections([0, 1, 0.9, *BOX_A], *common)
    actual = detections(actual_row, *common)
    counts = compare_detections(expected, actual, atol=1e-3, rtol=0).to_dict()
    assert (counts["missed"], counts["extra"], counts["matched"]) == (missed, extra, 2)
    assert counts["passed"] is False


def test_a_detection_at_the_cut_off_is_borderline_not_missed():
    """Quantized detectors: a score at the threshold may survive on one side only."""
    expected = detections([0, 1, 0.9, *BOX_A], [0, 2, 0.3001, *BOX_B])
    actual = detections([0, 1, 0.9, *BOX_A], [0, 4, 0.3, 0.0, 0.0, 0.05, 0.05])
    counts = compare_detections(expected, actual, atol=1e-3, rtol=0).to_dict()
    assert counts["passed"] is True
    assert counts["borderline"] == 2
    assert (counts["missed"], counts["extra"]) == (0, 0)


def test_detections_need_seven_columns():
    with pytest.raises(B2SError, match=r"not one of detection rows \[1, 1, N, 7\]"):
        compare_detections(np.zeros((1, 10)), np.zeros((1, 10)), 0, 0)


@given(st.floats(0, 0.5), st.floats(0, 0.5), st.floats(0.01, 0.5), st.floats(0.01, 0.5))
def test_iou_is_one_with_itself_and_symmetric(x, y, w, h):
    box = np.array([x, y, x + w, y + h])
    other = np.array([[x + w / 2, y, x + 1.5 * w, y + h]])
    assert iou(box, box[None])[0] == pytest.approx(1.0)
    assert iou(box, other)[0] == pytest.approx(iou(other[0], box[None])[0])
    assert iou(box, other)[0] == pytest.approx(1 / 3)  # half overlaps: 0.5 / 1.5


def test_topk_agrees_when_only_the_order_inside_the_top_changes():
    expected = np.array([[0.1, 0.5, 0.3, 0.05, 0.05]])
    actual = np.array([[0.1, 0.5, 0.29, 0.06, 0.05]])
    outcome = compare_topk(expected, actual, 3, atol=1e-3, rtol=0)
    assert outcome.passed
    assert outcome.to_dict() == {
        "mode": "topk",
        "passed": True,
        "k": 3,
        "rows": 1,
        "top1_agree": 1,
        "topk_agree": 1,
    }


def test_topk_fails_when_another_class_enters_the_top():
    expected = np.array([[0.9, 0.5, 0.3, 0.05], [0.1, 0.2, 0.3, 0.4]])
    actual = np.array([[0.9, 0.5, 0.01, 0.4], [0.1, 0.2, 0.3, 0.4]])
    counts = compare_topk(expected, actual, 3, atol=1e-3, rtol=0).to_dict()
    assert counts["passed"] is False
    assert (counts["topk_agree"], counts["top1_agree"]) == (1, 2)


def test_near_tied_classes_may_swap_within_tolerance():
    expected = np.array([0.4, 0.4000001, 0.1])
    actual = np.array([0.4000002, 0.4, 0.1])
    assert compare_topk(expected, actual, 1, atol=1e-5, rtol=0).passed
    assert not compare_topk(expected, actual, 1, atol=0, rtol=0).passed


@pytest.mark.parametrize("text", ["detection", "topk", "topk:0", "topk:x", "top5"])
def test_unknown_comparisons_are_refused(text):
    with pytest.raises(B2SError, match="unknown comparison"):
        parse_task(text)


def test_known_comparisons_parse():
    assert parse_task("topk:5").k == 5
    assert parse_task("detections").mode == "detections"
