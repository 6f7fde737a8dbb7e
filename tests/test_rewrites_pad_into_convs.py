"""`pad-into-convs`: a zero Pad of H and W read only by convolutions becomes their pads
(onnxruntime folds a Pad into a sole Conv reader itself, not into two)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.pad_into_convs import PadIntoConvs
from tests.helpers import converted_matches_openvino, float_model

NAME = PadIntoConvs.name
INPUT = [1, 8, 15, 13]


def _padded_pair(
    pads=(0, 0, 2, 1, 0, 0, 3, 2), value=0.0, mode="constant", readers=("Conv", "Conv")
) -> onnx.ModelProto:
    """x -> Pad -> the ``readers`` (a 3x3 stride-2 VALID depthwise Conv, a 3x3 Conv with
    its own pads, or a MaxPool); the first reader's output is y, the others are outputs
    too."""
    rng = np.random.default_rng(2)
    constants = {
        "pads": np.asarray(pads, np.int64),
        "value": np.asarray(value, np.float32),
        "dw": rng.standard_normal([8, 1, 3, 3]).astype(np.float32),
        "w": rng.standard_normal([8, 8, 3, 3]).astype(np.float32),
    }
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["p"], name="pad", mode=mode)]
    outputs = []
    for i, kind in enumerate(readers):
        out = f"r{i}"
        if kind == "Conv" and i == 0:
            nodes.append(
                helper.make_node(
                    "Conv", ["p", "dw"], [out], group=8, strides=[2, 2], auto_pad="VALID"
                )
            )
        elif kind == "Conv":
            nodes.append(
                helper.make_node("Conv", ["p", "w"], [out], strides=[2, 2], pads=[1, 0, 0, 1])
            )
        else:
            nodes.append(helper.make_node(kind, ["p"], [out], kernel_shape=[3, 3], strides=[2, 2]))
        outputs.append(out)
    nodes.append(helper.make_node("Identity", [outputs[0]], ["y"]))
    model = float_model(nodes, constants, INPUT)
    model.graph.output.extend(
        helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [None] * 4)
        for out in outputs[1:]
    )
    return model


def _run(model) -> list[np.ndarray]:
    x = np.random.default_rng(0).standard_normal(INPUT).astype(np.float32)
    return list(run_onnxruntime(model, {"x": x}).values())


def _rewritten(model):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    report = apply_rewrites(copy, (PadIntoConvs(),))
    onnx.checker.check_model(copy, full_check=True)
    return report, copy


@pytest.mark.parametrize("pads", [(0, 0, 2, 1, 0, 0, 3, 2), (0, 0, 0, 0, 0, 0, 1, 1)])
def test_a_pad_read_by_two_convs_becomes_their_pads_within_rounding(pads):
    model = _padded_pair(pads)
    report, rewritten = _rewritten(model)
    assert report.counts() == {NAME: 1}
    assert "Pad" not in [n.op_type for n in rewritten.graph.node]
    convs = [n for n in rewritten.graph.node if n.op_type == "Conv"]
    attrs = [{a.name: helper.get_attribute_value(a) for a in c.attribute} for c in convs]
    spatial = [pads[2], pads[3], pads[6], pads[7]]
    assert attrs[0]["pads"] == spatial
    assert "auto_pad" not in attrs[0]
    assert attrs[1]["pads"] == [a + b for a, b in zip([1, 0, 0, 1], spatial, strict=True)]
    for after, before in zip(_run(rewritten), _run(model), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"value": 1.0}, "not a constant zero padding of H and W"),
        ({"mode": "reflect"}, "not a constant zero padding of H and W"),
        ({"pads": (1, 0, 1, 1, 0, 0, 1, 1)}, "not a constant zero padding of H and W"),
    ],
    ids=["non-zero", "reflect", "batch"],
)
def test_other_paddings_are_declined_with_the_reason(kwargs, reason):
    model = _padded_pair(**kwargs)
    report, rewritten = _rewritten(model)
    assert [d.reason for d in report.declined] == [reason]
    for after, before in zip(_run(rewritten), _run(model), strict=True):
        assert after.tobytes() == before.tobytes()


@pytest.mark.parametrize("readers", [("Conv",), ("Conv", "MaxPool")], ids=["sole", "pool"])
def test_a_pad_onnxruntime_folds_or_a_pool_reads_is_left_alone(readers):
    report, rewritten = _rewritten(_padded_pair(readers=readers))
    assert not report.fired
    assert "Pad" in [n.op_type for n in rewritten.graph.node]


def test_a_converted_nasnet_style_pad_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    rng = np.random.default_rng(4)
    data = ops.parameter([1, 16, 21, 21], np.float32, name="features")
    padded = ops.pad(
        ops.relu(data),
        ops.constant(np.asarray([0, 0, 2, 2], np.int64)),
        ops.constant(np.asarray([0, 0, 3, 3], np.int64)),
        "constant",
        ops.constant(np.float32(0)),
    )
    branches = [
        ops.group_convolution(
            padded,
            ops.constant(rng.standard_normal([16, 1, 1, k, k]).astype(np.float32)),
            [2, 2],
            [0, 0],
            [0, 0],
            [1, 1],
        )
        for k in (5, 7)
    ]
    feeds = {"features": rng.standard_normal([1, 16, 21, 21]).astype(np.float32)}
    model = ov.Model(branches, [data])
    result = converted_matches_openvino(model, tmp_path, feeds, rtol=1e-5, atol=1e-5)
    assert result.rewrites.counts().get(NAME) == 1
