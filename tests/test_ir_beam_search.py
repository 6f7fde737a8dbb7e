"""GatherTree against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32 = np.float32, np.int32

COVERED_LAYERS = {("GatherTree", "opset1")}


@pytest.mark.parametrize("dtype", [I32, F32])
@pytest.mark.parametrize("seed", [0, 1])
def test_gather_tree_matches_openvino(tmp_path, dtype, seed):
    steps, batch, beam = 6, 3, 4
    rng = np.random.default_rng(seed)
    step_ids = rng.integers(0, 5, (steps, batch, beam)).astype(dtype)
    parents = rng.integers(0, beam, (steps, batch, beam)).astype(dtype)
    lengths = np.asarray([6, 4, 1], dtype)
    pairs, _ = run_both(
        tmp_path,
        lambda s, p, m: o1.gather_tree(s, p, m, o1.constant(np.asarray(3, dtype))),
        [[steps, batch, beam], [steps, batch, beam], [batch]],
        [dtype] * 3,
        feeds={"in0": step_ids, "in1": parents, "in2": lengths},
    )
    assert_close(pairs, exact=True)


def test_gather_tree_with_dynamic_steps_matches_openvino(tmp_path):
    """Beam search outputs have a run-time number of steps. (max_seq_len 0 is left out: the
    CPU plugin returns uninitialised memory for it.)"""
    params = [
        o1.parameter(s, I32, name=f"in{i}") for i, s in enumerate([[-1, 2, 3], [-1, 2, 3], [2]])
    ]
    xml = tmp_path / "m.xml"
    node = o1.gather_tree(*params, o1.constant(np.asarray(1, I32)))
    ov.save_model(ov.Model([node], params), xml)
    converted = b2s_onnx.convert_ir(xml)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    rng = np.random.default_rng(5)
    for steps in (1, 4, 7):
        feeds = {
            "in0": rng.integers(0, 4, (steps, 2, 3)).astype(I32),
            "in1": rng.integers(0, 3, (steps, 2, 3)).astype(I32),
            "in2": np.asarray([steps, max(steps - 2, 1)], I32),
        }
        (ours,) = run_onnxruntime(converted, feeds).values()
        assert ours.tobytes() == np.asarray(compiled(feeds)[0]).tobytes()
