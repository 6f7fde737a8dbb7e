"""OpenVINO runs the reference in a child process: a crash there (OpenVINO 2026.4
segfaults compiling a TensorFlow NMS graph it wrote itself) becomes a B2SError that names
the signal, so ``check`` still ends with one of its exit codes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import read_ir_xml
from b2s_onnx.parity.ir_check import run_isolated


def test_a_result_comes_back_from_the_child():
    value = run_isolated(np.add, np.arange(3), 2)
    np.testing.assert_array_equal(value, [2, 3, 4])


def test_a_crash_in_the_child_is_an_error_naming_the_signal():
    with pytest.raises(B2SError, match=r"crashed \(signal SIGABRT\).*--reference onnx"):
        run_isolated(os.abort)


def test_an_exception_in_the_child_is_reported_with_its_first_line():
    with pytest.raises(B2SError, match=r"reference openvino-cpu failed: .*invalid literal"):
        run_isolated(int, "not a number")


def test_a_b2s_error_in_the_child_keeps_its_message(tmp_path):
    missing = tmp_path / "missing.xml"
    with pytest.raises(B2SError, match=r"missing\.xml: no such file$"):
        run_isolated(read_ir_xml, missing)
