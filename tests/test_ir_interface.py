"""The converted model's inputs and outputs are the ones ``openvino.Core().read_model``
exposes (names, element types, partial shapes), and values match OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

pytestmark = pytest.mark.openvino

CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
ONNX_OF_OV = {
    "f32": TensorProto.FLOAT,
    "f16": TensorProto.FLOAT16,
    "i32": TensorProto.INT32,
    "i64": TensorProto.INT64,
    "u8": TensorProto.UINT8,
    "boolean": TensorProto.BOOL,
    "i8": TensorProto.INT8,
}
NUMPY_OF_OV = {
    "f32": np.float32,
    "f16": np.float16,
    "i32": np.int32,
    "i64": np.int64,
    "u8": np.uint8,
    "boolean": np.bool_,
    "i8": np.int8,
}


def _save(tmp_path, outputs, params, name="model"):
    xml = tmp_path / f"{name}.xml"
    ov.save_model(ov.Model(outputs, params), xml, compress_to_fp16=False)
    return xml


def _dims(value: onnx.ValueInfoProto) -> list[int | None]:
    return [
        d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim
    ]


def _ov_dims(port) -> list[int | None]:
    return [None if d.is_dynamic else d.get_length() for d in port.get_partial_shape()]


def assert_same_interface(converted: onnx.ModelProto, xml) -> None:
    """Every ONNX input/output has a name OpenVINO shows for the same port, OpenVINO's
    element type and its partial shape (dynamic dims symbolic)."""
    model = ov.Core().read_model(xml)
    for ours, theirs in (
        (converted.graph.input, model.inputs),
        (converted.graph.output, model.outputs),
    ):
        assert len(ours) == len(theirs)
        for value, port in zip(ours, theirs, strict=True):
            assert value.name in port.get_names()
            ov_type = port.get_element_type().get_type_name()
            assert value.type.tensor_type.elem_type == ONNX_OF_OV[ov_type], value.name
            assert _dims(value) == _ov_dims(port), value.name
            for dim, ov_dim in zip(
                value.type.tensor_type.shape.dim, port.get_partial_shape(), strict=True
            ):
                assert dim.HasField("dim_param") == ov_dim.is_dynamic


def run_both(converted, xml, feeds):
    ours = run_onnxruntime(converted, feeds)
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CONFIG)
    theirs = compiled(feeds)
    pairs = []
    for port in compiled.outputs:
        name = next(n for n in ours if n in port.get_names())
        pairs.append((ours[name], np.asarray(theirs[port])))
    return pairs


def _random(rng, shape, ov_type):
    dtype = NUMPY_OF_OV[ov_type]
    if ov_type == "boolean":
        return rng.integers(0, 2, shape).astype(bool)
    if ov_type in ("f32", "f16"):
        return rng.standard_normal(shape).astype(dtype)
    low = 0 if ov_type == "u8" else -50
    return rng.integers(low, 50, shape).astype(dtype)


@pytest.mark.parametrize("ov_type", ["f16", "i32", "u8", "boolean", "i64", "i8"])
def test_parameter_and_result_types_are_openvinos(tmp_path, ov_type):
    """A typed input goes through f32 math and back to its own type, as OpenVINO runs it."""
    dtype = NUMPY_OF_OV[ov_type]
    x = ops.parameter([2, 3, 4], dtype, name="x")
    as_float = ops.convert(x, "f32")
    scaled = ops.multiply(as_float, np.float32(2.0)) if ov_type != "boolean" else as_float
    back = ops.convert(scaled, ov_type)
    moved = ops.transpose(x, np.array([2, 0, 1]))
    back.output(0).set_names({"computed"})
    moved.output(0).set_names({"moved"})
    xml = _save(tmp_path, [back, moved], [x])
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    assert_same_interface(converted, xml)
    data = _random(np.random.default_rng(0), [2, 3, 4], ov_type)
    for ours, theirs in run_both(converted, xml, {"x": data}):
        assert ours.dtype == theirs.dtype
        assert ours.tobytes() == theirs.tobytes()


def test_f16_inputs_compute_in_f32_and_cast_at_the_edges(tmp_path):
    x = ops.parameter([2, 5], np.float16, name="x")
    w = ops.constant(np.random.default_rng(3).standard_normal((5, 4)).astype(np.float16))
    out = ops.sigmoid(ops.matmul(x, w, False, False))
    out.output(0).set_names({"y"})
    xml = _save(tmp_path, [out], [x])
    converted = b2s_onnx.convert_ir(xml)
    assert_same_interface(converted, xml)
    casts = [n for n in converted.graph.node if n.op_type == "Cast"]
    to = [helper.get_attribute_value(a) for n in casts for a in n.attribute if a.name == "to"]
    assert sorted(to) == sorted([TensorProto.FLOAT, TensorProto.FLOAT16])
    data = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float16)
    ((ours, theirs),) = run_both(converted, xml, {"x": data})
    assert ours.dtype == np.float16
    # One f16 rounding step apart at most (summation order inside the f32 MatMul).
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), atol=1e-3)


def test_every_f16_bit_pattern_moves_as_openvino_moves_it(tmp_path):
    """Data movement on f16 matches OpenVINO bit for bit, NaN payloads included: the CPU
    plugin moves f16 as f32 and quiets signalling NaNs, and so does the Cast round trip."""
    x = ops.parameter([256, 256], np.float16, name="x")
    b2s = ops.batch_to_space(
        ops.reshape(x, np.array([4, 64, 256]), False),
        np.array([1, 2, 2]),
        np.array([0, 0, 0]),
        np.array([0, 0, 0]),
    )
    moved = ops.transpose(b2s, np.array([0, 2, 1]))
    moved.output(0).set_names({"y"})
    xml = _save(tmp_path, [moved], [x])
    converted = b2s_onnx.convert_ir(xml)
    assert_same_interface(converted, xml)
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    ((ours, theirs),) = run_both(converted, xml, {"x": bits.view(np.float16)})
    assert ours.view(np.uint16).tobytes() == theirs.view(np.uint16).tobytes()
    # The only bits that change at all are signalling NaNs, which become quiet.
    signalling = (bits & 0x7C00 == 0x7C00) & (bits & 0x03FF != 0) & (bits & 0x0200 == 0)
    assert signalling.any()


def test_a_passthrough_result_gets_a_name_and_its_type(tmp_path):
    x = ops.parameter([3], np.float16, name="x")
    xml = _save(tmp_path, [ops.result(x)], [x])
    converted = b2s_onnx.convert_ir(xml)
    assert converted.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    data = np.array([1.5, -2.0, 65504.0], np.float16)
    out = next(iter(run_onnxruntime(converted, {"x": data}).values()))
    assert out.tobytes() == data.tobytes()


@pytest.mark.parametrize(
    ("shape", "feed_shapes"),
    [
        ([-1, 3, -1], [(1, 3, 2), (4, 3, 5)]),
        ([ov.Dimension(1, 10), 3, 4], [(1, 3, 4), (7, 3, 4)]),
        ([2, ov.Dimension(2, 8), ov.Dimension(-1)], [(2, 2, 1), (2, 8, 3)]),
    ],
    ids=["minus-one", "range", "mixed"],
)
def test_dynamic_dims_are_symbolic_and_any_size_runs(tmp_path, shape, feed_shapes):
    x = ops.parameter(ov.PartialShape(shape), np.float32, name="x")
    out = ops.relu(ops.add(x, np.float32(0.5)))
    out.output(0).set_names({"y"})
    xml = _save(tmp_path, [out], [x])
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    assert_same_interface(converted, xml)
    for feed_shape in feed_shapes:
        data = np.random.default_rng(0).standard_normal(feed_shape).astype(np.float32)
        ((ours, theirs),) = run_both(converted, xml, {"x": data})
        assert ours.tobytes() == theirs.tobytes()


def test_v10_legacy_interface_widens_f16_inputs_and_narrows_outputs(tmp_path):
    """OpenVINO's reader converts a v10 IR's f16 inputs to f32, its integer outputs to i32
    and its other outputs to f32; the same IR saved as v11 keeps every type."""
    x = ops.parameter([2, 3], np.float16, name="x")
    outputs = []
    for ov_type in ("i64", "boolean", "u8", "f16", "i32"):
        scaled = ops.multiply(ops.convert(x, "f32"), np.float32(3.0))
        out = ops.convert(scaled, ov_type)
        out.output(0).set_names({f"out_{ov_type}"})
        outputs.append(out)
    v11 = _save(tmp_path, outputs, [x], "v11")
    v10 = tmp_path / "v10.xml"
    v10.write_text(v11.read_text().replace('version="11"', 'version="10"', 1))
    v10.with_suffix(".bin").write_bytes(v11.with_suffix(".bin").read_bytes())
    data = np.array([[1.5, -2.0, 0.3], [100.0, -100.0, 7.0]], np.float16)
    for xml, feed in ((v11, data), (v10, data.astype(np.float32))):
        converted = b2s_onnx.convert_ir(xml)
        onnx.checker.check_model(converted, full_check=True)
        assert_same_interface(converted, xml)
        for ours, theirs in run_both(converted, xml, {"x": feed}):
            assert ours.dtype == theirs.dtype
            assert ours.tobytes() == theirs.tobytes()


@pytest.mark.parametrize("compress", [False, True])
def test_saved_file_holds_the_same_model_as_the_result(tmp_path, compress):
    """``ConversionResult.save`` streams the weights straight from the IR; the file must
    load as the very model ``result.model`` holds."""
    from b2s_onnx.ir.convert import convert_ir_model

    x = ops.parameter([4, 8, 6, 6], np.float32, name="x")
    rng = np.random.default_rng(0)
    current = x
    for _ in range(2):
        weights = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
        current = ops.relu(ops.convolution(current, weights, [1, 1], [1, 1], [1, 1], [1, 1]))
    blocks = np.array([1, 1, 2, 2])
    moved = ops.batch_to_space(current, blocks, np.zeros(4, np.int64), np.zeros(4, np.int64))
    moved.output(0).set_names({"y"})
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([moved], [x]), xml, compress_to_fp16=compress)
    result = convert_ir_model(xml)
    (written,) = result.save(tmp_path / "m.onnx")
    loaded = onnx.load(written)
    onnx.checker.check_model(loaded, full_check=True)
    in_memory = result.model
    assert {t.name: t.raw_data for t in loaded.graph.initializer} == {
        t.name: t.raw_data for t in in_memory.graph.initializer
    }
    assert loaded.graph.node == in_memory.graph.node
    assert max(len(t.raw_data) for t in loaded.graph.initializer) == 8 * 8 * 9 * 4
    data = rng.standard_normal((4, 8, 6, 6)).astype(np.float32)
    saved_out = run_onnxruntime(loaded, {"x": data})["y"]
    assert saved_out.tobytes() == run_onnxruntime(in_memory, {"x": data})["y"].tobytes()
    again = tmp_path / "again.onnx"
    assert result.save(again) == [again]  # once materialised, saved the ordinary way
    assert onnx.load(again).graph.initializer == in_memory.graph.initializer


def test_bf16_is_computed_in_f32_and_moved_exactly_but_for_nan_payloads(tmp_path):
    """bf16 runs through f32 (onnxruntime has almost no bf16 kernels). Every value moves
    exactly; a NaN stays a NaN of the same sign, but its payload becomes the canonical one
    (onnxruntime's Cast to bf16 canonicalises NaNs, which a bf16-native plugin does not)."""
    import ml_dtypes

    x = ops.parameter([256, 256], ov.Type.bf16, name="x")
    moved = ops.transpose(x, np.array([1, 0]))
    moved.output(0).set_names({"moved"})
    scaled = ops.multiply(x, ops.convert(ops.constant(np.float32(3.0)), "bf16"))
    scaled.output(0).set_names({"scaled"})
    xml = _save(tmp_path, [moved, scaled], [x])
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    assert [o.type.tensor_type.elem_type for o in converted.graph.output] == [
        TensorProto.BFLOAT16
    ] * 2
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    ours = run_onnxruntime(converted, {"x": bits.view(ml_dtypes.bfloat16)})
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CONFIG)
    tensor = ov.Tensor(ov.Type.bf16, [256, 256])
    tensor.data.view(np.uint16)[:] = bits
    theirs = compiled({"x": tensor})
    results = {next(iter(port.get_names())): np.asarray(theirs[port]) for port in compiled.outputs}
    got = ours["moved"].view(np.uint16)
    expected = results["moved"].view(np.uint16)
    nan = (expected & 0x7F80 == 0x7F80) & (expected & 0x007F != 0)
    assert got[~nan].tobytes() == expected[~nan].tobytes()
    assert (got[nan] & 0x7FFF == 0x7FC0).all()
    assert (got[nan] & 0x8000 == expected[nan] & 0x8000).all()
    # Arithmetic: one bf16 rounding apart at most (the plugin flushes bf16 subnormals).
    got = ours["scaled"].astype(np.float32)
    expected = results["scaled"].view(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got, expected, rtol=2**-7, atol=1e-37)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_weights_widen_to_f32_exactly_in_parallel_chunks(dtype):
    import ml_dtypes

    from b2s_onnx.ir.context import widen_to_f32

    narrow = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    bits = np.tile(np.arange(1 << 16, dtype=np.uint16), 24).reshape(3, 8, -1)  # 3 MiB
    weights = bits.view(narrow)
    widened = widen_to_f32(weights)
    assert widened.shape == weights.shape
    assert widened.tobytes() == weights.astype(np.float32).tobytes()
