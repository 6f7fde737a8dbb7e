"""Transposes move past element-wise ops with constant operands (the constants transposed
along), so the NHWC layout Transposes around fused convolutions meet and cancel, and the
bias/BatchNorm/Relu6 ops follow the Conv directly; every bit stays the same."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.lowering import LoweringOptions, lower_model
from b2s_onnx.parity.runtime import run_onnxruntime

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]


def nhwc_layers(*, channel_shape=(1, 1, 1, 4), constant_first: bool = False):
    """Conv -> Transpose(NHWC) -> Add, Mul, Sub, Clip -> Transpose(NCHW) -> Conv: two TF
    convs as OpenVINO's frontend converts them, once the atrous patterns are fused."""
    rng = np.random.default_rng(3)
    dtype, elem = np.float32, TensorProto.FLOAT
    constants = {
        "w1": rng.standard_normal([4, 4, 3, 3]).astype(dtype),
        "w2": rng.standard_normal([4, 4, 1, 1]).astype(dtype),
        "bias": rng.standard_normal(channel_shape).astype(dtype),
        "scale": rng.standard_normal(channel_shape).astype(dtype),
        "shift": rng.standard_normal(channel_shape).astype(dtype),
        "low": np.asarray(0, dtype),
        "high": np.asarray(6, dtype),
    }
    sub_inputs = ["shift", "scaled"] if constant_first else ["scaled", "shift"]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Transpose", ["c1"], ["t1"], perm=TO_NHWC, name="to_nhwc"),
        helper.make_node("Add", ["t1", "bias"], ["biased"]),
        helper.make_node("Mul", ["biased", "scale"], ["scaled"]),
        helper.make_node("Sub", sub_inputs, ["shifted"]),
        helper.make_node("Clip", ["shifted", "low", "high"], ["relu6"]),
        helper.make_node("Transpose", ["relu6"], ["t2"], perm=TO_NCHW, name="to_nchw"),
        helper.make_node("Conv", ["t2", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "nhwc_layers",
        [helper.make_tensor_value_info("x", elem, [1, 4, 7, 6])],
        [helper.make_tensor_value_info("y", elem, [None] * 4)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


CASES = {
    "per-channel constants": {},
    "scalar-like constants": {"channel_shape": (1,)},
    "constant first operand": {"constant_first": True},
    "full-rank constants": {"channel_shape": (1, 7, 6, 4)},
}


@pytest.mark.parametrize("params", CASES.values(), ids=CASES.keys())
def test_layout_transposes_around_element_wise_ops_cancel_with_the_same_bits(params):
    model = nhwc_layers(**params)
    result = lower_model(model)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Transpose" not in ops
    assert ops[:2] == ["Conv", "Add"]
    assert [f.rewrite for f in result.rewrites.fired].count("transpose-sinking") == 1
    onnx.checker.check_model(result.model, full_check=True)
    x = np.random.default_rng(0).standard_normal([1, 4, 7, 6]).astype(np.float32)
    ours = run_onnxruntime(result.model, {"x": x})["y"]
    literal = run_onnxruntime(
        lower_model(model, options=LoweringOptions(fuse=False)).model, {"x": x}
    )
    assert ours.tobytes() == literal["y"].tobytes()


def test_a_transpose_stops_at_an_op_whose_other_operand_is_computed():
    model = nhwc_layers()
    add = next(n for n in model.graph.node if n.op_type == "Add")
    add.input[1] = "t1"  # t1 + t1: both operands move, nothing constant to transpose
    result = lower_model(model)
    assert "transpose-sinking" not in [f.rewrite for f in result.rewrites.fired]
    assert [n.op_type for n in result.model.graph.node].count("Transpose") == 2


def test_a_transpose_of_a_graph_input_stays_before_the_ops_it_would_gain_nothing_past():
    """Input (NHWC image) -> Transpose -> Mul, Add per channel -> Conv, as OpenVINO writes
    a Keras model's input normalization: moved down, the Add would broadcast over a
    3-wide innermost axis with nothing to fold it into and no Transpose to meet."""
    rng = np.random.default_rng(5)
    constants = {
        "scale": np.asarray(1 / 255, np.float32),
        "mean": rng.standard_normal([1, 3, 1, 1]).astype(np.float32),
        "w": rng.standard_normal([4, 3, 3, 3]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=TO_NCHW, name="to_nchw"),
        helper.make_node("Mul", ["t", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mean"], ["centred"]),
        helper.make_node("Conv", ["centred", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "input_normalization",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 9, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    result = lower_model(model)
    assert [n.op_type for n in result.model.graph.node] == ["Transpose", "Mul", "Add", "Conv"]
    declined = [d for d in result.rewrites.declined if d.rewrite == "transpose-sinking"]
    assert declined
    assert "nothing before the Transpose folds" in declined[0].reason
