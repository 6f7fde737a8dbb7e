"""A float IR's output that misses the default tolerance only where elements cancel towards
zero is judged again with atol widened by a hundred-thousandth of the output's scale; real
errors still fail, and a given tolerance is kept."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.check import OutputReport
from b2s_onnx.parity.ir_check import check_ir
from b2s_onnx.parity.scale_tolerance import SCALE_RTOL, output_scale, widen_by_scale
from tests.helpers import with_output_offset


def _report(name: str, passed: bool = False, atol: float = 1e-4) -> OutputReport:
    return OutputReport(name, "float32", [4], passed, 1, 5e-4, 0.01, atol, 1e-3, "outside")


def test_the_scale_is_the_largest_finite_magnitude():
    assert output_scale(np.asarray([1.0, -600.0, np.inf, np.nan], np.float32)) == 600.0
    assert output_scale(np.asarray([np.nan], np.float32)) == 0.0
    assert output_scale(np.asarray([5, -7], np.int32)) == 0.0


def test_a_cancelled_element_within_the_scales_rounding_passes_with_the_reason():
    expected = {"y": np.asarray([600.0, 0.065, -300.0, 1.0], np.float32)}
    actual = {"y": expected["y"] + np.asarray([0, 5e-4, 0, 0], np.float32)}
    reports = [_report("y")]
    widen_by_scale(reports, expected, actual)
    (report,) = reports
    assert report.passed
    assert report.mismatches == 0
    assert report.reason == ""
    assert report.atol == pytest.approx(1e-4 + SCALE_RTOL * 600)
    assert "scale" in report.tolerance_reason
    assert "600" in report.tolerance_reason


def test_an_error_beyond_the_scales_rounding_still_fails_and_says_so():
    expected = {"y": np.asarray([600.0, 0.065, -300.0, 1.0], np.float32)}
    actual = {"y": expected["y"] + np.asarray([0, 0.05, 0, 0], np.float32)}
    reports = [_report("y")]
    widen_by_scale(reports, expected, actual)
    (report,) = reports
    assert not report.passed
    assert report.atol == 1e-4
    assert report.tolerance_reason == ""
    assert "still outside" in report.reason


def test_passed_and_task_compared_outputs_keep_their_verdict():
    values = np.asarray([600.0, 0.0, 0.0, 0.0], np.float32)
    near = values + np.asarray([0, 5e-4, 0, 0], np.float32)
    compared = _report("task")
    compared.comparison = {"task": "topk:1", "passed": False}
    reports = [_report("ok", passed=True), compared]
    widen_by_scale(reports, {"ok": values, "task": values}, {"ok": near, "task": near})
    assert [r.passed for r in reports] == [True, False]
    assert all(r.atol == 1e-4 for r in reports)


def _identity_ir(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    data = ops.parameter([1, 4, 16, 16], np.float32, name="x")
    y = ops.multiply(data, ops.constant(np.asarray([1.0], np.float32)))
    xml = tmp_path / "scaled.xml"
    ov.save_model(ov.Model([y], [data]), xml, compress_to_fp16=False)
    return xml


@pytest.mark.openvino
@pytest.mark.parametrize(("offset", "passes"), [(5e-3, True), (1.0, False)])
def test_a_converted_ir_is_judged_at_its_outputs_scale(tmp_path, offset, passes):
    """Inputs up to 1000: 5e-3 is rounding at that scale (elements near zero miss the
    default 1e-4 + 1e-3 |x|), 1.0 is an error."""
    xml = _identity_ir(tmp_path)
    converted = with_output_offset(b2s_onnx.convert_ir(xml), offset)
    result = check_ir(xml, converted, val_range={"*": (-1000.0, 1000.0)})
    (output,) = result.outputs
    assert result.passed is passes
    if passes:
        assert "scale" in output.tolerance_reason
    else:
        assert "still outside" in output.reason


@pytest.mark.openvino
def test_a_given_tolerance_is_kept(tmp_path):
    xml = _identity_ir(tmp_path)
    converted = with_output_offset(b2s_onnx.convert_ir(xml), 5e-3)
    result = check_ir(xml, converted, atol=1e-4, val_range={"*": (-1000.0, 1000.0)})
    (output,) = result.outputs
    assert not result.passed
    assert output.atol == 1e-4
    assert output.tolerance_reason == ""
