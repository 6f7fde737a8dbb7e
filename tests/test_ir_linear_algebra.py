"""Inverse-14 against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset14 as o14  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("Inverse", "opset14")}


def _well_conditioned(shape, seed):
    """Random matrices plus a multiple of the identity, with rows in shuffled order (so the
    pivot search has to swap rows)."""
    rng = np.random.default_rng(seed)
    size = shape[-1]
    matrices = rng.standard_normal(shape) + 3 * np.eye(size)
    return matrices[..., rng.permutation(size), :].astype(np.float32)


@pytest.mark.parametrize("shape", [[1, 1], [3, 3], [2, 4, 4], [2, 3, 6, 6]])
@pytest.mark.parametrize("adjoint", [False, True])
def test_inverse_matches_openvino(tmp_path, shape, adjoint):
    pairs, _ = run_both(
        tmp_path,
        lambda x: o14.inverse(x, adjoint),
        [shape],
        feeds={"in0": _well_conditioned(shape, len(shape))},
    )
    assert_close(pairs, atol=1e-5, rtol=1e-4)


def test_inverse_refuses_an_unknown_adjoint_flag(tmp_path):
    x = o14.parameter([2, 2], np.float32, name="x")
    layer = o14.inverse(x, True)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('adjoint="true"', 'adjoint="perhaps"'))
    with pytest.raises(B2SError, match="adjoint"):
        b2s_onnx.convert_ir(xml)
