"""MaxPool-1/8/14 (values and indices) and AvgPool-1/14/16 in every rounding type, and the
adaptive pools, against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset14 as o14  # noqa: E402
import openvino.opset16 as o16  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("MaxPool", "opset1"),
    ("MaxPool", "opset8"),
    ("MaxPool", "opset14"),
    ("AvgPool", "opset1"),
    ("AvgPool", "opset14"),
    ("AvgPool", "opset16"),
    ("AdaptiveAvgPool", "opset8"),
    ("AdaptiveMaxPool", "opset8"),
}
#: (input shape, kernel, strides, pads_begin, pads_end): the last windows of the first two
#: start in the end padding under plain 'ceil'.
GEOMETRIES = [
    ([1, 2, 5, 5], [2, 2], [2, 2], [1, 1], [1, 1]),
    ([2, 3, 7, 6], [3, 3], [3, 2], [0, 1], [2, 1]),
    ([1, 1, 6, 6], [3, 3], [2, 2], [0, 0], [0, 0]),
    ([1, 2, 6, 7], [3, 3], [2, 2], [1, 0], [1, 1]),
    ([1, 1, 9], [3], [2], [1], [0]),
    # windows that start past the end padding (stride > kernel): empty, -0 or NaN averages
    ([1, 2, 4, 4], [2, 2], [3, 3], [1, 1], [1, 1]),
    ([1, 1, 5, 5], [1, 1], [3, 3], [0, 0], [0, 0]),
]


def _rounding_for(version):
    return ["floor", "ceil"] + (["ceil_torch"] if version == 14 else [])


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize(
    ("version", "rounding"),
    [(1, "floor"), (1, "ceil"), (8, "ceil"), (14, "ceil"), (14, "ceil_torch")],
)
def test_max_pool_values_and_indices_match_openvino(tmp_path, geometry, version, rounding):
    shape, kernel, strides, begin, end = geometry

    def build(x):
        if version == 1:
            return o1.max_pool(x, strides, begin, end, kernel, rounding)
        ops = o8 if version == 8 else o14
        layer = ops.max_pool(x, strides, [1] * len(kernel), begin, end, kernel, rounding, axis=1)
        return list(layer.outputs())

    pairs, _ = run_both(tmp_path, build, [shape])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("axis", [0, 2, -1])
@pytest.mark.parametrize("index_type", ["i32", "i64"])
def test_max_pool_indices_count_from_axis_with_dilations(tmp_path, axis, index_type):
    def build(x):
        layer = o14.max_pool(
            x, [1, 2], [2, 1], [1, 0], [0, 1], [2, 2], "ceil", "explicit", index_type, axis
        )
        return list(layer.outputs())

    pairs, _ = run_both(tmp_path, build, [[2, 2, 6, 7]])
    assert_close(pairs, exact=True)
    assert pairs[1][0].dtype == pairs[1][1].dtype


@pytest.mark.parametrize("auto_pad", ["same_upper", "same_lower", "valid"])
def test_max_pool_auto_pad_matches_openvino(tmp_path, auto_pad):
    def build(x):
        return list(
            o8.max_pool(x, [2, 2], [1, 1], [0, 0], [0, 0], [3, 2], "floor", auto_pad).outputs()
        )

    pairs, _ = run_both(tmp_path, build, [[1, 2, 7, 6]])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize(
    ("version", "rounding"), [(1, "floor"), (1, "ceil"), (14, "ceil"), (14, "ceil_torch")]
)
@pytest.mark.parametrize("exclude_pad", [True, False])
def test_avg_pool_matches_openvino(tmp_path, geometry, version, rounding, exclude_pad):
    shape, kernel, strides, begin, end = geometry
    ops = o1 if version == 1 else o14
    pairs, _ = run_both(
        tmp_path,
        lambda x: ops.avg_pool(x, strides, begin, end, kernel, exclude_pad, rounding),
        [shape],
    )
    for ours, theirs in pairs:
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    assert_close([(np.nan_to_num(o), np.nan_to_num(t)) for o, t in pairs], atol=1e-6)


def test_max_pool_refuses_a_kernel_of_the_wrong_length(tmp_path):
    x = o1.parameter([1, 1, 4, 4], np.float32, name="x")
    layer = o8.max_pool(x, [1, 1], [1, 1], [0, 0], [0, 0], [2, 2])
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(list(layer.outputs()), [x]), xml)
    xml.write_text(xml.read_text().replace('kernel="2, 2"', 'kernel="2"'))
    with pytest.raises(B2SError, match="kernel"):
        b2s_onnx.convert_ir(xml)


ADAPTIVE = [
    ([1, 2, 7], [3]),
    ([2, 3, 9, 7], [4, 3]),
    ([1, 2, 8, 6], [4, 6]),
    ([1, 1, 5, 4, 6], [2, 3, 4]),
]


@pytest.mark.parametrize(("shape", "out"), ADAPTIVE, ids=lambda v: "x".join(map(str, v)))
def test_adaptive_avg_pool_matches_openvino(tmp_path, shape, out):
    sizes = o1.constant(np.asarray(out, np.int64))
    pairs, _ = run_both(tmp_path, lambda x: o8.adaptive_avg_pool(x, sizes), [shape])
    assert_close(pairs, atol=1e-6)


@pytest.mark.parametrize(("shape", "out"), ADAPTIVE, ids=lambda v: "x".join(map(str, v)))
def test_adaptive_max_pool_values_and_indices_match_openvino(tmp_path, shape, out):
    """OpenVINO's CPU plugin computes i32 indices only; i64 must give the same numbers."""
    sizes = o1.constant(np.asarray(out, np.int32))
    pairs, _ = run_both(
        tmp_path, lambda x: list(o8.adaptive_max_pool(x, sizes, "i32").outputs()), [shape]
    )
    assert_close(pairs, exact=True)
    x = o1.parameter(shape, np.float32, name="in0")
    xml = tmp_path / "i64.xml"
    ov.save_model(ov.Model(list(o8.adaptive_max_pool(x, sizes, "i64").outputs()), [x]), xml)
    feeds = {"in0": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    _, indices = run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values()
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, pairs[1][1])


def test_adaptive_max_pool_refuses_an_unknown_index_type(tmp_path):
    x = o1.parameter([1, 1, 4, 4], np.float32, name="x")
    layer = o8.adaptive_max_pool(x, o1.constant(np.asarray([2, 2], np.int64)), "i32")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(list(layer.outputs()), [x]), xml)
    xml.write_text(xml.read_text().replace('index_element_type="i32"', 'index_element_type="u8"'))
    with pytest.raises(B2SError, match="index_element_type"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("rounding", ["ceil", "ceil_torch"])
def test_avg_pool_with_unit_strides_and_run_time_spatial_dims(tmp_path, rounding):
    """No ceil window can run past the end padding with unit strides: dynamic dims convert."""
    x = o1.parameter([1, 2, -1, -1], np.float32, name="in0")
    layer = o14.avg_pool(x, [1, 1], [1, 1], [1, 1], [3, 3], False, rounding)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    feeds = {"in0": np.random.default_rng(0).standard_normal([1, 2, 5, 6]).astype(np.float32)}
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values()
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.testing.assert_allclose(ours, compiled(feeds)[0], atol=1e-6)


def _avg_pool_16(tmp_path, shape, dilations, rounding, exclude):
    x = o1.parameter(shape, np.float32, name="in0")
    spatial = len(shape) - 2
    layer = o16.avg_pool(
        x,
        [2] * spatial,
        [1] * spatial,
        [1] * spatial,
        [2] * spatial,
        exclude,
        rounding,
        dilations=dilations,
    )
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    return xml


@pytest.mark.parametrize("rounding", ["floor", "ceil", "ceil_torch"])
@pytest.mark.parametrize("exclude", [True, False])
@pytest.mark.parametrize(
    ("shape", "dilations"),
    [([1, 2, 7, 6], [1, 1]), ([1, 2, 9, 8], [2, 2]), ([1, 1, 7, 6, 8], [2, 1, 2])],
)
def test_avg_pool_16_matches_openvino(tmp_path, shape, dilations, rounding, exclude):
    """OpenVINO's ONNX frontend writes AveragePool of ONNX opset 19 on as AvgPool-16; at
    target opset 19 its dilations are AveragePool-19's (below it, see
    tests/test_ir_runtime_gaps.py)."""
    xml = _avg_pool_16(tmp_path, shape, dilations, rounding, exclude)
    feeds = {"in0": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml, opset=19), feeds).values()
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.testing.assert_allclose(ours, compiled(feeds)[0], atol=1e-5, rtol=1e-5)


def test_max_pool_8_without_index_readers_keeps_the_blocked_layout_after_it(tmp_path):
    """DenseNet's stem: MaxPool-8 (indices unread) -> Concat -> BatchNorm as Multiply and Add
    -> ReLU -> Conv. The pool becomes one MaxPool writing the layer's output (no Identity
    the layout rules would have to see through), so the scale-shift becomes the blocked
    BatchNormalization; the outputs stay OpenVINO's."""
    rng = np.random.default_rng(0)

    def const(*shape):
        return o1.constant(rng.uniform(0.5, 1.5, shape).astype(np.float32))

    def build(x):
        stem = o1.relu(o1.convolution(x, const(32, 3, 3, 3), [2, 2], [1, 1], [1, 1], [1, 1]))
        pooled = o8.max_pool(stem, [2, 2], [1, 1], [1, 1], [1, 1], [3, 3]).output(0)
        branch = o1.convolution(pooled, const(16, 32, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1])
        joined = o1.concat([pooled, branch], 1)
        shifted = o1.add(o1.multiply(joined, const(1, 48, 1, 1)), const(1, 48, 1, 1))
        return o1.convolution(o1.relu(shifted), const(16, 48, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1])

    pairs, converted = run_both(tmp_path, build, [[1, 3, 32, 32]])
    assert_close(pairs, atol=1e-4, rtol=1e-5)
    ops = [n.op_type for n in converted.graph.node]
    assert "Identity" not in ops
    assert ops.count("BatchNormalization") == 1, ops


#: (kernel, strides, pads_begin, pads_end) whose last 'ceil' window starts in the end padding
#: at some of RUN_TIME_SIZES and not at others.
RUN_TIME_GEOMETRIES = [
    ([2, 2], [3, 3], [1, 1], [1, 1]),
    ([3, 3], [2, 2], [0, 0], [0, 0]),
    ([3, 2], [2, 3], [1, 0], [1, 1]),
]
RUN_TIME_SIZES = [[1, 2, 4, 4], [2, 2, 7, 6], [1, 2, 8, 9], [1, 2, 11, 5]]


def _run_time_pool_pairs(tmp_path, build):
    """The layer built on [-1, 2, -1, -1] data, run by both at every size of RUN_TIME_SIZES."""
    x = o1.parameter([-1, 2, -1, -1], np.float32, name="in0")
    layer = build(x)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(list(layer.outputs()), [x]), xml)
    converted = b2s_onnx.convert_ir(xml)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    rng = np.random.default_rng(3)
    pairs = []
    for size in RUN_TIME_SIZES:
        feeds = {"in0": rng.standard_normal(size).astype(np.float32)}
        theirs = compiled(feeds)
        ours = run_onnxruntime(converted, feeds)
        pairs += [(o, np.asarray(theirs[i])) for i, o in enumerate(ours.values())]
    return pairs


@pytest.mark.parametrize("geometry", RUN_TIME_GEOMETRIES, ids=lambda g: str(g))
@pytest.mark.parametrize(
    ("version", "rounding"),
    [(1, "ceil"), (8, "ceil"), (14, "ceil"), (14, "ceil_torch")],
)
def test_max_pool_ceil_on_run_time_spatial_sizes_matches_openvino(
    tmp_path, geometry, version, rounding
):
    """A window that starts in the end padding at some sizes only: 'ceil_torch' drops it as
    onnxruntime's ceil_mode does; 'ceil' keeps it, appended at run time (values and indices)."""
    kernel, strides, begin, end = geometry

    def build(x):
        if version == 1:
            return o1.max_pool(x, strides, begin, end, kernel, rounding)
        ops = o8 if version == 8 else o14
        return ops.max_pool(x, strides, [1, 1], begin, end, kernel, rounding, axis=1)

    assert_close(_run_time_pool_pairs(tmp_path, build), exact=True)


@pytest.mark.parametrize("geometry", RUN_TIME_GEOMETRIES, ids=lambda g: str(g))
@pytest.mark.parametrize("rounding", ["ceil", "ceil_torch"])
@pytest.mark.parametrize("exclude_pad", [True, False])
def test_avg_pool_ceil_on_run_time_spatial_sizes_matches_openvino(
    tmp_path, geometry, rounding, exclude_pad
):
    """Counting padding, a window past the end padding divides by the whole kernel, on sizes
    known only at run time too (the input padded at run time)."""
    kernel, strides, begin, end = geometry

    def build(x):
        return o14.avg_pool(x, strides, begin, end, kernel, exclude_pad, rounding)

    assert_close(_run_time_pool_pairs(tmp_path, build), atol=1e-6)


def test_ceil_pool_with_one_static_axis_whose_last_window_drops_is_refused(tmp_path):
    """onnx's shape inference and onnxruntime count that axis differently in ceil_mode."""
    x = o1.parameter([1, 2, 4, -1], np.float32, name="in0")
    layer = o14.max_pool(x, [3, 3], [1, 1], [1, 1], [1, 1], [2, 2], "ceil_torch")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    with pytest.raises(B2SError, match="spatial axis 0 static"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("opset", [17, 19])
@pytest.mark.parametrize("exclude", [True, False])
@pytest.mark.parametrize("shape", [[1, 2, 8, 8], [1, 2, 9, 9], [1, 2, -1, -1]])
def test_dilated_avg_pool_windows_past_the_end_padding_match_openvino(
    tmp_path, opset, exclude, shape
):
    """A dilated 'ceil' window with no tap inside averages to NaN excluding padding wherever
    it starts (an undilated one starting past the end padding gives -0)."""
    x = o1.parameter(shape, np.float32, name="in0")
    layer = o16.avg_pool(x, [5, 5], [1, 1], [1, 1], [2, 2], exclude, "ceil", dilations=[2, 2])
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    if opset == 17 and -1 in shape:
        with pytest.raises(B2SError, match="needs static spatial dims"):
            b2s_onnx.convert_ir(xml, opset=opset)
        return
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for size in ([1, 2, 8, 8], [1, 2, 9, 9]) if -1 in shape else (shape,):
        feeds = {"in0": np.random.default_rng(5).standard_normal(size).astype(np.float32)}
        (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml, opset=opset), feeds).values()
        assert_close([(ours, np.asarray(compiled(feeds)[0]))], atol=1e-6)
