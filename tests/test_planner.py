"""The lowering planner: onnxruntime's Transpose dispatch, staged plans, and their choice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import b2s_onnx
from b2s_onnx.builders import single_op_model
from b2s_onnx.lowering._planner import (
    MULTITHREAD_TINY_OUTWARD_COST,
    choose_plan,
    plan_cost,
    single_axis_move,
    staged_plan,
)
from b2s_onnx.lowering._sizes import Size

S = Size.of


@pytest.mark.parametrize(
    ("perm", "expected"),
    [
        ([1, 0, 2], ("outward", 1, 0)),  # ambiguous swap: onnxruntime checks outward first
        ([1, 2, 0, 3], ("inward", 0, 2)),
        ([0, 2, 3, 1], ("inward", 1, 3)),
        ([2, 0, 1, 3], ("outward", 2, 0)),
        ([0, 2, 1], ("outward", 2, 1)),
        ([2, 0, 3, 1], None),
        ([0, 1, 2], None),
    ],
)
def test_single_axis_moves_are_classified_as_onnxruntime_does(perm, expected):
    assert single_axis_move(perm) == expected


@given(st.permutations(list(range(5))))
def test_a_staged_plan_composes_to_the_permutation(perm):
    sizes = [S(n) for n in (2, 3, 5, 7, 11)]
    data = np.arange(2 * 3 * 5 * 7 * 11).reshape(2, 3, 5, 7, 11)
    current = data
    for stage in staged_plan(sizes, list(perm)):
        current = current.reshape([s.static for s in stage.shape]).transpose(stage.perm)
        assert single_axis_move(stage.perm) is not None or len(stage.perm) == 2
    assert np.array_equal(current.reshape(-1), data.transpose(perm).reshape(-1))


def test_stages_never_take_onnxruntimes_slow_outward_path_on_a_large_axis():
    x = 16 * 64 * 56
    for stage in staged_plan([S(2), S(2), S(x), S(56)], [2, 0, 3, 1]):
        kind, source, _ = single_axis_move(stage.perm)
        assert kind == "inward"
        assert stage.shape[source].static <= 64


def test_nchw_interleave_is_staged_and_nhwc_row_moves_stay_direct():
    x = 16 * 64 * 56
    nchw = choose_plan([S(2), S(2), S(x), S(56)], [2, 0, 3, 1], 4)
    assert len(nchw) == 2
    nhwc = choose_plan([S(2), S(2), S(16 * 56), S(56), S(64)], [2, 0, 3, 1, 4], 4)
    assert len(nhwc) == 1
    assert plan_cost(nchw, 4) < plan_cost(
        choose_plan([S(2), S(2), S(x), S(56)], [2, 0, 3, 1], 4, "direct"), 4
    )


def test_small_tensors_keep_one_transpose():
    assert len(choose_plan([S(2), S(2), S(3), S(5)], [2, 0, 3, 1], 4)) == 1


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="unknown strategy"):
        choose_plan([S(2), S(3)], [1, 0], 4, "fastest")


def test_large_nchw_batch_to_space_is_lowered_in_stages_and_exact():
    index = {"block_shape": [1, 1, 2, 2], "crops_begin": [0, 0, 0, 1], "crops_end": [0, 0, 1, 0]}
    model = single_op_model("BatchToSpace", [8, 32, 24, 40], index=index)
    lowered = b2s_onnx.lower(model)
    assert [n.op_type for n in lowered.graph.node].count("Transpose") == 2
    data = np.random.default_rng(0).standard_normal((8, 32, 24, 40)).astype(np.float32)
    from b2s_onnx.ops import batch_to_space
    from tests.helpers import assert_same_bits, run_lowered

    expected = batch_to_space.reference(data, *(np.array(v) for v in index.values()))
    assert_same_bits(run_lowered(lowered, {"data": data}), expected)


def test_multithreaded_sessions_avoid_onnxruntimes_tiny_unit_outward_kernel():
    """SpaceToBatch's de-interleave is a 4-byte outward move: ~2x a copy at one thread but
    ~30x at two in onnxruntime 1.31, so only a single-threaded plan may use it."""
    x = 16 * 64 * 56
    factors, perm = [S(x), S(2), S(56), S(2)], [1, 3, 0, 2]
    single = choose_plan(factors, perm, 4, threads=1)
    several = choose_plan(factors, perm, 4)
    assert any(single_axis_move(s.perm) == ("outward", 2, 1) for s in single)
    assert plan_cost(several, 4) < MULTITHREAD_TINY_OUTWARD_COST
    assert plan_cost(single, 4, threads=1) < plan_cost(several, 4, threads=1) or single == several
