"""TensorFlow-style atrous convolutions on inputs of unknown height and width.

TensorFlow computes SpaceToBatch's paddings and BatchToSpace's crops at run time from the
input's shape (``required_space_to_batch_paddings``): ShapeOf -> StridedSlice -> pad to a
multiple of the rate -> paddings as an [M, 2] tensor that OpenVINO's frontend splits and
squeezes (a scalar axis) into the pads/crops vectors. These IRs must convert, keep every
rank the IR states, and match OpenVINO's CPU plugin at sizes divisible by the rate or not.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

pytestmark = pytest.mark.openvino

CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
CHANNELS = 3


def _split_columns(pairs, int_type):
    """[M, 2] -> two [M] vectors, as OpenVINO's TF frontend does (Split, scalar Squeeze)."""
    parts = ops.split(pairs, np.array(1, int_type), 2)
    return [ops.squeeze(parts.output(i), np.array(1, int_type)) for i in range(2)]


def atrous_model(layout: str, spatial: int, rate: int, kernel: int, group: bool, int_type):
    """An IR graph as TF's ``atrous_conv2d``/``conv1d(dilations)`` with padding SAME."""
    if layout == "NHWC":
        shape = [1] + [-1] * spatial + [CHANNELS]
        first = 1
    else:
        shape = [1, CHANNELS] + [-1] * spatial
        first = 2
    x = ops.parameter(shape, np.float32, name="x")
    sizes = ops.strided_slice(
        ops.shape_of(x, "i32" if int_type == np.int32 else "i64"),
        np.array([first]),
        np.array([first + spatial]),
        np.array([1]),
        [0],
        [0],
    )
    total = (kernel - 1) * rate
    begin = np.full(spatial, total // 2, int_type)
    end = np.full(spatial, total - total // 2, int_type)
    block = np.full(spatial, rate, int_type)
    full = ops.add(ops.add(sizes, begin), end)
    extra = ops.floor_mod(ops.subtract(block, ops.floor_mod(full, block)), block)
    axis = np.array(1, int_type)
    paddings = ops.concat(
        [ops.unsqueeze(ops.constant(begin), axis), ops.unsqueeze(ops.add(end, extra), axis)], 1
    )
    crops = ops.concat(
        [
            ops.unsqueeze(ops.constant(np.zeros(spatial, int_type)), axis),
            ops.unsqueeze(extra, axis),
        ],
        1,
    )
    zero = np.zeros(1, int_type)

    def full_vector(vector):
        return ops.concat([zero, vector, zero] if layout == "NHWC" else [zero, zero, vector], 0)

    blocks = np.ones(spatial + 2, int_type)
    blocks[first : first + spatial] = rate
    pads_begin, pads_end = _split_columns(paddings, int_type)
    crops_begin, crops_end = _split_columns(crops, int_type)
    batched = ops.space_to_batch(x, blocks, full_vector(pads_begin), full_vector(pads_end))
    if layout == "NHWC":
        batched = ops.transpose(batched, np.array([0, spatial + 1, *range(1, spatial + 1)]))
    rng = np.random.default_rng(spatial * 10 + rate)
    ones = [1] * spatial
    zeros = [0] * spatial
    if group:
        weights = rng.standard_normal((CHANNELS, 2, 1, *[kernel] * spatial)).astype(np.float32)
        conv = ops.group_convolution(batched, weights, ones, zeros, zeros, ones)
    else:
        weights = rng.standard_normal((4, CHANNELS, *[kernel] * spatial)).astype(np.float32)
        conv = ops.convolution(batched, weights, ones, zeros, zeros, ones)
    if layout == "NHWC":
        conv = ops.transpose(conv, np.array([0, *range(2, spatial + 2), 1]))
    out = ops.batch_to_space(conv, blocks, full_vector(crops_begin), full_vector(crops_end))
    out = ops.relu(out)
    out.output(0).set_names({"y"})
    return ov.Model([out], [x])


CASES = [
    pytest.param("NHWC", 2, 2, 3, False, np.int32, id="nhwc-2d-rate2"),
    pytest.param("NCHW", 2, 3, 3, False, np.int64, id="nchw-2d-rate3"),
    pytest.param("NHWC", 1, 2, 3, False, np.int32, id="nhwc-1d-rate2"),
    pytest.param("NCHW", 1, 4, 2, True, np.int64, id="nchw-1d-group-rate4"),
    pytest.param("NHWC", 2, 2, 5, True, np.int64, id="nhwc-2d-depthwise-k5"),
]
SIZES = [(7, 9), (8, 8), (5, 12), (1, 3)]


@pytest.mark.parametrize(("layout", "spatial", "rate", "kernel", "group", "int_type"), CASES)
def test_atrous_convolution_with_dynamic_spatial_dims_matches_openvino(
    tmp_path, layout, spatial, rate, kernel, group, int_type
):
    xml = tmp_path / "atrous.xml"
    model = atrous_model(layout, spatial, rate, kernel, group, int_type)
    ov.save_model(model, xml, compress_to_fp16=False)
    result = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(result, full_check=True)
    assert {n.domain for n in result.graph.node} == {""}
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CONFIG)
    for size in SIZES:
        spatial_dims = list(size[:spatial])
        shape = [1, *spatial_dims, CHANNELS] if layout == "NHWC" else [1, CHANNELS, *spatial_dims]
        data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        ours = run_onnxruntime(result, {"x": data})["y"]
        theirs = np.asarray(compiled({"x": data})[compiled.outputs[0]])
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def test_every_ir_port_rank_is_declared_as_value_info(tmp_path):
    xml = tmp_path / "atrous.xml"
    ov.save_model(atrous_model("NCHW", 2, 2, 3, False, np.int32), xml, compress_to_fp16=False)
    unlowered = convert_ir_model(xml).unlowered
    declared = {v.name: v for v in unlowered.graph.value_info}
    ir = ov.Core().read_model(xml)
    checked = 0
    for op in ir.get_ordered_ops():
        if op.get_type_name() in ("Parameter", "Result", "Constant"):
            continue
        for port in op.outputs():
            names = port.get_names() or {op.get_friendly_name()}
            found = [declared[n] for n in names if n in declared]
            if not found:
                continue  # folded to a constant
            dims = found[0].type.tensor_type.shape.dim
            assert len(dims) == port.get_partial_shape().rank.get_length()
            for dim, ov_dim in zip(dims, port.get_partial_shape(), strict=True):
                if ov_dim.is_static:
                    assert dim.dim_value == ov_dim.get_length()
            checked += 1
    assert checked >= 8  # SpaceToBatch, Convolution, BatchToSpace and the shape arithmetic


@pytest.mark.parametrize("int_type", [np.int32, np.int64])
def test_squeeze_and_unsqueeze_with_scalar_axes_run_in_onnxruntime(tmp_path, int_type):
    x = ops.parameter([2, 1, -1], np.float32, name="x")
    squeezed = ops.squeeze(x, np.array(1, int_type))
    out = ops.unsqueeze(ops.multiply(squeezed, np.float32(3.0)), np.array(0, int_type))
    out.output(0).set_names({"y"})
    xml = tmp_path / "squeeze.xml"
    ov.save_model(ov.Model([out], [x]), xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CONFIG)
    for width in (1, 4):
        data = np.random.default_rng(width).standard_normal((2, 1, width)).astype(np.float32)
        ours = run_onnxruntime(converted, {"x": data})["y"]
        theirs = np.asarray(compiled({"x": data})[compiled.outputs[0]])
        assert ours.tobytes() == theirs.tobytes()


def test_rank_the_ir_states_lets_data_movement_lower_where_onnx_cannot_infer_it(tmp_path):
    """A kept custom layer (here RandomUniform, whose stream ONNX cannot reproduce) hides
    every shape downstream from ONNX inference; the IR still states them."""
    from b2s_onnx.ir.converters import find
    from b2s_onnx.ir.reader import read_ir_xml

    x = ops.parameter([4, 2, 3, 1], np.float32, name="x")
    noise = ops.random_uniform(np.array([4, 2, 3, 1]), np.float32(0), np.float32(1), "f32", 1, 2)
    zeros = np.zeros(4, np.int64)
    out = ops.batch_to_space(ops.add(x, noise), np.array([1, 2, 2, 1]), zeros, zeros)
    xml = tmp_path / "kept.xml"
    ov.save_model(ov.Model([out], [x]), xml, compress_to_fp16=False)
    random_layer = next(
        layer for layer in read_ir_xml(xml).layers.values() if layer.type == "RandomUniform"
    )
    if find(random_layer) is not None:
        pytest.skip("RandomUniform has a converter now; nothing hides the shapes")
    result = convert_ir_model(xml, keep_unsupported=True)
    assert [node.op_type for node in result.lowered] == ["BatchToSpace"]
    assert "BatchToSpace" not in {node.op_type for node in result.model.graph.node}
    (output,) = result.model.graph.output
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [1, 4, 6, 1]
