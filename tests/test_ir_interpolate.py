"""Interpolate-1/4/11 in every mode, coordinate transformation, nearest mode and with pads,
against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest
from openvino.utils.node_factory import NodeFactory

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset11 as o11  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("Interpolate", "opset1"), ("Interpolate", "opset4"), ("Interpolate", "opset11")}
COORDINATES = [
    "half_pixel",
    "pytorch_half_pixel",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "align_corners",
]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"]
#: Down on both axes, and down on one, up on the other.
SIZES = [[3, 4], [5, 13]]
SHAPE = [1, 2, 6, 7]


def i64(values):
    return o1.constant(np.asarray(values, np.int64))


def interpolate_11(sizes, **attrs):
    attrs.setdefault("shape_calculation_mode", "sizes")
    return lambda x: o11.interpolate(x, i64(sizes), axes=i64([2, 3]), **attrs)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("coordinates", COORDINATES)
@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_nearest_matches_openvino_exactly(tmp_path, sizes, coordinates, nearest_mode):
    build = interpolate_11(
        sizes,
        mode="nearest",
        coordinate_transformation_mode=coordinates,
        nearest_mode=nearest_mode,
    )
    pairs, _ = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("mode", ["linear", "linear_onnx", "cubic"])
@pytest.mark.parametrize(
    "coordinates", ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"]
)
def test_linear_and_cubic_match_openvino(tmp_path, sizes, mode, coordinates):
    """OpenVINO's CPU plugin ignores antialias in these modes: set it on every other case."""
    build = interpolate_11(
        sizes,
        mode=mode,
        coordinate_transformation_mode=coordinates,
        antialias=coordinates in ("half_pixel", "asymmetric"),
        cube_coeff=-0.6,
    )
    pairs, _ = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("mode", ["bilinear_pillow", "bicubic_pillow"])
def test_pillow_modes_match_openvino(tmp_path, sizes, mode):
    pairs, _ = run_both(tmp_path, interpolate_11(sizes, mode=mode), [SHAPE])
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear_onnx", "cubic", "bilinear_pillow"])
def test_pads_are_zeros_added_before_resizing(tmp_path, mode):
    build = interpolate_11(
        [9, 12],
        mode=mode,
        pads_begin=[0, 0, 1, 2],
        pads_end=[0, 0, 2, 0],
        coordinate_transformation_mode="asymmetric",
    )
    pairs, _ = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear_onnx"])
def test_scales_calculation_matches_openvino(tmp_path, mode):
    def build(x):
        scales = o1.constant(np.asarray([1.5, 0.75], np.float32))
        return o11.interpolate(
            x,
            scales,
            mode=mode,
            shape_calculation_mode="scales",
            axes=i64([2, 3]),
            nearest_mode="floor",
            coordinate_transformation_mode="asymmetric",
        )

    pairs, _ = run_both(tmp_path, build, [[1, 2, 8, 8]])
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize(
    ("mode", "coordinates", "nearest_mode"),
    [
        ("nearest", "tf_half_pixel_for_nn", "round_prefer_ceil"),
        ("nearest", "half_pixel", "simple"),
        ("linear_onnx", "align_corners", "floor"),
    ],
)
def test_interpolate_4_matches_openvino(tmp_path, mode, coordinates, nearest_mode):
    factory = NodeFactory("opset4")

    def build(x):
        operands = [x, i64([12, 5]), o1.constant(np.asarray([2.0, 5 / 7], np.float32)), i64([2, 3])]
        return factory.create(
            "Interpolate",
            [o.output(0) for o in operands],
            {
                "mode": mode,
                "shape_calculation_mode": "sizes",
                "coordinate_transformation_mode": coordinates,
                "nearest_mode": nearest_mode,
            },
        )

    pairs, _ = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, atol=1e-5)


def test_interpolate_refuses_an_unknown_nearest_mode(tmp_path):
    x = o1.parameter(SHAPE, np.float32, name="x")
    layer = interpolate_11([3, 4], mode="nearest", nearest_mode="floor")(x)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer.output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('nearest_mode="floor"', 'nearest_mode="sideways"'))
    with pytest.raises(B2SError, match="nearest_mode"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize(
    ("mode", "axes", "align_corners"),
    [
        ("nearest", [2, 3], False),
        ("nearest", [3], True),
        ("linear", [2, 3], False),
        ("linear", [1, 3], False),
        ("linear", [2, 3], True),
        ("cubic", [2, 3], False),
    ],
)
def test_interpolate_1_with_pads_matches_openvino(tmp_path, sizes, mode, axes, align_corners):
    target = [sizes[0] + 1, sizes[1]] if axes == [1, 3] else sizes[-len(axes) :]

    def build(x):
        # OpenVINO's shape inference and CPU plugin disagree on where Interpolate-1 pads other
        # axes go: pads only where both agree (the last two axes).
        pads_begin, pads_end = [0] * 4, [0] * 4
        if axes == [2, 3]:
            pads_begin[3], pads_end[2] = 1, 2
        attrs = {
            "axes": axes,
            "mode": mode,
            "align_corners": align_corners,
            "pads_begin": pads_begin,
            "pads_end": pads_end,
        }
        return o1.interpolate(x, i64(target), attrs)

    pairs, _ = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("calculation", ["scales", "sizes"])
@pytest.mark.parametrize("antialias", [False, True])
def test_cubic_listing_every_axis_drops_the_unscaled_ones(tmp_path, calculation, antialias):
    """OpenVINO's ONNX frontend lists batch and channels among the axes (scale 1); ONNX's
    cubic Resize cannot take them in onnxruntime, and unscaled they change nothing."""
    target = [1.0, 1.0, 1.5, 0.5] if calculation == "scales" else [2, 3, 9, 4]
    dtype = np.float32 if calculation == "scales" else np.int64

    def build(x):
        return o11.interpolate(
            x,
            o1.constant(np.asarray(target, dtype)),
            "cubic",
            calculation,
            antialias=antialias,
            axes=o1.constant(np.asarray([0, 1, 2, 3], np.int64)),
        )

    pairs, _ = run_both(tmp_path, build, [[2, 3, 6, 8]])
    assert_close(pairs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([1, 2, 12, 14], ["Resize"]),
        ([1, 2, 6, 21], ["Resize"]),
        ([1, 2, 6, 7], ["Identity"]),
        ([1, 2, 3, 10], ["Gather", "Gather"]),
    ],
    ids=["2x-both", "3x-width", "unchanged", "down-and-fractional"],
)
def test_nearest_listing_every_axis_moves_only_the_resized_ones(tmp_path, sizes, expected):
    """OpenVINO's ONNX frontend lists all four axes: an unchanged one is no Gather (a copy);
    integer upsampling is onnxruntime's nearest Resize, others Gathers; all bit-exact."""

    def build(x):
        return o11.interpolate(
            x,
            i64(sizes),
            axes=i64([0, 1, 2, 3]),
            mode="nearest",
            shape_calculation_mode="sizes",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )

    pairs, converted = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, exact=True)
    assert [n.op_type for n in converted.graph.node] == expected


@pytest.mark.parametrize("coordinates", COORDINATES)
@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_integer_upsampling_matches_openvino_exactly_in_every_mode(
    tmp_path, coordinates, nearest_mode
):
    build = interpolate_11(
        [12, 21],
        mode="nearest",
        coordinate_transformation_mode=coordinates,
        nearest_mode=nearest_mode,
    )
    pairs, _ = run_both(tmp_path, build, [SHAPE])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("coordinates", COORDINATES)
@pytest.mark.parametrize("nearest_mode", NEAREST)
def test_nearest_on_run_time_sizes_matches_openvino_exactly(tmp_path, coordinates, nearest_mode):
    """Dynamic H and W, output size read from the input (TensorFlow's resize_nearest on a
    dynamic image): the index tables are computed at run time, bit-exact at every size
    (tf_half_pixel_for_nn and 'simple' were refused)."""

    def build(x):
        spatial = o1.strided_slice(o1.shape_of(x), i64([2]), i64([4]), i64([1]), [0], [0])
        sizes = o1.add(o1.multiply(spatial, i64([2, 1])), i64([1, -2]))  # 2h+1, w-2
        return o11.interpolate(
            x,
            sizes,
            axes=i64([2, 3]),
            mode="nearest",
            shape_calculation_mode="sizes",
            coordinate_transformation_mode=coordinates,
            nearest_mode=nearest_mode,
        )

    for h, w in ((3, 9), (6, 7), (1, 3)):
        feeds = {"in0": np.random.default_rng(h).standard_normal([1, 2, h, w]).astype(np.float32)}
        pairs, _ = run_both(tmp_path, build, [[1, 2, -1, -1]], feeds=feeds)
        assert pairs[0][0].shape == (1, 2, 2 * h + 1, w - 2)
        assert_close(pairs, exact=True)
