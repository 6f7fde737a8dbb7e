"""Cases from the parameter grids of OpenVINO's own CPU single-layer tests that converted
wrongly or not at all: corner attributes (empty axis lists, rounded scales, ellipses of
different ranks, narrow integer types), each against OpenVINO's CPU plugin and the spec."""

from __future__ import annotations

import re

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close

ov = pytest.importorskip("openvino")
import openvino.opset2 as o2  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset10 as o10  # noqa: E402
import openvino.opset11 as o11  # noqa: E402
import openvino.opset12 as o12  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
F32_HINT = {"INFERENCE_PRECISION_HINT": "f32"}


def _i64(values) -> ov.Node:
    return o15.constant(np.asarray(values, np.int64))


def _save(tmp_path, outputs, params, edit=None):
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(outputs, params), xml, compress_to_fp16=False)
    if edit:
        xml.write_text(edit(xml.read_text()))
    return xml


def _both(xml, feeds):
    """(ours, OpenVINO's CPU plugin) for every output."""
    ours = list(run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values())
    theirs = ov.Core().compile_model(xml, "CPU", F32_HINT)(feeds)
    return [(o, np.asarray(theirs[i])) for i, o in enumerate(ours)]


@pytest.mark.parametrize("reduce", [o15.reduce_l1, o15.reduce_l2], ids=["L1", "L2"])
def test_norm_over_no_axes_is_the_magnitude(tmp_path, reduce):
    """ReduceL1/L2 over an empty axes list reduce nothing but still take |x|."""
    x = o15.parameter([2, 4], F32, name="x")
    xml = _save(tmp_path, [reduce(x, _i64([]), True)], [x])
    feeds = {"x": np.array([[-1.5, 2.0, -3.0, 4.0], [0.0, -0.25, 7.0, -8.0]], F32)}
    pairs = _both(xml, feeds)
    assert_close(pairs, exact=True)
    np.testing.assert_array_equal(pairs[0][0], np.abs(feeds["x"]))


def test_normalize_l2_over_no_axes_divides_each_element_by_itself(tmp_path):
    """The spec's corner case: 1 for every non-zero element (negative and NaN too), 0 for 0;
    ONNX's ReduceSum over no axes would have reduced over all of them."""
    x = o15.parameter([1, 5], F32, name="x")
    xml = _save(tmp_path, [o15.normalize_l2(x, _i64([]), 1e-6, "add")], [x])
    feeds = {"x": np.array([[-2.0, 0.0, 3.0, -0.5, np.nan]], F32)}
    pairs = _both(xml, feeds)
    assert_close(pairs, exact=True)
    np.testing.assert_array_equal(pairs[0][0], [[1, 0, 1, 1, 1]])


@pytest.mark.parametrize(
    ("shape", "across", "empty_attribute"),
    [([3, 19], False, False), ([5], True, False), ([2, 3, 4, 5], True, True)],
)
def test_mvn1_with_empty_reduction_axes(tmp_path, shape, across, empty_attribute):
    """OpenVINO writes reduction_axes="" (rank 1, or rank 2 without across_channels) and
    reads it as not given: the axes follow across_channels, and with none left every
    element is its own group (x - x)."""
    x = o15.parameter(shape, F32, name="x")
    layer = o2.mvn(x, across_channels=across, normalize_variance=True, eps=1e-9)

    def empty(text):
        return re.sub(r'reduction_axes="[^"]*"', 'reduction_axes=""', text)

    xml = _save(tmp_path, [layer], [x], empty if empty_attribute else None)
    feeds = {"x": np.random.default_rng(0).uniform(-5, 5, shape).astype(F32)}
    assert_close(_both(xml, feeds), atol=2e-6)


#: (element type, reductions) OpenVINO runs that onnxruntime has no kernel for.
NARROW_INTEGER_REDUCTIONS = [
    (np.uint8, ["sum", "mean", "prod", "l1", "max", "min"]),
    (np.int8, ["sum", "mean", "prod", "l1"]),
    (np.int16, ["sum", "mean", "max", "min", "prod"]),
    (np.uint32, ["sum", "max", "min", "prod", "l1"]),
    (np.uint64, ["sum", "prod"]),
]


@pytest.mark.parametrize(
    ("dtype", "name"),
    [(dtype, name) for dtype, names in NARROW_INTEGER_REDUCTIONS for name in names],
)
def test_reductions_of_narrow_integer_types_match_openvino(tmp_path, dtype, name):
    """Computed in int64 and cast back (inputs small enough that nothing overflows, where
    the plugin would saturate i8/u8 and the reference wrap)."""
    x = o15.parameter([2, 3, 2, 4], dtype, name="x")
    reduce = getattr(o15, f"reduce_{name}")
    xml = _save(tmp_path, [reduce(x, _i64([1, 3]), False)], [x])
    low = 0 if np.dtype(dtype).kind == "u" else -3
    data = np.random.default_rng(1).integers(low, 4, [2, 3, 2, 4]).astype(dtype)
    if name == "prod":
        data = np.clip(data, -1 if low else 0, 2).astype(dtype)
    pairs = _both(xml, {"x": data})
    assert pairs[0][0].dtype == dtype
    assert_close(pairs, exact=True)


def test_u64_mean_is_refused_by_name(tmp_path):
    x = o15.parameter([2, 3], np.uint64, name="x")
    xml = _save(tmp_path, [o15.reduce_mean(x, _i64([1]), False)], [x])
    with pytest.raises(b2s_onnx.B2SError, match="u64"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("mode", ["linear_onnx", "cubic", "linear"])
def test_interpolate_by_rounded_scales_takes_openvino_sizes(tmp_path, mode):
    """Scale 1.333333 of 6 is 7.999998: OpenVINO's shape rule (scale + 1e-6) gives 8, ONNX's
    floor 7; the Resize is given OpenVINO's sizes."""
    x = o15.parameter([1, 4, 6, 6], F32, name="x")
    layer = o11.interpolate(
        x,
        o15.constant(np.array([1, 1, 1.333333, 0.333333], F32)),
        mode,
        "scales",
        [0] * 4,
        [0] * 4,
        "half_pixel",
        "round_prefer_floor",
        False,
        -0.75,
        _i64([0, 1, 2, 3]),
    )
    xml = _save(tmp_path, [layer], [x])
    feeds = {"x": np.random.default_rng(0).uniform(-5, 5, [1, 4, 6, 6]).astype(F32)}
    pairs = _both(xml, feeds)
    assert pairs[0][0].shape == (1, 4, 8, 2)
    # OpenVINO maps coordinates by the given scale, the Resize by out / in: float32 apart.
    assert_close(pairs, atol=1e-4)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("nearest", ["ceil", "round_prefer_ceil"])
def test_nearest_interpolate_leaves_axes_of_unchanged_length_alone(tmp_path, dynamic, nearest):
    """tf_half_pixel_for_nn reads x + 0.5, which ceil takes to the next element: OpenVINO
    maps an axis kept at its length to itself whatever the mode."""
    x = o15.parameter([-1, -1, -1, -1] if dynamic else [1, 2, 3, 4], F32, name="x")
    layer = o10.interpolate(
        x,
        _i64([1, 2, 3, 5]),
        o15.constant(np.array([1, 1, 1, 1.25], F32)),
        "nearest",
        "sizes",
        [0] * 4,
        [0] * 4,
        "tf_half_pixel_for_nn",
        nearest,
        False,
        -0.75,
        _i64([0, 1, 2, 3]),
    )
    xml = _save(tmp_path, [layer], [x])
    feeds = {"x": np.arange(24, dtype=F32).reshape(1, 2, 3, 4)}
    assert_close(_both(xml, feeds), exact=True)


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("...abc,...cd->...abd", [[2, 3, 4, 5], [5, 6]]),
        ("a...b,b...->a...", [[2, 3, 1, 4], [4, 5]]),
        ("...ij,...jk->...ik", [[2, 1, 3, 4], [5, 4, 2]]),
    ],
)
def test_einsum_broadcasts_ellipses_of_different_ranks(tmp_path, equation, shapes):
    params = [o15.parameter(shape, F32, name=f"x{i}") for i, shape in enumerate(shapes)]
    xml = _save(tmp_path, [o15.einsum(params, equation)], params)
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.uniform(-3, 3, shape).astype(F32) for i, shape in enumerate(shapes)}
    pairs = _both(xml, feeds)
    assert_close(pairs, atol=1e-5)
    np.testing.assert_allclose(pairs[0][0], np.einsum(equation, *feeds.values()), atol=1e-4)


@pytest.mark.parametrize("rounding", ["ceil", "ceil_torch"])
@pytest.mark.parametrize("pool", ["max", "avg-exclude", "avg-count"])
def test_ceil_pool_whose_axes_disagree_about_the_last_window(tmp_path, rounding, pool):
    """Width: the last 'ceil' window starts in the end padding (floor mode drops it); height:
    a partial window inside the data that floor mode would drop too (30 rows, kernel 3,
    stride 2: 15 windows, floor 14), so the height's end padding is stretched."""
    x = o15.parameter([1, 3, 30, 30], F32, name="x")
    if pool == "max":
        layer = o15.max_pool(x, [2, 2], [1, 1], [0, 0], [0, 2], [3, 3], rounding, "explicit")
    else:
        exclude = pool == "avg-exclude"
        layer = o15.avg_pool(x, [2, 2], [0, 0], [0, 2], [3, 3], exclude, rounding)
    xml = _save(tmp_path, list(layer.outputs()), [x])
    feeds = {"x": np.random.default_rng(0).uniform(-10, 10, (1, 3, 30, 30)).astype(F32)}
    pairs = _both(xml, feeds)
    if pool == "max":
        assert_close(pairs, exact=True)
    else:
        assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("exclude", [True, False])
def test_unpadded_avg_pool_counts_only_the_data_either_way(tmp_path, exclude):
    """With no padding OpenVINO divides a ceil window by its part inside the data, counting
    padding or not: an empty window past the data is 0 / 0 = NaN in both."""
    x = o15.parameter([1, 1, 6], F32, name="x")
    layer = o15.avg_pool(x, [3], [0], [0], [1], exclude, "ceil", "explicit")
    xml = _save(tmp_path, [layer.output(0)], [x])
    feeds = {"x": np.random.default_rng(0).uniform(-10, 10, (1, 1, 6)).astype(F32)}
    pairs = _both(xml, feeds)
    assert_close(pairs, atol=1e-6)
    assert np.isnan(pairs[0][0][0, 0, -1])


@pytest.mark.parametrize("rounding", ["floor", "ceil"])
@pytest.mark.parametrize("auto_pad", ["same_upper", "same_lower"])
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_same_pool_with_a_stride_past_the_window(tmp_path, rounding, auto_pad, pool):
    """SAME's total padding would be negative: OpenVINO clamps it to 0 and then rounds;
    onnxruntime's SAME refused negative pads at run time."""
    x = o15.parameter([1, 2, 4, 12], F32, name="x")
    if pool == "max":
        layer = o15.max_pool(x, [2, 2], [1, 1], [0, 0], [0, 0], [1, 2], rounding, auto_pad)
    else:
        layer = o15.avg_pool(x, [2, 2], [0, 0], [0, 0], [1, 2], True, rounding, auto_pad)
    xml = _save(tmp_path, [layer.output(0)], [x])
    feeds = {"x": np.random.default_rng(0).uniform(-10, 10, (1, 2, 4, 12)).astype(F32)}
    assert_close(_both(xml, feeds), atol=1e-6)


@pytest.mark.parametrize("shape", [[1, 4, 6, 5], [-1, 4, -1, -1]])
@pytest.mark.parametrize("auto_pad", ["same_upper", "same_lower"])
def test_backprop_data_same_without_output_shape_pads_nothing(tmp_path, shape, auto_pad):
    """The spec: without output_shape, same_* means pads 0 (ONNX's SAME would make the
    output input * stride)."""
    rng = np.random.default_rng(0)
    weights = o15.constant(rng.uniform(-1, 1, [4, 3, 3, 2]).astype(F32))
    x = o15.parameter(shape, F32, name="x")
    layer = o15.convolution_backprop_data(
        x,
        weights,
        [2, 3],
        pads_begin=[0, 0],
        pads_end=[0, 0],
        dilations=[1, 2],
        auto_pad=auto_pad,
    )
    xml = _save(tmp_path, [layer.output(0)], [x])
    feeds = {"x": rng.uniform(-1, 1, [1, 4, 6, 5]).astype(F32)}
    pairs = _both(xml, feeds)
    assert pairs[0][0].shape == (1, 3, 13, 15)
    assert_close(pairs, atol=1e-5)


def test_integer_group_convolution_matches_openvino(tmp_path):
    """ONNX's Conv is float only: the groups' weights become one block-diagonal integer
    convolution (exact)."""
    rng = np.random.default_rng(0)
    x = o15.parameter([1, 16, 12, 12], np.int32, name="x")
    weights = o15.constant(rng.integers(-3, 4, (8, 2, 2, 3, 3)).astype(np.int32))
    layer = o15.group_convolution(x, weights, [1, 1], [1, 0], [0, 1], [1, 1])
    xml = _save(tmp_path, [layer.output(0)], [x])
    feeds = {"x": rng.integers(-3, 4, (1, 16, 12, 12)).astype(np.int32)}
    assert_close(_both(xml, feeds), exact=True)


#: f16 NaNs with payloads, signs and quiet bits in every combination the tests move.
F16_NANS = np.array([0x7F49, 0xFF49, 0x7D11, 0x7E05, 0xFC01, 0x7C01], np.uint16).view(np.float16)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize(
    ("shape", "build"),
    [
        ([3, 4], lambda d: o15.transpose(d, _i64([1, 0]))),
        ([1, 1, 6], lambda d: o15.space_to_depth(d, "blocks_first", 2)),
        ([2, 12, 1], lambda d: o15.depth_to_space(d, "depth_first", 2)),
        (
            [8, 1, 3, 3],
            lambda d: o15.batch_to_space(d, _i64([1, 1, 2, 2]), _i64([0] * 4), _i64([0] * 4)),
        ),
    ],
    ids=["transpose", "space-to-depth", "depth-to-space", "batch-to-space"],
)
def test_f16_nan_payloads_survive_outputs_of_any_size(tmp_path, dynamic, shape, build):
    """onnxruntime's Cast to float16 keeps NaN payloads in whole vector blocks only and
    writes the canonical NaN in the tail: an f16 output whose size is not a whole number of
    blocks is padded to one for the Cast. OpenVINO moves the (quiet) payloads."""
    d = o15.parameter([-1] * len(shape) if dynamic else shape, np.float16, name="data")
    xml = _save(tmp_path, [build(d)], [d])
    size = int(np.prod(shape))
    values = np.resize(F16_NANS, size).reshape(shape)
    values.reshape(-1)[::5] = np.float16(1.5)
    pairs = _both(xml, {"data": values})
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("dtype", [np.int16, np.uint16])
def test_pad_of_16_bit_integers(tmp_path, mode, dtype):
    """onnxruntime's Pad has no int16/uint16 kernel: padded in 32 bits and cast back."""
    d = o15.parameter([3, 5], dtype, name="data")
    layer = o15.pad(d, _i64([1, 2]), _i64([2, -1]), mode)
    xml = _save(tmp_path, [layer], [d])
    data = np.random.default_rng(0).integers(0, 30000, [3, 5]).astype(dtype)
    assert_close(_both(xml, {"data": data}), exact=True)


@pytest.mark.parametrize(
    ("shape", "begin", "end", "mode"),
    [
        ([3, 5], [0, 2], [0, -3], "reflect"),
        ([3, 4], [0, -4], [0, 4], "edge"),
        ([3, 4], [-1, 1], [2, -2], "constant"),
    ],
)
def test_pad_with_run_time_negative_pads_reflects_the_uncropped_data(
    tmp_path, shape, begin, end, mode
):
    """OpenVINO pads the uncropped data, then crops; onnxruntime crops first (and refused
    these): the run-time pads are split into a Pad by their positive parts and a Slice."""
    d = o15.parameter(shape, F32, name="data")
    b = o15.parameter([2], np.int64, name="begin")
    e = o15.parameter([2], np.int64, name="end")
    xml = _save(tmp_path, [o15.pad(d, b, e, mode)], [d, b, e])
    feeds = {
        "data": np.arange(np.prod(shape), dtype=F32).reshape(shape),
        "begin": np.array(begin, np.int64),
        "end": np.array(end, np.int64),
    }
    assert_close(_both(xml, feeds), exact=True)


@pytest.mark.parametrize(
    ("dtype", "reduction"),
    [(np.bool_, "min"), (np.bool_, "max"), (np.uint8, "sub"), (np.uint16, "sub")],
)
def test_scatter_nd_update_reductions_on_bool_and_unsigned(tmp_path, dtype, reduction):
    """Boolean min/max run in uint8 (onnxruntime's ScatterND refuses them on bool);
    unsigned 'sub' wraps as 0 - u (ONNX's Neg has no unsigned types)."""
    d = o15.parameter([5, 3], dtype, name="data")
    u = o15.parameter([4, 3], dtype, name="updates")
    indices = o15.constant(np.array([[1], [1], [-4], [3]], np.int64))
    xml = _save(tmp_path, [o15.scatter_nd_update(d, indices, u, reduction)], [d, u])
    rng = np.random.default_rng(0)
    high = 2 if dtype == np.bool_ else 200
    feeds = {
        "data": rng.integers(0, high, [5, 3]).astype(dtype),
        "updates": rng.integers(0, high, [4, 3]).astype(dtype),
    }
    assert_close(_both(xml, feeds), exact=True)


@pytest.mark.parametrize("use_init", [True, False])
@pytest.mark.parametrize("reduction", ["min", "max", "sum", "prod"])
def test_scatter_elements_update_reductions_on_bool(tmp_path, reduction, use_init):
    d = o15.parameter([4, 3], np.bool_, name="data")
    u = o15.parameter([2, 3], np.bool_, name="updates")
    indices = o15.constant(np.array([[1, 2, 0], [1, -1, 0]], np.int64))
    layer = o12.scatter_elements_update(d, indices, u, _i64(0), reduction, use_init)
    xml = _save(tmp_path, [layer], [d, u])
    rng = np.random.default_rng(1)
    feeds = {
        "data": rng.integers(0, 2, [4, 3]).astype(bool),
        "updates": rng.integers(0, 2, [2, 3]).astype(bool),
    }
    assert_close(_both(xml, feeds), exact=True)


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint64])
def test_gather_tree_of_narrow_and_unsigned_ids(tmp_path, dtype):
    """onnxruntime's Where has no kernel for these: traced in a wider type, cast back."""
    params = [o15.parameter([3, 2, 4], dtype, name=n) for n in ("step", "parent")]
    params += [o15.parameter([2], dtype, name="lengths"), o15.parameter([], dtype, name="end")]
    xml = _save(tmp_path, [o15.gather_tree(*params)], params)
    rng = np.random.default_rng(0)
    feeds = {
        "step": rng.integers(0, 9, [3, 2, 4]).astype(dtype),
        "parent": rng.integers(0, 4, [3, 2, 4]).astype(dtype),
        "lengths": np.array([3, 2], dtype),
        "end": np.array(7, dtype),
    }
    assert_close(_both(xml, feeds), exact=True)


def test_convert_like_to_bf16_rounds(tmp_path):
    """ConvertLike to a bf16 tensor's type rounds to bf16 (ties to even) as Convert does."""
    x = o15.parameter([6], F32, name="x")
    like = o15.convert(o15.constant(np.zeros([1], F32)), "bf16")
    layer = o15.convert(o15.convert_like(x, like), "f32")
    xml = _save(tmp_path, [layer], [x])
    feeds = {"x": np.array([11.654755, 1000.3, 2049.0, 65535.0, 97.75, -3.14159], F32)}
    pairs = _both(xml, feeds)
    assert_close(pairs, exact=True)
    np.testing.assert_array_equal(pairs[0][0][1:4], [1000.0, 2048.0, 65536.0])


@pytest.mark.parametrize("name", ["sqrt", "tan", "tanh", "atan", "cos", "cosh", "sinh", "asinh"])
def test_integer_activations_round_to_the_nearest_integer(tmp_path, name):
    """OpenVINO computes these on integers in floating point and rounds (its own integer
    activation tests list them); results beyond the type saturate."""
    x = o15.parameter([12], np.int32, name="x")
    xml = _save(tmp_path, [getattr(o15, name)(x)], [x])
    values = np.array([0, 1, 2, 3, 4, 5, 7, 9, 10, 16, 17, 25], np.int32)
    if name in ("tan", "tanh", "atan", "cos", "cosh", "sinh", "asinh"):
        values = values - 6
    assert_close(_both(xml, {"x": values}), exact=True)


def _pdpd(tmp_path, first, second, axis, make):
    """A binary layer with auto_broadcast='pdpd' (PaddlePaddle IRs): the Python API cannot
    set its axis, so the saved XML is edited and read back (OpenVINO re-infers the ports)."""
    a = o15.parameter(first, F32, name="a")
    b = o15.parameter([1] * len(second), F32, name="b")
    xml = _save(tmp_path, [make(a, b)], [a, b])
    text = re.sub(
        r'<data auto_broadcast="numpy" */>',
        f'<data auto_broadcast="pdpd" auto_broadcast.auto_broadcast_axis="{axis}" />',
        xml.read_text(),
    )
    ones = ",".join(["1"] * len(second))
    text = text.replace(f'shape="{ones}"', f'shape="{",".join(map(str, second))}"', 1)
    xml.write_text(text)
    ov.save_model(ov.Core().read_model(xml), xml, compress_to_fp16=False)
    return xml


@pytest.mark.parametrize(
    ("second", "axis"), [([3, 4], 1), ([4, 5], -1), ([3, 4, 1], 1), ([2, 3], 0)]
)
@pytest.mark.parametrize("make", [o15.add, o15.multiply, o15.maximum], ids=["add", "mul", "max"])
def test_pdpd_broadcasting_places_the_second_input_at_its_axis(tmp_path, second, axis, make):
    xml = _pdpd(tmp_path, [2, 3, 4, 5], second, axis, make)
    rng = np.random.default_rng(0)
    feeds = {
        "a": rng.uniform(-1, 1, [2, 3, 4, 5]).astype(F32),
        "b": rng.uniform(-1, 1, second).astype(F32),
    }
    assert_close(_both(xml, feeds), exact=True)


@pytest.mark.parametrize("right", [True, False])
def test_bucketize_of_nan_and_of_no_buckets(tmp_path, right):
    """NaN sorts after every bucket (OpenVINO's upper_bound), and no buckets at all put
    everything in bucket 0 (onnxruntime's ReduceSum over an empty axis kept the axis)."""
    x = o15.parameter([10], F32, name="x")
    buckets = o15.constant(np.array([-1, 0, 0, 2, 5], F32))
    empty = o15.constant(np.zeros([0], F32))
    outputs = [o3.bucketize(x, buckets, "i64", right), o3.bucketize(x, empty, "i32", right)]
    xml = _save(tmp_path, outputs, [x])
    feeds = {"x": np.array([np.nan, np.inf, -np.inf, -1, 0, 2, 5, 6, -2, 0.5], F32)}
    assert_close(_both(xml, feeds), exact=True)
