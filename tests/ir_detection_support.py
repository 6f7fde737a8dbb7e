"""Shared helpers of the detection-layer tests: building, saving, converting and running
models against OpenVINO's CPU plugin, and the inputs several test modules use."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import settings

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402

F32 = np.float32


def const(values, dtype=F32):
    return o1.constant(np.asarray(values, dtype))


def save(tmp_path, outputs, params, name="model.xml"):
    xml = tmp_path / name
    ov.save_model(ov.Model(outputs, params), xml, compress_to_fp16=False)
    return xml


def compare(tmp_path, build, feeds, opset=18):
    """Like run_both, for models whose inputs all come from ``feeds`` (name -> array), at a
    chosen ONNX opset: (ours, OpenVINO's) pairs."""
    params = [
        o1.parameter(list(value.shape), value.dtype, name=name) for name, value in feeds.items()
    ]
    outputs = build(*params)
    outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
    xml = save(tmp_path, [o.output(0) if hasattr(o, "output") else o for o in outputs], params)
    converted = b2s_onnx.convert_ir(xml, opset=opset)
    onnx.checker.check_model(converted, full_check=True)
    ours = run_onnxruntime(converted, feeds)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = compiled(feeds)
    return [
        (ours[next(n for n in ours if n in port.get_names())], np.asarray(theirs[port]))
        for port in compiled.outputs
    ]


def refused(xml, key, old, new):
    """Converting ``xml`` with attribute ``key`` changed from ``old`` to ``new`` raises a
    B2SError naming the attribute."""
    text = xml.read_text()
    assert f'{key}="{old}"' in text
    xml.write_text(text.replace(f'{key}="{old}"', f'{key}="{new}"'))
    with pytest.raises(b2s_onnx.B2SError, match=key):
        b2s_onnx.convert_ir(xml)


def detections(batches=2, boxes=10, classes=3, seed=0, center=False):
    """Boxes that overlap in clusters (so suppression happens), with a few exact copies."""
    rng = np.random.default_rng(seed)
    anchors = rng.uniform(0, 8, (batches, 3, 2))
    start = anchors[:, rng.integers(0, 3, boxes)] + rng.normal(0, 0.6, (batches, boxes, 2))
    size = rng.uniform(1.0, 3.0, (batches, boxes, 2))
    corners = np.concatenate([start, start + size], axis=-1)
    corners[:, 1] = corners[:, 0]  # an exact duplicate: IoU 1
    corners[:, 2, [0, 2]] = corners[:, 2, [2, 0]]  # flipped corners: still the same box
    if center:
        corners = np.concatenate([start + size / 2, size], axis=-1)
    scores = rng.uniform(0, 1, (batches, classes, boxes))
    return corners.astype(F32), scores.astype(F32)


ROIS = np.array(
    [[1, 1, 7, 6], [0.5, 2.3, 11.2, 9.1], [-2, -1, 3, 3], [4, 4, 4.5, 4.2], [9, 8, 14, 13]],
    F32,
)


def roi_feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "data": rng.standard_normal((2, 3, 10, 12)).astype(F32),
        "rois": ROIS,
        "batch": np.array([0, 1, 1, 0, 1], np.int32),
    }


#: Each example compiles a model in OpenVINO: a quarter of the profile's examples (12 in CI).
EXAMPLES = max(12, settings.default.max_examples // 4)
