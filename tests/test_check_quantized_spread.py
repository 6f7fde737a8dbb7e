"""A quantized IR's outputs that miss the default tolerance are judged again within
OpenVINO's own INT8-vs-float-simulation spread; real errors still fail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.check import OutputReport
from b2s_onnx.parity.ir_check import _run_openvino, check_ir
from b2s_onnx.parity.quantized_spread import FLOAT_SIMULATION_CONFIG, spread, widen_by_spread
from tests.helpers import with_output_offset

INT8 = Path(__file__).resolve().parents[1] / "models" / "int8"


def _report(name: str, passed: bool = False, atol: float = 0.1) -> OutputReport:
    return OutputReport(name, "float32", [4], passed, 1, 0.3, 0.3, atol, 1e-3, "outside tolerance")


def test_spread_is_the_largest_difference_between_openvinos_two_results():
    expected = np.asarray([0.0, 1.0, 2.0, 3.0], np.float32)
    assert spread(expected, expected + np.asarray([0, 0.25, -0.5, 0], np.float32)) == 0.5
    assert spread(expected, expected[:3]) is None
    assert spread(expected.astype(np.int32), expected.astype(np.int32)) is None
    assert spread(expected, np.asarray([0, np.nan, 2, 3], np.float32)) is None


def test_an_output_within_atol_plus_the_spread_passes_with_the_reason():
    expected = {"y": np.zeros(4, np.float32)}
    simulated = {"y": np.asarray([0, 0.2, 0, 0], np.float32)}
    actual = {"y": np.asarray([0, 0, 0.29, 0], np.float32)}
    reports = [_report("y")]
    widen_by_spread(reports, expected, simulated, actual)
    (report,) = reports
    assert report.passed
    assert report.mismatches == 0
    assert report.atol == pytest.approx(0.1 + 0.2)
    assert "float simulation" in report.tolerance_reason
    assert "0.2" in report.tolerance_reason


def test_an_output_beyond_atol_plus_the_spread_still_fails_and_says_so():
    expected = {"y": np.zeros(4, np.float32)}
    simulated = {"y": np.asarray([0, 0.2, 0, 0], np.float32)}
    actual = {"y": np.asarray([0, 0, 0.31, 0], np.float32)}
    reports = [_report("y")]
    widen_by_spread(reports, expected, simulated, actual)
    (report,) = reports
    assert not report.passed
    assert report.atol == 0.1
    assert report.tolerance_reason == ""
    assert "still outside" in report.reason


def test_passed_task_compared_and_unsimulated_outputs_keep_their_verdict():
    zeros = np.zeros(4, np.float32)
    far = np.full(4, 0.15, np.float32)
    compared = _report("task")
    compared.comparison = {"task": "topk:1", "passed": False}
    reports = [_report("ok", passed=True), compared, _report("unsimulated")]
    expected = {"ok": zeros, "task": zeros, "unsimulated": zeros}
    simulated = {"ok": far, "task": far}
    actual = {"ok": zeros, "task": far, "unsimulated": far}
    widen_by_spread(reports, expected, simulated, actual)
    assert [r.passed for r in reports] == [True, False, False]
    assert all(r.atol == 0.1 for r in reports)


@pytest.mark.openvino
def test_openvinos_float_simulation_switch_is_accepted_and_changes_the_arithmetic():
    """The CPU plugin still knows the property, and it does run the FakeQuantize layers
    another way: yolo_tiny's nine layers turn last-bit differences into visible ones."""
    xml = INT8 / "yolo_tiny" / "int8.xml"
    feeds = {"image": np.random.default_rng(0).standard_normal([1, 3, 128, 128], np.float32)}
    names = [o.name for o in b2s_onnx.convert_ir(xml).graph.output]
    integer = _run_openvino(xml, None, feeds, names)
    simulated = _run_openvino(xml, None, feeds, names, FLOAT_SIMULATION_CONFIG)
    assert set(simulated) == set(integer) == set(names)
    widths = [spread(integer[n], simulated[n]) for n in names]
    assert all(w is not None and 0 < w < 1 for w in widths)


@pytest.mark.openvino
def test_a_conversion_error_in_a_quantized_ir_still_fails_after_the_second_opinion():
    xml = INT8 / "conv_stack" / "int8.xml"
    converted = with_output_offset(b2s_onnx.convert_ir(xml), 1.0)
    result = check_ir(xml, converted)
    assert not result.passed
    first = result.outputs[0]
    assert "float simulation" in first.reason
    assert first.atol == pytest.approx(0.1)
    assert "float_simulation_s" in result.timings


@pytest.mark.openvino
def test_a_given_tolerance_is_kept_and_openvino_runs_once():
    xml = INT8 / "conv_stack" / "int8.xml"
    converted = with_output_offset(b2s_onnx.convert_ir(xml), 1.0)
    result = check_ir(xml, converted, atol=0.1)
    assert not result.passed
    assert "float simulation" not in result.outputs[0].reason
    assert "float_simulation_s" not in result.timings


@pytest.mark.openvino
def test_a_passing_quantized_ir_runs_openvino_once():
    xml = INT8 / "conv_stack" / "int8.xml"
    result = check_ir(xml, b2s_onnx.convert_ir(xml))
    assert result.passed
    assert "float_simulation_s" not in result.timings
    assert all(o.tolerance_reason == "" for o in result.outputs)
