"""CTCLoss against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset4 as o4  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32 = np.float32, np.int32

COVERED_LAYERS = {("CTCLoss", "opset4")}

BATCH, STEPS, CLASSES = 3, 8, 5
#: Repeats inside and across targets, so that collapsing and uniqueness matter.
LABELS = np.asarray(
    [[1, 1, 2, 1, 3, 0, 0, 2], [0, 3, 3, 3, 1, 2, 2, 0], [2, 1, 2, 0, 0, 1, 1, 1]], I32
)


@pytest.mark.parametrize(
    ("collapse", "merge", "unique", "blank"),
    [
        (False, True, False, None),
        (True, True, False, None),
        (False, False, False, None),
        (False, True, True, None),
        (True, False, True, 0),
        (False, True, False, 0),
    ],
)
def test_ctc_loss_matches_openvino(tmp_path, collapse, merge, unique, blank):
    labels = LABELS if blank is None else np.where(LABELS == 0, 4, LABELS).astype(I32)

    def build(logits):
        extra = [] if blank is None else [o1.constant(np.asarray(blank, I32))]
        return o4.ctc_loss(
            logits,
            o1.constant(np.asarray([8, 6, 7], I32)),
            o1.constant(labels),
            o1.constant(np.asarray([5, 4, 3], I32)),
            *extra,
            preprocess_collapse_repeated=collapse,
            ctc_merge_repeated=merge,
            unique=unique,
        )

    pairs, _ = run_both(tmp_path, build, [[BATCH, STEPS, CLASSES]])
    assert_close(pairs, atol=1e-4, rtol=1e-5)


def test_ctc_loss_with_dynamic_time_is_refused(tmp_path):
    logits = o1.parameter([2, -1, 4], F32, name="x")
    lengths = o1.constant(np.asarray([2, 2], I32))
    node = o4.ctc_loss(logits, lengths, o1.constant(np.zeros((2, 3), I32)), lengths)
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [logits]), xml)
    with pytest.raises(b2s_onnx.B2SError, match="static time"):
        b2s_onnx.convert_ir(xml)
