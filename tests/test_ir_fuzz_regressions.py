"""Converter behaviours the mutation fuzzer found wrong, pinned against OpenVINO: what
OpenVINO computes where ONNX's direct equivalent would fail or differ."""

from __future__ import annotations

import re

import numpy as np
import openvino as ov
import openvino.opset1 as o1
import openvino.opset8 as o8
import openvino.opset11 as o11
import openvino.opset13 as o13
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

F32 = np.float32
COVERED_LAYERS = {
    ("Convolution", "opset1"),
    ("MaxPool", "opset8"),
    ("Gather", "opset1"),
    ("Gather", "opset7"),
    ("Gather", "opset8"),
    ("SoftMax", "opset1"),
    ("Convert", "opset1"),
    ("Squeeze", "opset1"),
}


def _i64(values):
    return o13.constant(np.asarray(values, np.int64))


@pytest.mark.parametrize("mode", ["same_upper", "same_lower"])
@pytest.mark.parametrize("size", [7, 8])
def test_dilated_same_padding_is_computed_as_openvino_does(tmp_path, mode, size):
    """onnxruntime refuses SAME auto-padding with dilations; explicit pads replace it."""
    weights = o13.constant(np.random.default_rng(0).uniform(-1, 1, (3, 2, 3, 2)).astype(F32))

    def build(x):
        conv = o13.convolution(x, weights, [2, 1], [0, 0], [0, 0], [2, 3], mode)
        pool = o8.max_pool(x, [2, 1], [2, 2], [0, 0], [0, 0], [3, 2], "floor", mode)
        return [conv, pool.output(0)]

    pairs, _ = run_both(tmp_path, build, [[1, 2, size, size + 1]])
    assert_close(pairs)


@pytest.mark.parametrize(
    ("gather", "indices"),
    [(o1.gather, [0, 5, -1]), (o8.gather, [0, 5, -1, -4, 2])],
    ids=["Gather-1", "Gather-8"],
)
def test_out_of_range_gather_indices_give_zeros_like_openvino(tmp_path, gather, indices):
    def build(x):
        return gather(x, _i64(indices), _i64(1))

    pairs, _ = run_both(tmp_path, build, [[2, 3]])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("dtype", [F32, np.int32, np.bool_])
@pytest.mark.parametrize(
    ("data_shape", "index_shape", "axis", "batch_dims"),
    [([2, 0, 3], [4], 1, 0), ([2, 0, 3], [2, 4], 1, 1), ([0, 3], [2, 2], 0, 0)],
)
def test_gather_from_an_empty_axis_gives_zeros(
    tmp_path, dtype, data_shape, index_shape, axis, batch_dims
):
    """Every index is out of range: the spec's zeros (onnxruntime's Gather failed on any
    index; OpenVINO's plugin returns uninitialised memory, so only its shape is compared)."""
    x = o1.parameter(data_shape, dtype, name="x")
    i = o1.parameter(index_shape, np.int64, name="i")
    layer = o8.gather(x, i, _i64(axis), batch_dims)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x, i]), xml)
    feeds = {"x": np.zeros(data_shape, dtype), "i": np.ones(index_shape, np.int64)}
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values()
    theirs = ov.Core().compile_model(xml, "CPU")(feeds)[0]
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    assert not ours.any()


def test_softmax1_without_axis_normalises_axis_zero_like_openvino(tmp_path):
    x = o1.parameter([2, 3, 4], F32, name="x")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([o1.softmax(x, 1)], [x]), xml, compress_to_fp16=False)
    xml.write_text(re.sub(r'<data axis="1"\s*/>', "", xml.read_text()))
    converted = b2s_onnx.convert_ir(xml, fuse=False)  # fused, an inner-axis Softmax is reduced
    (softmax,) = [n for n in converted.graph.node if n.op_type == "Softmax"]
    assert softmax.attribute[0].i == 0
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU")
    feed = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(F32)
    (ours,) = run_onnxruntime(converted, {"x": feed}).values()
    np.testing.assert_allclose(ours, np.asarray(compiled({"x": feed})[0]), atol=1e-6)


def test_convert_output_type_follows_the_attribute_not_the_port_precision(tmp_path):
    x = o1.parameter([2, 3], F32, name="x")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([o1.convert(x, "f32")], [x]), xml, compress_to_fp16=False)
    text = xml.read_text().replace('destination_type="f32"', 'destination_type="i32"')
    xml.write_text(text)
    converted = b2s_onnx.convert_ir(xml)
    assert converted.graph.output[0].type.tensor_type.elem_type == 6  # int32


def test_top_k_larger_than_its_axis_is_refused(tmp_path):
    x = o11.parameter([2, 3], F32, name="x")
    xml = tmp_path / "model.xml"
    top = o11.topk(x, _i64(2), 1, "max", "value")
    ov.save_model(ov.Model([top.output(0)], [x]), xml, compress_to_fp16=False)
    weights = xml.with_suffix(".bin")
    weights.write_bytes(np.int64(5).tobytes())
    with pytest.raises(B2SError, match=r"k=5 exceeds the 3 elements of axis 1"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("squeeze", [o1.squeeze, o13.squeeze], ids=["Squeeze-1", "Squeeze-13"])
def test_squeeze_skips_named_axes_that_are_not_one_like_openvino(tmp_path, squeeze):
    def build(x):
        return squeeze(x, _i64([0, 1, -1]))

    pairs, _ = run_both(tmp_path, build, [[2, 1, 4, 1]])
    assert_close(pairs, exact=True)


def test_a_reshape_target_that_cannot_hold_the_data_is_refused(tmp_path):
    x = o1.parameter([2, 6], F32, name="x")
    xml = tmp_path / "model.xml"
    reshaped = o1.reshape(x, _i64([3, 4]), False)
    ov.save_model(ov.Model([reshaped], [x]), xml, compress_to_fp16=False)
    xml.with_suffix(".bin").write_bytes(np.asarray([5, 4], np.int64).tobytes())
    with pytest.raises(B2SError, match=r"target shape \[5, 4\] cannot hold the 12 elements"):
        b2s_onnx.convert_ir(xml)


def test_interpolate_sizes_that_contradict_the_declared_output_are_refused(tmp_path):
    """The converter used to take the target sizes from the declared output; OpenVINO takes
    them from the sizes input. A corrupt sizes constant is now caught, not ignored."""
    x = o11.parameter([1, 2, 4, 4], F32, name="x")
    resized = o11.interpolate(x, _i64([8, 8]), "nearest", "sizes", axes=_i64([2, 3]))
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([resized], [x]), xml, compress_to_fp16=False)
    weights = bytearray(xml.with_suffix(".bin").read_bytes())
    sizes = np.asarray([8, 8], np.int64).tobytes()
    start = bytes(weights).index(sizes)
    weights[start : start + len(sizes)] = np.asarray([8, 9], np.int64).tobytes()
    xml.with_suffix(".bin").write_bytes(bytes(weights))
    with pytest.raises(B2SError, match=r"declares sizes \[8, 8\].*sizes input gives \[8, 9\]"):
        b2s_onnx.convert_ir(xml)


def test_an_edge_whose_ends_declare_different_element_types_is_refused(tmp_path):
    x = o11.parameter([2, 3], F32, name="x")
    top = o11.topk(x, _i64(2), 1, "max", "value", "i32")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([o1.relu(top.output(0))], [x]), xml, compress_to_fp16=False)
    text = xml.read_text()
    # Rewire the ReLU (declared f32 input) to TopK's i32 indices.
    edge = re.search(r'<edge from-layer="(\d+)" from-port="2" to-layer="(\d+)"', text)
    assert edge is not None
    rewired = edge.group(0).replace('from-port="2"', 'from-port="3"')
    xml.write_text(text.replace(edge.group(0), rewired))
    with pytest.raises(B2SError, match=r"declares element type f32 .* declares i32: the IR contra"):
        b2s_onnx.convert_ir(xml)


def test_a_pad_of_int64_min_is_refused_not_overflowed(tmp_path):
    x = o1.parameter([2, 3], F32, name="x")
    padded = o1.pad(x, _i64([0, -1]), _i64([0, 0]), "constant")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([padded], [x]), xml, compress_to_fp16=False)
    weights = bytearray(xml.with_suffix(".bin").read_bytes())
    start = bytes(weights).index(np.asarray([0, -1], np.int64).tobytes()) + 8
    weights[start : start + 8] = np.int64(np.iinfo(np.int64).min).tobytes()
    xml.with_suffix(".bin").write_bytes(bytes(weights))
    with pytest.raises(B2SError, match=r"crop axis 1 \(size 3\) below zero"):
        b2s_onnx.convert_ir(xml)


def test_a_static_size_declared_along_a_dynamic_input_dim_is_not_trusted(tmp_path):
    """A mutated IR declared a batch of 1000 where the input's batch is dynamic; OpenVINO
    derives it dynamic and ignores the statement, and written as value_info it made
    onnxruntime reserve 24 GB. The converted model keeps the dim symbolic."""
    x = o13.parameter([-1, 4, 3, 3], F32, name="x")
    scale = o13.constant(np.full([1, 4, 1, 1], 2.0, np.float32))
    scaled = o13.multiply(x, scale)
    out = o13.relu(o13.add(scaled, scale))
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([out], [x]), xml, compress_to_fp16=False)
    text = xml.read_text()
    layer = re.search(r'<layer id="\d+" name="[^"]*" type="Multiply".*?</layer>', text, re.S)
    assert layer is not None
    mutated = layer.group(0)
    head, tail = mutated.rsplit("<output>", 1)
    tail = tail.replace("<dim>-1</dim>", "<dim>1000</dim>", 1)
    xml.write_text(text.replace(mutated, head + "<output>" + tail))
    converted = b2s_onnx.convert_ir(xml)
    declared = [
        d.dim_value for v in converted.graph.value_info for d in v.type.tensor_type.shape.dim
    ]
    assert 1000 not in declared
    feeds = {"x": np.random.default_rng(0).standard_normal([2, 4, 3, 3]).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    np.testing.assert_array_equal(ours, np.maximum(feeds["x"] * 2 + 2, 0))
