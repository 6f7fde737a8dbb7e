"""Regenerates the example models in this folder.

Each ONNX model carries custom-domain nodes (``org.openvinotoolkit``) as an exporter that
knows OpenVINO's ops would write them; ``ir/`` holds an OpenVINO IR for ``convert`` (written
with the openvino package, a test dependency). Run: ``python models/make_examples.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.builders import DEFAULT_DOMAIN, single_op_model

HERE = Path(__file__).resolve().parent


def batch_to_space() -> onnx.ModelProto:
    """NHWC BatchToSpace with crops and a dynamic batch, as in dilated-convolution models."""
    return single_op_model(
        "BatchToSpace",
        ["N", 14, 14, 32],
        index={"block_shape": [1, 2, 2, 1], "crops_begin": [0, 1, 1, 0], "crops_end": [0, 1, 1, 0]},
        node_name="b2s",
    )


def dilated_block() -> onnx.ModelProto:
    """SpaceToBatch -> Conv -> BatchToSpace: how TensorFlow writes a dilated convolution."""
    rng = np.random.default_rng(7)
    weights = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node(
            "SpaceToBatch",
            ["input", "block", "pads_begin", "pads_end"],
            ["s2b"],
            domain=DEFAULT_DOMAIN,
            name="space_to_batch",
        ),
        helper.make_node("Conv", ["s2b", "weights"], ["conv"], name="conv", pads=[0, 0, 0, 0]),
        helper.make_node(
            "BatchToSpace",
            ["conv", "block", "crops_begin", "crops_end"],
            ["b2s"],
            domain=DEFAULT_DOMAIN,
            name="batch_to_space",
        ),
        helper.make_node("Relu", ["b2s"], ["output"], name="relu"),
    ]
    initializers = [
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.int64), "block"),
        numpy_helper.from_array(np.array([0, 0, 2, 2], np.int64), "pads_begin"),
        numpy_helper.from_array(np.array([0, 0, 2, 2], np.int64), "pads_end"),
        numpy_helper.from_array(np.array([0, 0, 0, 0], np.int64), "crops_begin"),
        numpy_helper.from_array(np.array([0, 0, 0, 0], np.int64), "crops_end"),
        numpy_helper.from_array(weights, "weights"),
    ]
    graph = helper.make_graph(
        nodes,
        "dilated_block",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8, 16, 16])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = 8
    return model


def depth_to_space_5d() -> onnx.ModelProto:
    """A 5-D DepthToSpace, which ONNX's own DepthToSpace (4-D only) cannot express."""
    return single_op_model(
        "DepthToSpace",
        [1, 16, 4, 6, 5],
        attributes={"block_size": 2, "mode": "depth_first"},
        node_name="d2s",
    )


EXAMPLES = {
    "batch_to_space.onnx": batch_to_space,
    "dilated_block.onnx": dilated_block,
    "depth_to_space_5d.onnx": depth_to_space_5d,
}


def dilated_block_ir(xml_path: Path) -> None:
    """The dilated block as an OpenVINO IR: SpaceToBatch -> Convolution -> BatchToSpace ->
    ReLU, the pattern OpenVINO keeps for TensorFlow's dilated convolutions."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(7)
    weights = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    data = ops.parameter([1, 8, 16, 16], np.float32, name="input")
    block = ops.constant(np.array([1, 1, 2, 2], np.int64))
    s2b = ops.space_to_batch(
        data,
        block,
        ops.constant(np.array([0, 0, 2, 2], np.int64)),
        ops.constant(np.array([0, 0, 2, 2], np.int64)),
    )
    conv = ops.convolution(s2b, ops.constant(weights), [1, 1], [0, 0], [0, 0], [1, 1])
    zeros = ops.constant(np.zeros(4, np.int64))
    relu = ops.relu(ops.batch_to_space(conv, block, zeros, zeros))
    relu.output(0).get_tensor().set_names({"output"})
    model = ov.Model([relu], [data], "dilated_block")
    ov.save_model(model, str(xml_path), compress_to_fp16=False)


def main() -> None:
    for file_name, build in EXAMPLES.items():
        model = build()
        onnx.checker.check_model(model)
        onnx.save(model, HERE / file_name)
        print(f"wrote {HERE / file_name}")
    (HERE / "ir").mkdir(exist_ok=True)
    dilated_block_ir(HERE / "ir" / "dilated_block.xml")
    print(f"wrote {HERE / 'ir' / 'dilated_block.xml'}")


if __name__ == "__main__":
    main()
