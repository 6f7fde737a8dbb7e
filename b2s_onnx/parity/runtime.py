"""Running a model in onnxruntime with every element type, bfloat16 included.

onnxruntime's Python binding cannot convert bfloat16 numpy arrays (``ml_dtypes``) in
either direction, so those tensors travel as their uint16 bit patterns: fed through
``OrtValue.ortvalue_from_numpy_with_onnx_type`` and read back from the output buffer.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Mapping

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort

#: Lines of an OpenVINO message that only say where in its sources it was raised
#: ("Exception from src/inference/src/cpp/core.cpp:117:", "Check 'x' failed at ...:").
_SOURCE_LOCATION = re.compile(r"^(Exception from \S+:\d+:|Check '.*' failed at \S+:\d+:)$")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message that says what went wrong: runtimes append
    multi-line context, and OpenVINO opens with the source locations it passed through."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    telling = [line for line in lines if not _SOURCE_LOCATION.match(line)]
    return (telling or lines or [type(exc).__name__])[0]


def make_session(model: onnx.ModelProto, threads: int = 1) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _to_ort(array: np.ndarray) -> ort.OrtValue:
    # np.ascontiguousarray makes a 0-d array 1-d: the reshape keeps a scalar a scalar.
    contiguous = np.ascontiguousarray(array).reshape(np.shape(array))
    if array.dtype == ml_dtypes.bfloat16:
        bits = contiguous.view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(contiguous)


def _from_ort(value: ort.OrtValue) -> np.ndarray:
    if value.data_type() == "tensor(bfloat16)":
        shape = value.shape()
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.zeros(shape, dtype=ml_dtypes.bfloat16)
        buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr())
        return np.frombuffer(buffer, dtype=np.uint16).copy().view(ml_dtypes.bfloat16).reshape(shape)
    return value.numpy()


def run_session(
    session: ort.InferenceSession, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    values = session.run_with_ort_values(names, {k: _to_ort(v) for k, v in feeds.items()})
    return {name: _from_ort(value) for name, value in zip(names, values, strict=True)}


def run_onnxruntime(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int = 1
) -> dict[str, np.ndarray]:
    return run_session(make_session(model, threads), feeds)
