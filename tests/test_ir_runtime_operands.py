"""Operands OpenVINO's converters leave as run-time tensors (an ONNX graph input feeding
``axes``, split lengths or scales): each is converted to the ONNX form that takes the
operand as an input, and compared with OpenVINO on several values of it (with numpy where
OpenVINO's CPU plugin cannot compile the case: a run-time rank, or no kernel)."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset1 as o1
import openvino.opset4 as o4
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

F32, I64 = np.float32, np.int64

REDUCTIONS = {
    "ReduceSum": o1.reduce_sum,
    "ReduceMean": o1.reduce_mean,
    "ReduceMax": o1.reduce_max,
    "ReduceMin": o1.reduce_min,
    "ReduceProd": o1.reduce_prod,
    "ReduceL1": o4.reduce_l1,
    "ReduceL2": o4.reduce_l2,
}


def _ours(tmp_path, outputs, params, feeds) -> list[np.ndarray]:
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(outputs, params), xml, compress_to_fp16=False)
    return list(run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values())


@pytest.mark.parametrize(
    ("axes", "keep"),
    # OpenVINO's CPU plugin compiles dropped run-time axes only when one axis goes.
    [([1], False), ([1], True), ([-1, 0], True), ([0, 1, 2], True)],
    ids=["1-drop", "1-keep", "-1,0-keep", "0,1,2-keep"],
)
@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_reductions_over_run_time_axes_match_openvino(tmp_path, reduction, keep, axes):
    def build(data, listed):
        return REDUCTIONS[reduction](data, listed, keep)

    data = np.random.default_rng(0).uniform(0.5, 1.5, (2, 3, 4)).astype(F32)
    feeds = {"in0": data, "in1": np.asarray(axes, I64)}
    pairs, _ = run_both(tmp_path, build, [[2, 3, 4], [len(axes)]], [F32, I64], feeds=feeds)
    assert_close(pairs)


NUMPY = {"ReduceSum": np.sum, "ReduceMax": np.max, "ReduceProd": np.prod}


@pytest.mark.parametrize("reduction", sorted(NUMPY))
@pytest.mark.parametrize("axes", [[0, 2], [-1, 1]], ids=str)
def test_several_run_time_axes_dropped_match_numpy(tmp_path, reduction, axes):
    data, listed = o1.parameter([2, 3, 4], F32, name="data"), o1.parameter([2], I64, name="ax")
    reduced = REDUCTIONS[reduction](data, listed, False)
    values = np.random.default_rng(2).uniform(0.5, 1.5, (2, 3, 4)).astype(F32)
    feeds = {"data": values, "ax": np.asarray(axes, I64)}
    (ours,) = _ours(tmp_path, [reduced], [data, listed], feeds)
    expected = NUMPY[reduction](values, axis=tuple(axes))
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_empty_run_time_axes_reduce_nothing_as_in_openvino(tmp_path):
    """OpenVINO's rule (no axes: no reduction); its CPU plugin cannot compile the run-time
    rank this gives, so the check is against the rule."""
    data, listed = o1.parameter([2, 3], F32, name="data"), o1.parameter([0], I64, name="ax")
    values = np.arange(6, dtype=F32).reshape(2, 3)
    feeds = {"data": values, "ax": np.zeros(0, I64)}
    (ours,) = _ours(tmp_path, [o1.reduce_sum(data, listed, False)], [data, listed], feeds)
    assert ours.tobytes() == values.tobytes()


@pytest.mark.parametrize("logical", ["and", "or"])
@pytest.mark.parametrize("axes", [[1], [0, -1]], ids=str)
def test_logical_reductions_over_run_time_axes_match_numpy(tmp_path, logical, axes):
    """OpenVINO's CPU plugin has no kernel for these with run-time axes."""
    reduce = o1.reduce_logical_and if logical == "and" else o1.reduce_logical_or
    data = o1.parameter([3, 4], np.bool_, name="data")
    listed = o1.parameter([len(axes)], I64, name="ax")
    values = np.random.default_rng(1).integers(0, 2, (3, 4)).astype(bool)
    feeds = {"data": values, "ax": np.asarray(axes, I64)}
    (ours,) = _ours(tmp_path, [reduce(data, listed, True)], [data, listed], feeds)
    expected = (np.all if logical == "and" else np.any)(values, axis=tuple(axes), keepdims=True)
    assert ours.tobytes() == expected.tobytes()
