"""ScatterUpdate, ScatterNDUpdate and ScatterElementsUpdate against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset4 as o4  # noqa: E402
import openvino.opset12 as o12  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {
    ("ScatterUpdate", "opset3"),
    ("ScatterNDUpdate", "opset4"),
    ("ScatterNDUpdate", "opset15"),
    ("ScatterElementsUpdate", "opset3"),
    ("ScatterElementsUpdate", "opset12"),
    ("SliceScatter", "opset15"),
}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


def updates(shape, dtype=F32, seed=5):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        return c(rng.standard_normal(shape), dtype)
    return c(rng.integers(-9, 9, shape), dtype)


SCATTER_UPDATE = [
    # (data shape, indices, axis)
    ([4, 3], [2, 0], 0),
    ([4, 3], [[2], [3]], 0),
    ([2, 5, 3], [4, 1, 0], 1),
    ([2, 5, 3], [[0, 2], [1, 1]], -1),
]


@pytest.mark.parametrize(("shape", "indices", "axis"), SCATTER_UPDATE)
@pytest.mark.parametrize("dtype", [F32, I32])
def test_scatter_update_is_exact(tmp_path, shape, indices, axis, dtype):
    index = np.asarray(indices)
    positive = axis % len(shape)
    update_shape = [*shape[:positive], *index.shape, *shape[positive + 1 :]]
    pairs, _ = run_both(
        tmp_path,
        lambda a: o3.scatter_update(a, c(index, I32), updates(update_shape, dtype), c(axis)),
        [shape],
        [dtype],
    )
    assert_close(pairs, exact=True)


def test_scatter_update_with_scalar_indices_follows_openvino_reference(tmp_path):
    """The CPU plugin refuses scalar indices; OpenVINO's core reference writes one slice."""
    data = np.arange(12, dtype=F32).reshape(3, 4)
    fresh = np.asarray([-1.0, -2.0, -3.0], F32)

    def build(a):
        return o3.scatter_update(a, c(2, I32), c(fresh, F32), c(1))

    param = o1.parameter([3, 4], F32, name="in0")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([build(param)], [param]), xml, compress_to_fp16=False)
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"in0": data}).values()
    out = ov.Tensor(np.zeros((3, 4), F32))
    arguments = [data, np.asarray(2, I32), fresh, np.asarray(1, I64)]
    assert build(param).evaluate([out], [ov.Tensor(v) for v in arguments])
    assert ours.tobytes() == out.data.tobytes()


ND_CASES = [
    # (data shape, indices, update shape)
    ([4, 3], [[1], [3]], [2, 3]),
    ([4, 3], [[1, 2], [0, 0], [-1, 1]], [3]),
    ([2, 3, 4], [[[0, 1]], [[1, 2]]], [2, 1, 4]),
]


@pytest.mark.parametrize(("shape", "indices", "update_shape"), ND_CASES)
def test_scatter_nd_update_4_is_exact(tmp_path, shape, indices, update_shape):
    pairs, _ = run_both(
        tmp_path,
        lambda a: o4.scatter_nd_update(a, c(indices, I32), updates(update_shape)),
        [shape],
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("reduction", ["none", "sum", "sub", "prod", "min", "max"])
@pytest.mark.parametrize("dtype", [F32, I32])
def test_scatter_nd_update_15_reduces_duplicates(tmp_path, reduction, dtype):
    indices = [[1], [3], [1], [0]] if reduction != "none" else [[1], [3], [0]]
    pairs, _ = run_both(
        tmp_path,
        lambda a: o15.scatter_nd_update(
            a, c(indices), updates([len(indices), 3], dtype), reduction
        ),
        [[4, 3]],
        [dtype],
    )
    assert_close(pairs, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_update_3_is_exact(tmp_path, axis):
    indices = [[[1, 0], [2, -1]], [[0, 2], [1, 1]]] if axis != -1 else [[[1, 0]], [[2, -1]]]
    index = np.asarray(indices)
    if axis == 0:
        index = np.asarray([[[1, 0]], [[0, 2]]])
    pairs, _ = run_both(
        tmp_path,
        lambda a: o3.scatter_elements_update(a, c(index, I32), updates(index.shape), c(axis)),
        [[3, 3, 3]],
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("reduction", ["none", "sum", "prod", "min", "max", "mean"])
@pytest.mark.parametrize("use_init_val", [True, False])
@pytest.mark.parametrize("dtype", [F32, I32])
def test_scatter_elements_update_12_reduces_duplicates(tmp_path, reduction, use_init_val, dtype):
    indices = [[0, 2, 0], [1, 1, 3], [3, 2, 0]] if reduction != "none" else [[0, 2, 1]] * 3
    pairs, _ = run_both(
        tmp_path,
        lambda a: o12.scatter_elements_update(
            a, c(indices), updates([3, 3], dtype), c(1), reduction, use_init_val
        ),
        [[3, 4]],
        [dtype],
    )
    assert_close(pairs, atol=1e-6)


def test_scatter_elements_update_12_unknown_reduction_is_refused(tmp_path):
    param = o1.parameter([3, 4], F32, name="x")
    node = o12.scatter_elements_update(param, c([[0, 1]]), updates([1, 2]), c(1), "sum")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [param]), xml, compress_to_fp16=False)
    xml.write_text(xml.read_text().replace('reduction="sum"', 'reduction="median"'))
    with pytest.raises(b2s_onnx.B2SError, match="reduction"):
        b2s_onnx.convert_ir(xml)


def test_scatter_nd_update_15_reduction_needs_a_recent_target_opset(tmp_path):
    param = o1.parameter([4, 3], F32, name="x")
    node = o15.scatter_nd_update(param, c([[1]]), updates([1, 3]), "max")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [param]), xml, compress_to_fp16=False)
    with pytest.raises(b2s_onnx.B2SError, match="reduction='max' needs ONNX opset 18"):
        b2s_onnx.convert_ir(xml, opset=17)


SLICE_SCATTERS = [
    # (data shape, start, stop, step, axes)
    ([4, 6], [1], [3], [1], [0]),
    ([4, 6], [0, 5], [4, 0], [2, -2], [0, 1]),
    ([2, 3, 5], [-1], [-100], [-1], [2]),
    ([3, 4], [0, 1], [2, 4], [1, 2], None),
]


@pytest.mark.parametrize(("shape", "start", "stop", "step", "axes"), SLICE_SCATTERS)
@pytest.mark.parametrize("dtype", [F32, I32])
def test_slice_scatter_is_exact(tmp_path, shape, start, stop, step, axes, dtype):
    window = [slice(None)] * len(shape)
    for axis, begin, end, stride in zip(axes or range(len(start)), start, stop, step, strict=True):
        window[axis] = slice(begin, end, stride)
    sliced = np.zeros(shape)[tuple(window)]
    bounds = [c(v) for v in (start, stop, step)] + ([] if axes is None else [c(axes)])
    pairs, _ = run_both(
        tmp_path,
        lambda a: o15.slice_scatter(a, updates(list(sliced.shape), dtype), *bounds),
        [shape],
        [dtype],
    )
    assert_close(pairs, exact=True)
