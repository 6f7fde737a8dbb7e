"""Gaps the sweep of IRs from OpenVINO's ONNX frontend showed, each against OpenVINO's CPU
plugin (numpy where the plugin cannot run the case, said so in the test):

- VariadicSplit whose split_lengths arrive at run time (ONNX Split-13+ takes ``split`` as
  an input), a -1 among them resolved at run time;
- Interpolate-4/11 linear, cubic and pillow modes with run-time scales or sizes on axes
  onnxruntime's Resize takes only at scale 1 (OpenVINO's ONNX frontend lists every axis),
  and constant ones on such axes at other scales; nearest with run-time operands;
- ConvolutionBackpropData / GroupConvolutionBackpropData with the output_shape input, in
  every auto_pad, with output_padding, and output shapes larger than the full result;
- AvgPool-16 with dilations below target opset 19 (a depthwise Conv), in every rounding
  type, with and without padding counted, and every auto_pad.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset1 as o1
import openvino.opset11 as o11
import openvino.opset16 as o16
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument
from openvino.utils.node_factory import NodeFactory

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {
    ("VariadicSplit", "opset1"),
    ("Interpolate", "opset4"),
    ("Interpolate", "opset11"),
    ("ConvolutionBackpropData", "opset1"),
    ("GroupConvolutionBackpropData", "opset1"),
    ("AvgPool", "opset16"),
}
F32, I32, I64 = np.float32, np.int32, np.int64
CPU_F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _save(tmp_path, outputs, params):
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(outputs, params), xml, compress_to_fp16=False)
    return xml


def _openvino(xml, feeds):
    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CPU_F32)
    return [np.asarray(v) for v in compiled(feeds).values()]


# -- VariadicSplit with run-time split_lengths ------------------------------------------------


@pytest.mark.parametrize(
    ("axis", "lengths"),
    [(1, [2, 3, 1]), (1, [-1, 2, 0]), (-1, [1, -1]), (0, [1, 1, -1]), (2, [4, 0, -1])],
    ids=str,
)
@pytest.mark.parametrize("length_type", [I64, I32], ids=["i64", "i32"])
def test_variadic_split_with_run_time_lengths_matches_openvino(
    tmp_path, axis, lengths, length_type
):
    shape = [3, 6, 4]

    def build(data, listed):
        return list(o1.variadic_split(data, o1.constant(np.asarray(axis, I64)), listed).outputs())

    data = np.random.default_rng(0).standard_normal(shape).astype(F32)
    feeds = {"in0": data, "in1": np.asarray(lengths, length_type)}
    pairs, model = run_both(
        tmp_path, build, [shape, [len(lengths)]], [F32, length_type], feeds=feeds
    )
    assert_close(pairs, exact=True)
    assert [n.op_type for n in model.graph.node].count("Split") == 1


def test_variadic_split_with_run_time_lengths_on_a_run_time_axis_size(tmp_path):
    """The -1 takes what is left of an axis whose size only the data tells."""
    data, listed = o1.parameter([2, -1], F32, name="data"), o1.parameter([3], I64, name="len")
    split = o1.variadic_split(data, o1.constant(np.asarray(1, I64)), listed)
    xml = _save(tmp_path, list(split.outputs()), [data, listed])
    values = np.arange(18, dtype=F32).reshape(2, 9)
    for lengths in ([2, -1, 3], [9, 0, -1], [-1, 1, 1]):
        feeds = {"data": values, "len": np.asarray(lengths, I64)}
        ours = list(run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values())
        for mine, theirs in zip(ours, _openvino(xml, feeds), strict=True):
            assert mine.shape == theirs.shape
            assert mine.tobytes() == theirs.tobytes()


@pytest.mark.parametrize("lengths", [[-1, -1, 6], [7, -1, 0], [2, 2, 2]], ids=str)
def test_variadic_split_with_impossible_run_time_lengths_fails_at_run_time(tmp_path, lengths):
    """Two -1s, a -1 left negative, or lengths that do not add up to the axis: OpenVINO
    fails at run time, and so does the converted model (never a silent result)."""
    data, listed = o1.parameter([2, 5], F32, name="data"), o1.parameter([3], I64, name="len")
    split = o1.variadic_split(data, o1.constant(np.asarray(1, I64)), listed)
    xml = _save(tmp_path, list(split.outputs()), [data, listed])
    feeds = {"data": np.zeros((2, 5), F32), "len": np.asarray(lengths, I64)}
    with pytest.raises(RuntimeError):
        _openvino(xml, feeds)
    with pytest.raises((Fail, InvalidArgument), match="Split"):
        run_onnxruntime(b2s_onnx.convert_ir(xml), feeds)


# -- Interpolate with run-time scales or sizes -----------------------------------------------

ALL_AXES = [0, 1, 2, 3]


def _interpolate_11(mode, calculation, axes, **attrs):
    def build(x, operand):
        return o11.interpolate(
            x, operand, mode, calculation, axes=o1.constant(np.asarray(axes, I64)), **attrs
        )

    return build


def _resize_both(tmp_path, build, shape, operand, atol=1e-4):
    dtype = F32 if operand.dtype == F32 else operand.dtype
    data = np.random.default_rng(3).standard_normal(shape).astype(F32)
    feeds = {"in0": data, "in1": operand}
    pairs, model = run_both(
        tmp_path, build, [shape, list(operand.shape)], [F32, dtype], feeds=feeds
    )
    assert_close(pairs, atol=atol, rtol=atol)
    return model


@pytest.mark.parametrize("mode", ["cubic", "linear", "linear_onnx"])
@pytest.mark.parametrize(
    "coordinates", ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"]
)
@pytest.mark.parametrize(
    ("calculation", "operand"),
    [("scales", [1.0, 1.0, 1.5, 0.5]), ("scales", [1.0, 1.0, 0.8, 1.75]), ("sizes", [2, 3, 4, 13])],
    ids=["scales-up-down", "scales-down-up", "sizes"],
)
def test_run_time_operands_on_every_axis_match_openvino(
    tmp_path, mode, coordinates, calculation, operand
):
    """OpenVINO's ONNX frontend lists all four axes with the scales/sizes as a graph input:
    the unscaled batch and channels too, which onnxruntime's cubic Resize takes only one at a
    time (and only at scale 1, on the 4-D view)."""
    build = _interpolate_11(mode, calculation, ALL_AXES, coordinate_transformation_mode=coordinates)
    dtype = F32 if calculation == "scales" else I64
    _resize_both(tmp_path, build, [2, 3, 6, 8], np.asarray(operand, dtype))


@pytest.mark.parametrize("mode", ["cubic", "linear_onnx", "bilinear_pillow", "bicubic_pillow"])
@pytest.mark.parametrize("antialias", [False, True])
def test_run_time_scales_on_leading_axes_match_openvino(tmp_path, mode, antialias):
    """Batch and channels listed with run-time scale 1: each leading axis runs on its own
    4-D view (onnxruntime takes that at any scale), the pillow modes included."""
    build = _interpolate_11(mode, "scales", ALL_AXES, antialias=antialias)
    _resize_both(tmp_path, build, [2, 4, 6, 8], np.asarray([1.0, 1.0, 0.5, 0.75], F32))


LEADING = [
    ("scales", [2.0, 1.0, 1.5, 0.5]),
    ("scales", [0.5, 1.25, 1.0, 1.0]),
    ("scales", [1.0, 0.5, 2.0, 1.0]),
    ("sizes", [3, 2, 6, 5]),
]


def _linear_numpy(data, calculation, operand, coordinates):
    """ONNX's (and OpenVINO's linear_onnx) linear interpolation, one axis after the other:
    the source coordinate clamped into the axis, its two neighbours weighted."""
    result = data.astype(np.float64)
    for axis, value in enumerate(operand):
        size = result.shape[axis]
        out = int(value) if calculation == "sizes" else int(np.floor(size * value))
        scale = out / size if calculation == "sizes" else value
        x = np.arange(out, dtype=np.float64)
        if coordinates == "half_pixel":
            source = (x + 0.5) / scale - 0.5
        elif coordinates == "asymmetric":
            source = x / scale
        else:
            source = x * (size - 1) / (out - 1) if out > 1 else np.zeros_like(x)
        source = np.clip(source, 0, size - 1)
        low = np.floor(source).astype(int)
        high = np.minimum(low + 1, size - 1)
        weight = (source - low).reshape([-1 if a == axis else 1 for a in range(data.ndim)])
        result = np.take(result, low, axis) * (1 - weight) + np.take(result, high, axis) * weight
    return result


@pytest.mark.parametrize("coordinates", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("mode", ["cubic", "linear_onnx"])
@pytest.mark.parametrize(("calculation", "operand"), LEADING, ids=str)
def test_run_time_operands_resizing_leading_axes_match_openvino_reference(
    tmp_path, mode, coordinates, calculation, operand
):
    """Resizing the batch or the channels, which OpenVINO's CPU plugin does not do (it
    refuses the batch at run time and writes garbage for the channels). Cubic is checked
    against OpenVINO's core reference implementation (``Node.evaluate``); linear against
    numpy, as that reference leaves leading axes it resizes linearly zero (or corrupts its
    heap)."""
    dtype = F32 if calculation == "scales" else I64
    shape = [2, 4, 6, 8]
    axes = np.asarray(ALL_AXES, I64)
    data = np.random.default_rng(6).standard_normal(shape).astype(F32)
    values = np.asarray(operand, dtype)
    if mode == "linear_onnx":
        expected = _linear_numpy(data, calculation, operand, coordinates)
    else:
        node = o11.interpolate(
            o1.parameter(shape, F32),
            o1.constant(values),
            mode,
            calculation,
            coordinate_transformation_mode=coordinates,
            axes=o1.constant(axes),
        )
        tensor = ov.Tensor(ov.Type.f32, list(node.get_output_shape(0)))
        assert node.evaluate([tensor], [ov.Tensor(data), ov.Tensor(values), ov.Tensor(axes)])
        expected = tensor.data
    x, listed = o1.parameter(shape, F32, name="x"), o1.parameter([4], dtype, name="operand")
    layer = _interpolate_11(mode, calculation, ALL_AXES, coordinate_transformation_mode=coordinates)
    xml = _save(tmp_path, [layer(x, listed)], [x, listed])
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"x": data, "operand": values}).values()
    assert_close([(ours, expected)], atol=1e-4, rtol=1e-4)


def test_linear_numpy_reference_agrees_with_openvino_on_spatial_axes():
    """The numpy reference above is OpenVINO's linear_onnx where OpenVINO's CPU plugin can
    run it (spatial axes), so it is a fair stand-in on the leading ones."""
    shape, operand = [1, 2, 5, 7], [1.0, 1.0, 1.6, 0.5]
    data = np.random.default_rng(8).standard_normal(shape).astype(F32)
    for coordinates in ("half_pixel", "align_corners", "asymmetric"):
        x = o1.parameter(shape, F32)
        layer = _interpolate_11(
            "linear_onnx", "scales", ALL_AXES, coordinate_transformation_mode=coordinates
        )
        node = layer(x, o1.constant(np.asarray(operand, F32)))
        compiled = ov.Core().compile_model(ov.Model([node], [x]), "CPU", CPU_F32)
        theirs = np.asarray(compiled(data)[0])
        expected = _linear_numpy(data, "scales", operand, coordinates)
        np.testing.assert_allclose(theirs, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["cubic", "linear_onnx"])
def test_run_time_sizes_with_pads_match_openvino(tmp_path, mode):
    build = _interpolate_11(mode, "sizes", ALL_AXES, pads_begin=[0, 1, 2, 0], pads_end=[1, 0, 1, 3])
    _resize_both(tmp_path, build, [2, 3, 5, 6], np.asarray([3, 4, 11, 5], I32))


@pytest.mark.parametrize("mode", ["cubic", "linear_onnx"])
@pytest.mark.parametrize(
    ("shape", "axes", "operand"),
    [
        ([3, 6, 5], [0, 1, 2], [1.0, 1.5, 0.6]),
        ([5, 7], [1, 0], [0.5, 1.5]),
        ([2, 3, 4, 5, 6], [1, 2, 3, 4], [1.0, 1.5, 0.5, 2.0]),
        ([9], [0], [0.5]),
    ],
    ids=["3d", "2d", "5d", "1d"],
)
def test_run_time_scales_in_other_ranks_match_openvino(tmp_path, mode, shape, axes, operand):
    build = _interpolate_11(mode, "scales", axes)
    _resize_both(tmp_path, build, shape, np.asarray(operand, F32))


@pytest.mark.parametrize("mode", ["cubic", "linear_onnx"])
@pytest.mark.parametrize(("calculation", "operand"), LEADING, ids=str)
def test_constant_operands_on_leading_axes_match_the_references(
    tmp_path, mode, calculation, operand
):
    """Constant operands that resize the batch or channels: onnxruntime refuses those axes
    in one Resize (at conversion, when they are constants); the 4-D view takes them.
    The references are those of the run-time test above."""
    dtype = F32 if calculation == "scales" else I64
    shape = [2, 4, 6, 8]
    values, axes = np.asarray(operand, dtype), np.asarray(ALL_AXES, I64)
    x = o1.parameter(shape, F32, name="x")
    node = o11.interpolate(x, o1.constant(values), mode, calculation, axes=o1.constant(axes))
    data = np.random.default_rng(7).standard_normal(shape).astype(F32)
    if mode == "linear_onnx":
        expected = _linear_numpy(data, calculation, operand, "half_pixel")
    else:
        tensor = ov.Tensor(ov.Type.f32, list(node.get_output_shape(0)))
        assert node.evaluate([tensor], [ov.Tensor(data), ov.Tensor(values), ov.Tensor(axes)])
        expected = tensor.data
    xml = _save(tmp_path, [node], [x])
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"x": data}).values()
    assert_close([(ours, expected)], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("coordinates", "nearest_mode"),
    [
        ("half_pixel", "round_prefer_floor"),
        ("asymmetric", "floor"),
        ("align_corners", "round_prefer_ceil"),
        ("pytorch_half_pixel", "ceil"),
    ],
)
@pytest.mark.parametrize(
    ("calculation", "operand"),
    [("scales", [1.0, 1.0, 1.5, 0.5]), ("sizes", [2, 3, 4, 13])],
    ids=["scales", "sizes"],
)
def test_nearest_with_run_time_operands_matches_openvino_exactly(
    tmp_path, coordinates, nearest_mode, calculation, operand
):
    """Nearest with run-time operands is ONNX's nearest Resize, whose coordinate arithmetic
    is OpenVINO's for these modes: bit-exact (every axis listed, as OpenVINO's ONNX frontend
    writes it)."""
    build = _interpolate_11(
        "nearest",
        calculation,
        ALL_AXES,
        coordinate_transformation_mode=coordinates,
        nearest_mode=nearest_mode,
    )
    dtype = F32 if calculation == "scales" else I64
    data = np.random.default_rng(4).standard_normal([2, 3, 6, 8]).astype(F32)
    feeds = {"in0": data, "in1": np.asarray(operand, dtype)}
    pairs, _ = run_both(tmp_path, build, [[2, 3, 6, 8], [4]], [F32, dtype], feeds=feeds)
    assert_close(pairs, exact=True)


def test_interpolate_4_run_time_scales_on_a_run_time_shape_match_openvino(tmp_path):
    """Interpolate-4 (sizes and scales inputs) on data whose dims are known only at run
    time: the 4-D views are computed from the data's shape."""
    factory = NodeFactory("opset4")
    data = o1.parameter([-1, -1, -1, -1], F32, name="data")
    scales = o1.parameter([4], F32, name="scales")
    sizes = o1.constant(np.asarray([1, 1, 1, 1], I64))
    axes = o1.constant(np.asarray(ALL_AXES, I64))
    layer = factory.create(
        "Interpolate",
        [data.output(0), sizes.output(0), scales.output(0), axes.output(0)],
        {"mode": "cubic", "shape_calculation_mode": "scales"},
    )
    xml = _save(tmp_path, [layer.output(0)], [data, scales])
    converted = b2s_onnx.convert_ir(xml)
    rng = np.random.default_rng(5)
    for shape, factors in (([2, 3, 5, 7], [1, 1, 2, 0.5]), ([1, 4, 6, 6], [1, 1, 0.5, 1.5])):
        feeds = {"data": rng.standard_normal(shape).astype(F32), "scales": np.asarray(factors, F32)}
        (ours,) = run_onnxruntime(converted, feeds).values()
        (theirs,) = _openvino(xml, feeds)
        assert_close([(ours, theirs)], atol=1e-4, rtol=1e-4)


def test_nearest_resizing_the_batch_at_run_time_matches_numpy(tmp_path):
    """Nearest on the batch (which OpenVINO's CPU plugin does not resize): ONNX's nearest
    Resize takes any axis; asymmetric floor picks source index floor(x / scale)."""
    build = _interpolate_11(
        "nearest",
        "scales",
        ALL_AXES,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    x, listed = o1.parameter([2, 3, 4, 5], F32, name="x"), o1.parameter([4], F32, name="scales")
    xml = _save(tmp_path, [build(x, listed)], [x, listed])
    data = np.random.default_rng(9).standard_normal([2, 3, 4, 5]).astype(F32)
    scales = np.asarray([2.0, 1.0, 0.5, 1.0], F32)
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"x": data, "scales": scales}).values()
    expected = data[[0, 0, 1, 1]][:, :, [0, 2]]
    assert ours.tobytes() == expected.tobytes()


# -- ConvolutionBackpropData with output_shape -----------------------------------------------

BACKPROP_PADS = [
    ("explicit", [0, 0], [0, 0]),
    ("explicit", [1, 2], [0, 0]),
    ("explicit", [2, 0], [1, 1]),
    ("same_upper", [0, 0], [0, 0]),
    ("same_upper", [0, 0], [1, 1]),
    ("same_lower", [0, 0], [0, 0]),
    ("same_lower", [0, 0], [1, 0]),
    ("valid", [0, 0], [0, 0]),
]


@pytest.mark.parametrize(("auto_pad", "pads_begin", "output_padding"), BACKPROP_PADS, ids=str)
@pytest.mark.parametrize(
    "output_shape",
    # The full result is [9, 11]: cropped on both axes, exact, one axis past it, both past.
    [[6, 8], [9, 11], [8, 13], [11, 14]],
    ids=str,
)
def test_backprop_output_shape_matches_openvino(
    tmp_path, auto_pad, pads_begin, output_padding, output_shape
):
    """OpenVINO reads output_shape elements of the full transposed convolution from an
    offset auto_pad decides; past the full result they are zeros (negative padding)."""

    def build(x):
        return o1.convolution_backprop_data(
            x,
            o1.constant(np.random.default_rng(0).standard_normal([3, 2, 3, 3]).astype(F32)),
            [2, 3],
            o1.constant(np.asarray(output_shape, I64)),
            pads_begin=pads_begin,
            pads_end=[1, 1],
            dilations=[1, 1],
            auto_pad=auto_pad,
            output_padding=output_padding,
        )

    pairs, _ = run_both(tmp_path, build, [[2, 3, 4, 3]])
    assert_close(pairs, atol=1e-5)


def test_backprop_output_shape_of_onnx_s_test_case_matches_openvino(tmp_path):
    """ONNX's test_convtranspose_output_shape: strides [3, 2], an output one larger than
    the full result on both axes (a total padding of -1)."""

    def build(x):
        return o1.convolution_backprop_data(
            x,
            o1.constant(np.ones([1, 2, 3, 3], F32)),
            [3, 2],
            o1.constant(np.asarray([10, 8], I64)),
            dilations=[1, 1],
        )

    pairs, model = run_both(tmp_path, build, [[1, 1, 3, 3]])
    assert_close(pairs, atol=1e-5)
    assert pairs[0][0].shape == (1, 2, 10, 8)
    assert all(
        v >= 0 for n in model.graph.node for a in n.attribute if a.name == "pads" for v in a.ints
    )


@pytest.mark.parametrize("auto_pad", ["explicit", "same_upper", "same_lower"])
def test_group_backprop_output_shape_matches_openvino(tmp_path, auto_pad):
    def build(x):
        return o1.group_convolution_backprop_data(
            x,
            o1.constant(np.random.default_rng(1).standard_normal([2, 2, 3, 2, 3]).astype(F32)),
            [2, 2],
            o1.constant(np.asarray([10, 9], I64)),
            pads_begin=[1, 0],
            pads_end=[0, 0],
            dilations=[1, 2],
            auto_pad=auto_pad,
        )

    pairs, _ = run_both(tmp_path, build, [[1, 4, 4, 3]])
    assert_close(pairs, atol=1e-5)


def test_backprop_refuses_an_output_that_starts_past_the_result(tmp_path):
    """pads_begin beyond the whole transposed convolution: every element would be a zero
    of padding; refused rather than written as a degenerate ConvTranspose."""

    def build(x):
        return o1.convolution_backprop_data(
            x,
            o1.constant(np.ones([1, 1, 3], F32)),
            [1],
            o1.constant(np.asarray([4], I64)),
            pads_begin=[6],
            pads_end=[0],
            dilations=[1],
        )

    x = o1.parameter([1, 1, 3], F32, name="x")
    xml = _save(tmp_path, [build(x)], [x])
    with pytest.raises(B2SError, match="output_shape"):
        b2s_onnx.convert_ir(xml)


# -- AvgPool-16 with dilations below opset 19 ------------------------------------------------

#: (input shape, kernel, strides, dilations, pads_begin, pads_end).
DILATED = [
    ([1, 2, 9, 8], [2, 2], [1, 1], [2, 2], [0, 0], [0, 0]),
    ([2, 3, 9, 10], [3, 2], [2, 3], [2, 3], [1, 0], [2, 1]),
    ([1, 2, 11], [3], [3], [2], [1], [1]),
    ([1, 1, 7, 6, 8], [2, 2, 3], [2, 1, 2], [2, 1, 2], [1, 0, 1], [1, 1, 0]),
    ([1, 2, 8, 7], [2, 3], [3, 2], [3, 2], [0, 0], [1, 1]),
    # Under 'ceil', the last windows start in the end padding (NaN excluding it).
    ([1, 2, 8, 8], [2, 2], [4, 4], [2, 2], [0, 0], [1, 1]),
    ([1, 2, 9, 8], [2, 2], [4, 4], [2, 2], [1, 0], [1, 1]),
]


@pytest.mark.parametrize("geometry", DILATED, ids=lambda g: "x".join(map(str, g[0])))
@pytest.mark.parametrize("rounding", ["floor", "ceil", "ceil_torch"])
@pytest.mark.parametrize("exclude", [True, False], ids=["exclude", "include"])
def test_dilated_avg_pool_below_opset_19_matches_openvino(tmp_path, geometry, rounding, exclude):
    """A depthwise Conv at opset 18; NaN where OpenVINO gives it (a ceil window entirely
    in the end padding, excluding padding: 0 / 0)."""
    shape, kernel, strides, dilations, begin, end = geometry
    x = o1.parameter(shape, F32, name="x")
    layer = o16.avg_pool(x, strides, begin, end, kernel, exclude, rounding, dilations=dilations)
    xml = _save(tmp_path, [layer.output(0)], [x])
    converted = b2s_onnx.convert_ir(xml, opset=18)
    assert "AveragePool" not in {n.op_type for n in converted.graph.node}
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(F32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (theirs,) = _openvino(xml, feeds)
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(np.nan_to_num(ours), np.nan_to_num(theirs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("auto_pad", ["same_upper", "same_lower", "valid"])
@pytest.mark.parametrize("exclude", [True, False], ids=["exclude", "include"])
def test_dilated_avg_pool_auto_pad_below_opset_19_matches_openvino(tmp_path, auto_pad, exclude):
    x = o1.parameter([1, 2, 9, 7], F32, name="x")
    layer = o16.avg_pool(
        x, [2, 1], [0, 0], [0, 0], [3, 2], exclude, "ceil", auto_pad, dilations=[2, 3]
    )
    xml = _save(tmp_path, [layer.output(0)], [x])
    feeds = {"x": np.random.default_rng(1).standard_normal([1, 2, 9, 7]).astype(F32)}
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml, opset=18), feeds).values()
    (theirs,) = _openvino(xml, feeds)
    assert_close([(ours, theirs)], atol=1e-5)


def test_dilated_avg_pool_keeps_average_pool_from_opset_19(tmp_path):
    x = o1.parameter([1, 2, 9, 8], F32, name="x")
    layer = o16.avg_pool(x, [1, 1], [1, 1], [1, 1], [2, 2], True, dilations=[2, 2])
    xml = _save(tmp_path, [layer.output(0)], [x])
    ops = {n.op_type for n in b2s_onnx.convert_ir(xml, opset=19).graph.node}
    assert "AveragePool" in ops
    assert "Conv" not in ops


def test_dilated_avg_pool_below_opset_19_on_run_time_spatial_dims(tmp_path):
    """Counting padding in floor mode, the Conv form needs no static spatial dims."""
    x = o1.parameter([1, 3, -1, -1], F32, name="x")
    layer = o16.avg_pool(x, [1, 2], [2, 1], [1, 2], [3, 2], False, dilations=[2, 2])
    xml = _save(tmp_path, [layer.output(0)], [x])
    converted = b2s_onnx.convert_ir(xml, opset=18)
    for shape in ([1, 3, 9, 8], [1, 3, 12, 7]):
        feeds = {"x": np.random.default_rng(2).standard_normal(shape).astype(F32)}
        (ours,) = run_onnxruntime(converted, feeds).values()
        (theirs,) = _openvino(xml, feeds)
        assert_close([(ours, theirs)], atol=1e-5)


def test_dilated_avg_pool_below_opset_19_excluding_pads_needs_static_dims(tmp_path):
    x = o1.parameter([1, 3, -1, -1], F32, name="x")
    layer = o16.avg_pool(x, [1, 1], [1, 1], [1, 1], [3, 3], True, dilations=[2, 2])
    xml = _save(tmp_path, [layer.output(0)], [x])
    with pytest.raises(B2SError, match="static spatial dims"):
        b2s_onnx.convert_ir(xml, opset=18)


@pytest.mark.parametrize("auto_pad", ["same_upper", "valid"])
def test_backprop_output_shape_computed_at_run_time_takes_the_declared_size(tmp_path, auto_pad):
    """TensorFlow's Conv2DTranspose computes output_shape from the input's ShapeOf (and a
    dynamic batch keeps it from folding); the declared output dims OpenVINO inferred from
    that computation stand in for it."""
    x = o1.parameter(ov.PartialShape([-1, 4, 5, 6]), np.float32, name="x")
    spatial = o1.gather(o1.shape_of(x), o1.constant(np.array([2, 3], np.int64)), 0)
    target = o1.multiply(spatial, o1.constant(np.array([2], np.int64)))
    weights = o1.constant(np.random.default_rng(0).standard_normal((4, 3, 3, 3)), np.float32)
    y = o1.convolution_backprop_data(x, weights, [2, 2], output_shape=target, auto_pad=auto_pad)
    xml = _save(tmp_path, [y], [x])
    converted = b2s_onnx.convert_ir(xml)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 4, 5, 6)).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (theirs,) = _openvino(xml, feeds)
    assert ours.shape == theirs.shape == (2, 3, 10, 12)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize(
    ("auto_pad", "pads_begin", "output_padding", "extra"),
    [
        ("same_upper", [0, 0], [0, 0], [0, 0]),
        ("same_lower", [0, 0], [1, 0], [-1, 1]),
        ("valid", [0, 0], [0, 0], [2, 3]),
        ("explicit", [1, 2], [0, 1], [-2, 1]),
    ],
)
def test_backprop_output_shape_on_dynamic_spatial_sizes_matches_openvino(
    tmp_path, auto_pad, pads_begin, output_padding, extra
):
    """TensorFlow's Conv2DTranspose on a dynamic image: output_shape and the input's H, W
    known only at run time. The full result is sliced from the offset computed at run time
    and zeros are appended past it (it was refused)."""
    x = o1.parameter(ov.PartialShape([1, 4, -1, -1]), np.float32, name="x")
    spatial = o1.gather(o1.shape_of(x), o1.constant(np.array([2, 3], np.int64)), 0)
    target = o1.add(
        o1.multiply(spatial, o1.constant(np.array([2], np.int64))),
        o1.constant(np.array(extra, np.int64)),
    )
    weights = o1.constant(np.random.default_rng(0).standard_normal((4, 3, 3, 3)), np.float32)
    y = o1.convolution_backprop_data(
        x,
        weights,
        [2, 2],
        pads_begin=pads_begin,
        pads_end=[0, 0],
        output_shape=target,
        auto_pad=auto_pad,
        output_padding=output_padding,
    )
    xml = _save(tmp_path, [y], [x])
    converted = b2s_onnx.convert_ir(xml)
    for h, w in ((5, 6), (3, 8)):
        feeds = {"x": np.random.default_rng(h).standard_normal((1, 4, h, w)).astype(np.float32)}
        (ours,) = run_onnxruntime(converted, feeds).values()
        (theirs,) = _openvino(xml, feeds)
        assert ours.shape == theirs.shape == (1, 3, 2 * h + extra[0], 2 * w + extra[1])
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
