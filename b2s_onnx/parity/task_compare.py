"""Task-level comparison for outputs whose element order carries no meaning.

A quantized detector or classifier may reorder near-equal scores after a last-bit
difference: element-wise comparison then reports a mismatch although every detection (or
the top classes) agree. Two modes judge what a user of the output sees instead:

- ``detections``: SSD-style DetectionOutput rows ``[image_id, label, score, x0, y0, x1, y1]``
  (shape ``[1, 1, N, 7]``; a row with image_id -1 ends the list). An expected row is matched
  by an actual row of the same image and label whose box overlaps it with IoU >=
  :data:`DETECTION_IOU` (greedily, best score first); matched scores must agree within the
  output's tolerance. Unmatched rows are missed (expected only) or extra (actual only),
  except *borderline* ones whose score is within tolerance of the lowest score the other
  side kept for that image: they sit at the confidence or keep-top-k cut-off.
- ``topk:K``: per batch row, the K best classes must be the same set, and the best class
  the same, up to classes whose expected scores are within tolerance of each other (ties).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from b2s_onnx.errors import B2SError

#: Minimum overlap for two detections of the same image and label to be the same object.
DETECTION_IOU = 0.5

_TASK = re.compile(r"^(detections|topk:([1-9][0-9]*))$")


@dataclass(frozen=True)
class TaskSpec:
    mode: str
    k: int = 0


@dataclass
class TaskComparison:
    mode: str
    passed: bool
    summary: str
    counts: dict

    def to_dict(self) -> dict:
        return {"mode": self.mode, "passed": self.passed, **self.counts}


def parse_task(text: str) -> TaskSpec:
    """``"detections"`` or ``"topk:K"``."""
    match = _TASK.match(text.strip())
    if match is None:
        raise B2SError(f"unknown comparison '{text}' (detections, topk:K)")
    if match.group(2):
        return TaskSpec("topk", int(match.group(2)))
    return TaskSpec("detections")


def compare_task(
    spec: TaskSpec, expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float
) -> TaskComparison:
    if spec.mode == "topk":
        return compare_topk(expected, actual, spec.k, atol, rtol)
    return compare_detections(expected, actual, atol, rtol)


def detection_rows(output: np.ndarray) -> np.ndarray:
    """The valid rows of a DetectionOutput tensor: those before the first image_id -1."""
    if output.ndim < 2 or output.shape[-1] != 7:
        raise B2SError(
            f"shape {list(output.shape)} is not one of detection rows [1, 1, N, 7]; "
            "--compare detections applies to DetectionOutput results"
        )
    rows = np.asarray(output, dtype=np.float64).reshape(-1, 7)
    ends = np.flatnonzero(rows[:, 0] == -1)
    return rows[: ends[0]] if ends.size else rows


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of ``box`` [x0, y0, x1, y1] with each row of ``boxes``."""
    x0 = np.maximum(box[0], boxes[:, 0])
    y0 = np.maximum(box[1], boxes[:, 1])
    x1 = np.minimum(box[2], boxes[:, 2])
    y1 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)

    def area(b):
        return np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)

    union = area(box) + area(boxes) - inter
    identical = np.all(boxes == box, axis=1).astype(np.float64)  # degenerate boxes: equal or not
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), identical)


def _borderline(score: float, image: float, other: np.ndarray, atol: float, rtol: float) -> bool:
    kept = other[other[:, 0] == image, 2]
    return kept.size > 0 and score <= kept.min() + atol + rtol * abs(kept.min())


def compare_detections(
    expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float
) -> TaskComparison:
    exp, act = detection_rows(expected), detection_rows(actual)
    taken = np.zeros(len(act), dtype=bool)
    matched = score_mismatches = missed = borderline = 0
    max_score_diff, min_iou = 0.0, 1.0
    for row in exp[np.argsort(-exp[:, 2], kind="stable")]:
        same = np.flatnonzero(~taken & (act[:, 0] == row[0]) & (act[:, 1] == row[1]))
        overlaps = iou(row[3:], act[same, 3:]) if same.size else np.zeros(0)
        if overlaps.size and overlaps.max() >= DETECTION_IOU:
            best = same[int(np.argmax(overlaps))]
            taken[best] = True
            matched += 1
            diff = abs(act[best, 2] - row[2])
            max_score_diff = max(max_score_diff, float(diff))
            min_iou = min(min_iou, float(overlaps.max()))
            score_mismatches += int(diff > atol + rtol * abs(row[2]))
        elif _borderline(row[2], row[0], act, atol, rtol):
            borderline += 1
        else:
            missed += 1
    extra = 0
    for row in act[~taken]:
        if _borderline(row[2], row[0], exp, atol, rtol):
            borderline += 1
        else:
            extra += 1
    passed = missed == 0 and extra == 0 and score_mismatches == 0
    counts = {
        "iou_threshold": DETECTION_IOU,
        "expected": len(exp),
        "actual": len(act),
        "matched": matched,
        "missed": missed,
        "extra": extra,
        "borderline": borderline,
        "score_mismatches": score_mismatches,
        "max_score_diff": max_score_diff,
        "min_iou": min_iou if matched else None,
    }
    summary = (
        f"detections: {matched} matched, {missed} missed, {extra} extra, "
        f"{borderline} borderline, {score_mismatches} score(s) outside tolerance"
    )
    return TaskComparison("detections", passed, summary, counts)


def _rows(array: np.ndarray) -> np.ndarray:
    values = np.asarray(array, dtype=np.float64)
    return values.reshape(1, -1) if values.ndim < 2 else values.reshape(values.shape[0], -1)


def compare_topk(
    expected: np.ndarray, actual: np.ndarray, k: int, atol: float, rtol: float
) -> TaskComparison:
    exp, act = _rows(expected), _rows(actual)
    k = min(k, exp.shape[1])
    top1_agree = set_agree = 0
    for want, got in zip(exp, act, strict=True):
        want_top = np.argsort(-want, kind="stable")[:k]
        got_top = np.argsort(-got, kind="stable")[:k]
        kth = want[want_top[-1]]
        tol = atol + rtol * abs(kth)
        differing = set(want_top.tolist()) ^ set(got_top.tolist())
        if all(abs(want[i] - kth) <= tol for i in differing):
            set_agree += 1
        best = want[want_top[0]]
        if abs(want[got_top[0]] - best) <= atol + rtol * abs(best):
            top1_agree += 1
    rows = exp.shape[0]
    passed = top1_agree == rows and set_agree == rows
    counts = {"k": k, "rows": rows, "top1_agree": top1_agree, "topk_agree": set_agree}
    summary = f"top-{k}: {set_agree}/{rows} row(s) agree, top-1 {top1_agree}/{rows}"
    return TaskComparison("topk", passed, summary, counts)
