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


def test_openvino_source_locations_give_way_to_what_went_wrong():
    from b2s_onnx.parity.runtime import first_line

    message = (
        "Exception from src/inference/src/cpp/core.cpp:117:\n"
        "Exception from src/inference/src/dev/plugin.cpp:54:\n"
        "Check 'newNode' failed at src/plugins/intel_cpu/src/node.cpp:1626:\n"
        "Unsupported operation of type: GroupedMatMul name: G_3\n"
        "Details:\n"
    )
    assert (
        first_line(RuntimeError(message))
        == "Unsupported operation of type: GroupedMatMul name: G_3"
    )
    assert first_line(RuntimeError("plain\nmore")) == "plain"
    assert first_line(RuntimeError("Exception from a.cpp:1:")) == "Exception from a.cpp:1:"
    assert first_line(RuntimeError("")) == "RuntimeError"


def test_a_scalar_input_reaches_onnxruntime_as_a_scalar():
    """np.ascontiguousarray turns a 0-d array into a 1-d one: fed that way, an Unsqueeze
    of a scalar input came out 2-D (check failed a TensorFlow linspace IR on it)."""
    import onnx
    from onnx import TensorProto, helper

    from b2s_onnx.parity.runtime import run_onnxruntime

    graph = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    for value in (np.array(2.5, np.float32), np.float32(2.5)):
        (result,) = run_onnxruntime(model, {"x": np.asarray(value)}).values()
        assert result.shape == (1,)
