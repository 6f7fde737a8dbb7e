"""The two-Transpose DepthToSpace the interleaving rewrites write equals ONNX's DepthToSpace
bit for bit, in both modes, for any block and shape."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites._depth_to_space import depth_to_space_in_stages
from b2s_onnx.rewrites._rule import Fired
from tests.helpers import assert_well_formed, float_model


class _InStages:
    name = "depth-to-space-in-stages"
    exact = True
    anchors = ("DepthToSpace",)

    def attempt(self, index, node, report):
        mode = index.text(node, "mode", "DCR")
        block = int(index.attribute(node, "blocksize"))
        shape = tuple(index.info(node.output[0]).shape)
        index.claim([node])
        staged = depth_to_space_in_stages(
            index, node.input[0], node.output[0], node.name, mode, block, shape
        )
        index.replace([node], staged)
        return Fired(self.name, node.name, mode)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize(
    ("block", "shape"), [(2, [1, 12, 5, 7]), (3, [2, 18, 4, 3]), (4, [1, 16, 1, 2])]
)
def test_the_stages_equal_depth_to_space(mode, block, shape):
    node = helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=block, mode=mode)
    model = onnx.shape_inference.infer_shapes(float_model([node], {}, shape))
    x = np.random.default_rng(block).standard_normal(shape).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})["y"]
    report = apply_rewrites(model, (_InStages(),))
    assert report.counts() == {"depth-to-space-in-stages": 1}
    assert_well_formed(model)
    assert [n.op_type for n in model.graph.node].count("Transpose") == 2
    actual = run_onnxruntime(model, {"x": x})["y"]
    assert actual.tobytes() == expected.tobytes()
