"""`transpose-in-stages`: a large Transpose that onnxruntime would run as a slow strided copy
becomes the permutation planner's sequence of cheaper Transposes, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.lowering._options import LoweringOptions
from b2s_onnx.lowering._planner import SMALL_TENSOR_BYTES
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.transpose_in_stages import TransposeInStages
from tests.helpers import converted_matches_openvino

NAME = TransposeInStages.name
TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int64): TensorProto.INT64,
}


def _transpose(shape, perm, dtype=np.float32, *, declared=None) -> onnx.ModelProto:
    """One Transpose of input "x" (declared with ``declared`` dims when given)."""
    elem = TYPES[np.dtype(dtype)]
    dims = declared or list(shape)
    node = helper.make_node("Transpose", ["x"], ["y"], name="shuffle", perm=list(perm))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, dims)],
        [helper.make_tensor_value_info("y", elem, [dims[p] for p in perm])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _data(shape, dtype=np.float32, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 200, shape).astype(dtype)


def _rewritten(model: onnx.ModelProto, rule: TransposeInStages) -> dict:
    report = apply_rewrites(model, (rule,))
    onnx.checker.check_model(model, full_check=True)
    return report.counts()


#: Pixel shuffles x4 as PyTorch's old export spells them: (split, perm) for each mode.
SHUFFLES = {
    "depth_first": ([1, 3, 4, 4, 60, 80], [0, 1, 4, 2, 5, 3]),
    "blocks_first": ([1, 4, 4, 3, 60, 80], [0, 3, 4, 1, 5, 2]),
}


@pytest.mark.parametrize("mode", sorted(SHUFFLES))
def test_spelled_out_pixel_shuffle_runs_in_stages_and_matches_openvino(tmp_path, mode):
    ov = pytest.importorskip("openvino")
    import openvino.opset8 as ops

    split, perm = SHUFFLES[mode]
    data = ops.parameter([1, 48, 60, 80], np.float32, name="features")
    moved = ops.transpose(
        ops.reshape(data, ops.constant(np.asarray(split, np.int64)), False),
        ops.constant(np.asarray(perm, np.int64)),
    )
    image = ops.reshape(moved, ops.constant(np.asarray([1, 3, 240, 320], np.int64)), False)
    feeds = {"features": _data([1, 48, 60, 80])}
    # Bit for bit: pure data movement.
    result = converted_matches_openvino(ov.Model([image], [data]), tmp_path, feeds, rtol=0, atol=0)
    assert result.rewrites.counts().get(NAME) == 1
    assert [n.op_type for n in result.model.graph.node].count("Transpose") >= 2
    (actual,) = run_onnxruntime(result.model, feeds).values()
    # The same shuffle from the DepthToSpace op: one lowering's stages, the other's, equal.
    reference = np.transpose(feeds["features"].reshape(split), perm).reshape(1, 3, 240, 320)
    np.testing.assert_array_equal(actual, reference)


def test_direct_strategy_keeps_one_transpose(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset8 as ops

    from b2s_onnx.ir.convert import convert_ir_model

    split, perm = SHUFFLES["depth_first"]
    data = ops.parameter(split, np.float32, name="features")
    moved = ops.transpose(data, ops.constant(np.asarray(perm, np.int64)))
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([moved], [data]), xml, compress_to_fp16=False)
    direct = convert_ir_model(xml, options=LoweringOptions(strategy="direct"))
    assert NAME not in direct.rewrites.counts()
    assert [n.op_type for n in direct.model.graph.node] == ["Transpose"]
    planned = convert_ir_model(xml, options=LoweringOptions(threads=1))
    assert planned.rewrites.counts().get(NAME) == 1


def test_small_tensor_keeps_one_transpose():
    shape, perm = [1, 3, 4, 4, 8, 8], [0, 1, 4, 2, 5, 3]
    assert math.prod(shape) * 4 < SMALL_TENSOR_BYTES
    model = _transpose(shape, perm)
    assert NAME not in _rewritten(model, TransposeInStages())
    assert [n.op_type for n in model.graph.node] == ["Transpose"]


def test_transpose_of_unit_axes_is_left_alone():
    model = _transpose([1, 512, 1, 512], [2, 1, 0, 3])
    assert NAME not in _rewritten(model, TransposeInStages())
    assert len(model.graph.node) == 1


@pytest.mark.parametrize("threads", [None, 1])
def test_permutation_that_keeps_whole_rows_is_left_alone(threads):
    # A channel shuffle: every copied unit is a whole 64 x 64 map, onnxruntime's fast path.
    model = _transpose([1, 4, 16, 64, 64], [0, 2, 1, 3, 4])
    assert NAME not in _rewritten(model, TransposeInStages(threads=threads))


def test_dynamic_shape_is_declined_with_the_reason():
    model = _transpose([1, 3, 4, 4, 60, 80], [0, 1, 4, 2, 5, 3], declared=[1, 3, 4, 4, "h", 80])
    report = apply_rewrites(model, (TransposeInStages(),))
    assert [d.reason for d in report.declined if d.rewrite == NAME] == [
        "the input's shape is not static"
    ]
    assert len(model.graph.node) == 1


@st.composite
def _permutations(draw):
    rank = draw(st.integers(3, 6))
    shape = [draw(st.integers(1, 9)) for _ in range(rank - 2)]
    # Two larger axes, so the tensor crosses the planner's size threshold.
    shape += [draw(st.integers(48, 96)), draw(st.integers(48, 96))]
    shape = draw(st.permutations(shape))
    perm = draw(st.permutations(list(range(rank))))
    dtype = draw(st.sampled_from(sorted(TYPES, key=str)))
    threads = draw(st.sampled_from([None, 1]))
    return list(shape), list(perm), dtype, threads


@settings(max_examples=40, deadline=None)
@given(_permutations())
def test_any_permutation_keeps_every_bit(case):
    shape, perm, dtype, threads = case
    model = _transpose(shape, perm, dtype)
    data = _data(shape, dtype)
    _rewritten(model, TransposeInStages(threads=threads))
    (actual,) = run_onnxruntime(model, {"x": data}).values()
    assert actual.dtype == data.dtype
    np.testing.assert_array_equal(actual, np.transpose(data, perm))
