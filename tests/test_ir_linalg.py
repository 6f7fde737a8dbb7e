"""Einsum, Inverse, Identity and ConvertPromoteTypes against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset7 as o7  # noqa: E402
import openvino.opset14 as o14  # noqa: E402
import openvino.opset16 as o16  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {
    ("Einsum", "opset7"),
    ("Inverse", "opset14"),
    ("Identity", "opset16"),
    ("ConvertPromoteTypes", "opset14"),
}

EINSUMS = [
    ("ij,jk->ik", [[2, 3], [3, 4]]),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 2]]),
    ("ii->i", [[3, 3]]),
    ("ij->ji", [[2, 3]]),
    ("...ij,...j->...i", [[2, 3, 4], [2, 4]]),
    ("i,j->ij", [[3], [4]]),
    ("abc,cd,a->bd", [[2, 3, 4], [4, 2], [2]]),
]


@pytest.mark.parametrize(("equation", "shapes"), EINSUMS)
def test_einsum_matches_openvino(tmp_path, equation, shapes):
    pairs, _ = run_both(tmp_path, lambda *xs: o7.einsum(list(xs), equation), shapes)
    assert_close(pairs, atol=1e-5, rtol=1e-5)


def test_einsum_with_wrong_operand_count_is_refused(tmp_path):
    a = o1.parameter([2, 3], F32, name="a")
    b = o1.parameter([3, 4], F32, name="b")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o7.einsum([a, b], "ij,jk->ik")], [a, b]), xml)
    xml.write_text(xml.read_text().replace('equation="ij,jk->ik"', 'equation="ij->ji"'))
    with pytest.raises(b2s_onnx.B2SError, match="equation"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("shape", [[1, 1], [3, 3], [2, 4, 4]])
def test_inverse_matches_openvino(tmp_path, adjoint, shape):
    rng = np.random.default_rng(len(shape) + shape[-1])
    data = rng.standard_normal(shape).astype(F32) + 2 * np.eye(shape[-1], dtype=F32)
    pairs, _ = run_both(tmp_path, lambda a: o14.inverse(a, adjoint), [shape], feeds={"in0": data})
    assert_close(pairs, atol=1e-4, rtol=1e-4)


def test_inverse_pivots_a_zero_leading_entry(tmp_path):
    data = np.asarray([[[0.0, 2.0, 1.0], [1.0, 0.0, 0.0], [3.0, 1.0, 0.0]]], F32)
    pairs, _ = run_both(tmp_path, lambda a: o14.inverse(a, False), [[1, 3, 3]], feeds={"in0": data})
    assert_close(pairs, atol=1e-5)
    np.testing.assert_allclose(pairs[0][0], np.linalg.inv(data), atol=1e-5)


def test_identity_is_exact(tmp_path):
    pairs, _ = run_both(tmp_path, o16.identity, [[2, 3]], [I32])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(
    ("left", "right", "kwargs"),
    [
        (I32, F32, {"promote_unsafe": True}),
        (np.int8, I64, {}),
        (np.uint8, np.int8, {"promote_unsafe": True}),
    ],
)
def test_convert_promote_types_matches_openvino(tmp_path, left, right, kwargs):
    pairs, _ = run_both(
        tmp_path,
        lambda a, b: list(o14.convert_promote_types(a, b, **kwargs).outputs()),
        [[2, 3], [3]],
        [left, right],
    )
    assert_close(pairs, exact=True)
    assert [ours.dtype for ours, _ in pairs] == [theirs.dtype for _, theirs in pairs]
