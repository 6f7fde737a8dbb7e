"""Operand type promotion (ConvertPromoteTypes) against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset14 as o14  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("ConvertPromoteTypes", "opset14")}


@pytest.mark.parametrize(
    ("left", "right", "attrs"),
    [
        (np.int32, np.float32, {"promote_unsafe": True}),
        (np.int16, np.float32, {}),
        (np.float32, np.float32, {}),
        (np.uint8, np.int8, {"promote_unsafe": True}),
        (np.bool_, np.int32, {}),
        (np.int64, np.float32, {"promote_unsafe": True}),
        (np.uint64, np.int32, {"promote_unsafe": True, "u64_integer_promotion_target": "i64"}),
        (np.int8, np.int64, {"pytorch_scalar_promotion": True}),
    ],
)
def test_convert_promote_types_matches_openvino(tmp_path, left, right, attrs):
    pairs, _ = run_both(
        tmp_path,
        lambda a, b: list(o14.convert_promote_types(a, b, **attrs).outputs()),
        [[2, 3], [3]],
        [left, right],
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == pairs[0][1].dtype == pairs[1][0].dtype


def test_convert_promote_types_refuses_an_unknown_u64_target(tmp_path):
    a = o14.parameter([2], np.uint64, name="a")
    b = o14.parameter([2], np.int32, name="b")
    layer = o14.convert_promote_types(a, b, promote_unsafe=True)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(list(layer.outputs()), [a, b]), xml)
    text = xml.read_text()
    assert 'u64_integer_promotion_target="f32"' in text
    xml.write_text(
        text.replace('u64_integer_promotion_target="f32"', 'u64_integer_promotion_target="f99"')
    )
    with pytest.raises(B2SError, match="u64_integer_promotion_target"):
        b2s_onnx.convert_ir(xml)
