"""`quantized-grouped-conv-in-blocks`: on maps of up to 400 positions a quantized grouped
Conv of 2, 4 or 8 channels a group, quantized again, keeps its QDQ form with the groups
merged into 16-channel ones, so that onnxruntime runs one QLinearConv whose integer sums are
the grouped layer's; larger maps, many groups in other counts and other widths are left to
`grouped-conv-integer` and QLinearConv. A few groups (up to 7) that cannot merge into
16-channel ones become one dense QLinearConv on maps of up to 28x28; pairs of 24-channel
groups merge into 48-channel ones on any map."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from b2s_onnx.ir.int8_coverage import optimized_op_counts
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.quantized_groups_in_blocks import QuantizedGroupsInBlocks
from tests.helpers import assert_well_formed
from tests.test_rewrites_grouped_conv_integer import _feeds, _model

NAME = QuantizedGroupsInBlocks.name


def _group(model) -> int:
    conv = next(n for n in model.graph.node if n.op_type in ("Conv", "ConvInteger"))
    return next(a.i for a in conv.attribute if a.name == "group")


@pytest.mark.parametrize(
    ("channels", "groups", "merged"), [(32, 8, 2), (64, 32, 4), (64, 8, 4), (128, 16, 8)]
)
@pytest.mark.parametrize("size", [(7, 7), (20, 20), (10, 9)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_narrow_groups_on_a_small_map_merge_into_one_qlinearconv(
    channels, groups, merged, size, bias
):
    model = _model(channels, groups, bias, size=size)
    feeds = _feeds(model)
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    assert_well_formed(model)
    assert report.counts() == {NAME: 1}
    assert _group(model) == merged
    counts = optimized_op_counts(model)
    assert counts["QLinearConv"] == 1
    assert counts["ConvInteger"] == 0
    # The same integer sums and QLinearConv's own requantization: the same bytes.
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["y"], before)


@pytest.mark.parametrize("size", [(7, 7), (30, 28)])
def test_pairs_of_24_channel_groups_merge_on_any_map(size):
    """Groups of 24 run as QLinearConv's grouped path either way; pairs merged into 48
    channels measured faster from 7x7 to 56x56."""
    model = _model(96, 4, size=size)
    feeds = _feeds(model)
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    assert_well_formed(model)
    assert [f.detail.split(" at ")[0] for f in report.fired] == [
        "4 groups of 24 channels -> 2 of 48"
    ]
    assert _group(model) == 2
    assert optimized_op_counts(model)["QLinearConv"] == 1
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["y"], before)


def test_weights_with_a_zero_point_are_merged_with_it():
    """Between the old groups the merged weights hold each channel's zero point, which
    dequantizes to exactly 0."""
    model = _model(32, 4, size=(8, 8))
    for tensor in model.graph.initializer:
        if tensor.name == "w_zero":
            tensor.CopyFrom(numpy_helper.from_array(np.full(32, 3, np.int8), "w_zero"))
    feeds = _feeds(model)
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    assert report.counts() == {NAME: 1}
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["y"], before)


@pytest.mark.parametrize(
    ("channels", "groups", "size", "dense"),
    [((24, 3, (28, 28), 24)), (40, 5, (14, 14), 40), (56, 7, (9, 11), 56), (24, 6, (8, 8), 24)],
)
def test_a_few_groups_off_the_block_merge_into_one_dense_qlinearconv(channels, groups, size, dense):
    """RegNet's odd counts of 8-channel groups (and 6 of 4) have no 16-channel merge: up to
    7 groups on a map of up to 28x28 become one dense QLinearConv."""
    model = _model(channels, groups, size=size)
    feeds = _feeds(model)
    before = run_onnxruntime(model, feeds)["y"]
    report = apply_rewrites(model)
    assert_well_formed(model)
    assert report.counts() == {NAME: 1}
    assert _group(model) == 1
    assert any(f"-> 1 of {dense}" in f.detail for f in report.fired)
    counts = optimized_op_counts(model)
    assert counts["QLinearConv"] == 1
    assert counts["ConvInteger"] == 0
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)["y"], before)


@pytest.mark.parametrize(
    ("channels", "groups", "size", "why"),
    [
        (32, 8, (21, 20), "larger map: ConvInteger measured faster"),
        (24, 3, (30, 28), "three groups on a map larger than 28x28"),
        (104, 13, (8, 8), "13 groups: dense would be 13x the work"),
        (12, 6, (8, 8), "12 channels: too few for QLinearConv"),
        (64, 4, (8, 8), "16 channels a group already"),
        (120, 5, (8, 8), "five groups of 24: no pairs"),
        (96, 8, (8, 8), "12 channels a group"),
        (32, 32, (8, 8), "depthwise"),
    ],
)
def test_others_are_left_alone(channels, groups, size, why):
    model = _model(channels, groups, size=size)
    report = apply_rewrites(model)
    assert NAME not in report.counts(), why
    assert _group(model) == groups
