"""The eight real IR models of the shared corpus: convert, check, run, and match OpenVINO.

Tolerances (absolute, on outputs whose magnitude is at most ~1.2), and why:
- FP32 models and FP16 models (weights widened to f32, as OpenVINO's CPU plugin does under
  the f32 hint): 1e-4; only float summation order differs.
- The tolerance scales with the output's magnitude (its largest absolute value, when above
  1): palm-detection's regressors reach ~900, and f32 summation order alone moves their
  small elements by up to 3.5e-4 (4e-7 of the output's scale).
- person-attributes-recognition-crossroad-0230 is INT8 (FakeQuantize): 5e-2. OpenVINO's CPU
  plugin runs the quantized layers in integer arithmetic; a last-bit difference before a
  FakeQuantize can move a value by one quantization step, which the next layers amplify.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"
MANIFEST = CORPUS / "MANIFEST.json"
TOLERANCE = {"person-attributes-recognition-crossroad-0230": 5e-2}
DEFAULT_TOLERANCE = 1e-4

pytestmark = pytest.mark.skipif(not MANIFEST.is_file(), reason="shared/ir-corpus not present")


def _entries() -> list[dict]:
    if not MANIFEST.is_file():
        return []
    return json.loads(MANIFEST.read_text())


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e["name"])
def test_corpus_model_converts_runs_and_matches_openvino(entry):
    ov = pytest.importorskip("openvino")
    xml = CORPUS / entry["name"] / "model.xml"
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    assert [i.name for i in converted.graph.input] == [i["name"] for i in entry["inputs"]]
    compiled = ov.Core().compile_model(
        ov.Core().read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    tolerance = TOLERANCE.get(entry["name"], DEFAULT_TOLERANCE)
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        feeds = {
            i["name"]: rng.integers(0, 256, i["shape_used"]).astype(np.float32)
            for i in entry["inputs"]
        }
        ours = run_onnxruntime(converted, feeds)
        theirs = compiled(feeds)
        for port in compiled.outputs:
            name = next(n for n in ours if n in port.get_names())
            expected = np.asarray(theirs[port])
            assert ours[name].shape == expected.shape
            scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
            np.testing.assert_allclose(ours[name], expected, atol=tolerance * scale, rtol=0)
