"""GatherTree against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
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


def test_gather_tree_with_dynamic_steps_is_refused(tmp_path):
    params = [
        o1.parameter(s, I32, name=f"in{i}") for i, s in enumerate([[-1, 2, 3], [-1, 2, 3], [2]])
    ]
    node = o1.gather_tree(*params, o1.constant(np.asarray(1, I32)))
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], params), xml)
    with pytest.raises(b2s_onnx.B2SError, match="static max_time"):
        b2s_onnx.convert_ir(xml)
