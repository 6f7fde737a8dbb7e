"""Every supported IR layer: built with OpenVINO's Python API, saved as IR, converted, and
run in onnxruntime against OpenVINO's CPU plugin (compiled with f32 precision)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.ir.converters import supported_ops
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset2 as o2  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset4 as o4  # noqa: E402
import openvino.opset5 as o5  # noqa: E402
import openvino.opset6 as o6  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset11 as o11  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
I64 = np.int64


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


def rng_const(shape, seed=0, scale=0.5):
    return o1.constant((np.random.default_rng(seed).standard_normal(shape) * scale).astype(F32))


def run_both(tmp_path, build, shapes, dtypes=None, *, feeds=None, compress=False):
    """Saves the model as IR, converts it, runs both; returns (ours, theirs, onnx model)."""
    dtypes = dtypes or [F32] * len(shapes)
    params = [
        o1.parameter(shape, dtype, name=f"in{i}")
        for i, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True))
    ]
    outputs = build(*params)
    outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
    model = ov.Model([o.output(0) if hasattr(o, "output") else o for o in outputs], params)
    xml = tmp_path / "model.xml"
    ov.save_model(model, xml, compress_to_fp16=compress)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    rng = np.random.default_rng(1)
    if feeds is None:
        feeds = {}
        for param, dtype in zip(params, dtypes, strict=True):
            shape = list(param.get_output_shape(0))
            if np.issubdtype(dtype, np.floating):
                feeds[param.get_friendly_name()] = rng.standard_normal(shape).astype(dtype)
            elif dtype == np.bool_:
                feeds[param.get_friendly_name()] = rng.integers(0, 2, shape).astype(bool)
            else:
                feeds[param.get_friendly_name()] = rng.integers(-20, 20, shape).astype(dtype)
    ours = run_onnxruntime(converted, feeds)
    compiled = ov.Core().compile_model(
        ov.Core().read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    theirs = compiled(feeds)
    pairs = []
    for port in compiled.outputs:
        name = next(n for n in ours if n in port.get_names())
        pairs.append((ours[name], np.asarray(theirs[port])))
    return pairs, converted


def assert_close(pairs, atol=1e-5, rtol=1e-5, exact=False):
    for ours, theirs in pairs:
        assert ours.shape == theirs.shape
        if exact:
            assert ours.tobytes() == theirs.astype(ours.dtype).tobytes()
        else:
            np.testing.assert_allclose(
                ours.astype(np.float64), theirs.astype(np.float64), atol=atol, rtol=rtol
            )


X4 = [[1, 3, 8, 10]]
CASES = {
    "Add": (lambda a, b: o1.add(a, b), [[2, 3, 4], [3, 1]]),
    "Subtract": (lambda a, b: o1.subtract(a, b), [[2, 3, 4], [4]]),
    "Multiply": (lambda a, b: o1.multiply(a, b), [[2, 3], [2, 3]]),
    "Divide": (lambda a, b: o1.divide(a, o1.add(o1.abs(b), c(1.0, F32))), [[2, 3], [2, 3]]),
    "Maximum": (lambda a, b: o1.maximum(a, b), [[2, 3], [1, 3]]),
    "Minimum": (lambda a, b: o1.minimum(a, b), [[2, 3], [1, 3]]),
    "Power": (lambda a: o1.power(o1.abs(a), c(1.5, F32)), [[2, 3]]),
    "SquaredDifference": (lambda a, b: o1.squared_difference(a, b), [[2, 3], [2, 3]]),
    "ReLU": (lambda a: o1.relu(a), [[2, 5]]),
    "Sigmoid": (lambda a: o1.sigmoid(a), [[2, 5]]),
    "Tanh": (lambda a: o1.tanh(a), [[2, 5]]),
    "Exp": (lambda a: o1.exp(a), [[2, 5]]),
    "Log": (lambda a: o1.log(o1.abs(a)), [[2, 5]]),
    "Sqrt": (lambda a: o1.sqrt(o1.abs(a)), [[2, 5]]),
    "Negative": (lambda a: o1.negative(a), [[2, 5]]),
    "Floor": (lambda a: o1.floor(a), [[2, 5]]),
    "Erf": (lambda a: o1.erf(a), [[2, 5]]),
    "Clamp": (lambda a: o1.clamp(a, -0.5, 0.7), [[2, 5]]),
    "Elu": (lambda a: o1.elu(a, 0.8), [[2, 5]]),
    "PReLU-channel": (lambda a: o1.prelu(a, c([0.1, 0.2, 0.3], F32)), X4),
    "PReLU-scalar": (lambda a: o1.prelu(a, c([0.25], F32)), X4),
    "Swish": (lambda a: o4.swish(a, c(1.3, F32)), [[2, 5]]),
    "HSwish": (lambda a: o4.hswish(a), [[2, 5]]),
    "Mish": (lambda a: o4.mish(a), [[2, 5]]),
    "SoftPlus": (lambda a: o4.softplus(a), [[2, 5]]),
    "HSigmoid": (lambda a: o5.hsigmoid(a), [[2, 5]]),
    "Gelu-erf": (lambda a: o1.multiply(o4.gelu(a), c(1.0, F32)), [[2, 5]]),
    "Gelu-tanh": (lambda a: ov.opset7.gelu(a, "tanh"), [[2, 5]]),
    "SoftMax-1": (lambda a: o1.softmax(a, 1), [[2, 5, 3]]),
    "SoftMax-8": (lambda a: o8.softmax(a, -1), [[2, 5, 3]]),
    "LogSoftmax": (lambda a: o5.log_softmax(a, 1), [[2, 5]]),
    "Convolution": (
        lambda a: o1.convolution(a, rng_const([4, 3, 3, 3]), [1, 2], [1, 0], [1, 1], [1, 1]),
        X4,
    ),
    "Convolution-same": (
        lambda a: o1.convolution(
            a, rng_const([4, 3, 3, 3]), [2, 2], [0, 0], [0, 0], [1, 1], "same_upper"
        ),
        X4,
    ),
    "GroupConvolution": (
        lambda a: o1.group_convolution(
            a, rng_const([3, 2, 1, 3, 3]), [1, 1], [1, 1], [1, 1], [2, 2]
        ),
        X4,
    ),
    "ConvolutionBackpropData": (
        lambda a: o1.convolution_backprop_data(
            a, rng_const([3, 2, 3, 3]), [2, 2], pads_begin=[1, 1], pads_end=[0, 0], dilations=[1, 1]
        ),
        X4,
    ),
    "ConvolutionBackpropData-output_shape": (
        lambda a: o1.convolution_backprop_data(
            a, rng_const([3, 2, 3, 3]), [2, 2], c([17, 20]), dilations=[1, 1]
        ),
        X4,
    ),
    "ConvolutionBackpropData-output_shape-same_lower": (
        lambda a: o1.convolution_backprop_data(
            a, rng_const([3, 2, 3, 3]), [2, 2], c([16, 19]), dilations=[1, 1], auto_pad="same_lower"
        ),
        X4,
    ),
    "GroupConvolutionBackpropData": (
        lambda a: o1.group_convolution_backprop_data(
            a,
            rng_const([3, 1, 2, 3, 3]),
            [2, 2],
            pads_begin=[0, 1],
            pads_end=[1, 0],
            dilations=[1, 1],
            output_padding=[1, 1],
        ),
        X4,
    ),
    "MaxPool-1": (lambda a: o1.max_pool(a, [2, 2], [0, 0], [0, 0], [3, 3], "ceil"), X4),
    "MaxPool-8": (lambda a: o8.max_pool(a, [2, 2], [1, 1], [1, 1], [1, 1], [3, 3]).output(0), X4),
    "AvgPool-exclude": (lambda a: o1.avg_pool(a, [2, 2], [1, 1], [1, 1], [3, 3], True), X4),
    "AvgPool-include": (lambda a: o1.avg_pool(a, [2, 2], [1, 1], [1, 1], [3, 3], False), X4),
    "AvgPool-ceil": (
        lambda a: o1.avg_pool(a, [2, 2], [0, 0], [0, 0], [2, 2], False, "ceil"),
        [[1, 3, 7, 9]],
    ),
    "MatMul": (lambda a, b: o1.matmul(a, b, False, True), [[2, 3, 4], [5, 4]]),
    "MatMul-ta": (lambda a, b: o1.matmul(a, b, True, False), [[4, 3], [4, 5]]),
    "Concat": (lambda a, b: o1.concat([a, b], 1), [[2, 3], [2, 4]]),
    "Reshape-zero": (lambda a: o1.reshape(a, c([0, -1]), True), [[2, 3, 4]]),
    "Reshape": (lambda a: o1.reshape(a, c([4, 6]), False), [[2, 3, 4]]),
    "Transpose": (lambda a: o1.transpose(a, c([2, 0, 1])), [[2, 3, 4]]),
    "Squeeze": (lambda a: o1.squeeze(a, c([1])), [[2, 1, 4]]),
    "Unsqueeze": (lambda a: o1.unsqueeze(a, c([0, 3])), [[2, 4]]),
    "StridedSlice": (
        lambda a: o1.strided_slice(
            a, c([0, 1, -3]), c([0, 3, -1]), c([1, 1, 1]), [1, 0, 0], [1, 0, 0]
        ),
        [[2, 4, 6]],
    ),
    "StridedSlice-shrink": (
        lambda a: o1.strided_slice(
            a, c([1, 0, 2]), c([2, 0, 5]), c([1, 1, 2]), [0, 1, 0], [0, 1, 0], [], [1, 0, 0]
        ),
        [[2, 4, 6]],
    ),
    "StridedSlice-new-axis": (
        lambda a: o1.strided_slice(
            a, c([0, 0, 1]), c([1, 0, 3]), c([1, 1, 1]), [1, 0, 0], [1, 0, 0], [0, 1, 0]
        ),
        [[2, 4]],
    ),
    "StridedSlice-ellipsis": (
        lambda a: o1.strided_slice(
            a, c([0, 1]), c([0, 3]), c([1, 1]), [0, 0], [0, 0], [], [], [1, 0]
        ),
        [[2, 3, 5]],
    ),
    "StridedSlice-reverse": (
        lambda a: o1.strided_slice(a, c([0, -1]), c([0, 0]), c([1, -1]), [1, 1], [1, 1]),
        [[3, 5]],
    ),
    "Gather": (lambda a: o8.gather(a, c([2, 0, -1]), c(1)), [[2, 4, 3]]),
    "VariadicSplit": (lambda a: o1.variadic_split(a, c(1), c([1, -1, 2])), [[2, 6]]),
    "Split": (lambda a: o1.split(a, c(2), 3), [[2, 2, 6]]),
    "ShapeOf-fold": (lambda a: o1.add(a, o1.convert(o1.shape_of(a), "f32")), [[3, 2]]),
    "Tile": (lambda a: o1.tile(a, c([2, 1, 3])), [[2, 3]]),
    "Broadcast": (lambda a: ov.opset3.broadcast(a, c([2, 3, 4])), [[3, 1]]),
    "Range-fold": (
        lambda a: o1.add(a, o4.range(c(0.0, F32), c(3.0, F32), c(1.0, F32), "f32")),
        [[2, 3]],
    ),
    "Pad": (lambda a: o1.pad(a, c([0, 1]), c([1, 2]), "constant", c(0.5, F32)), [[2, 3]]),
    "Pad-reflect": (lambda a: o1.pad(a, c([0, 1]), c([1, 1]), "reflect"), [[3, 4]]),
    "Select": (lambda a, b: o1.select(o1.greater(a, b), a, b), [[2, 3], [2, 3]]),
    "Equal-logical": (
        lambda a, b: o1.convert(o1.logical_or(o1.less(a, b), o1.not_equal(a, b)), "f32"),
        [[2, 3], [2, 3]],
    ),
    "ReduceMax": (lambda a: o1.reduce_max(a, c([1]), True), [[2, 3, 4]]),
    "ReduceMean": (lambda a: o1.reduce_mean(a, c([1, 2]), False), [[2, 3, 4]]),
    "ReduceMin": (lambda a: o1.reduce_min(a, c([-1]), False), [[2, 3, 4]]),
    "ReduceSum": (lambda a: o1.reduce_sum(a, c([0]), True), [[2, 3, 4]]),
    "ReduceProd": (lambda a: o1.reduce_prod(a, c([2]), False), [[2, 3, 4]]),
    "MVN-6": (lambda a: o6.mvn(a, c([2, 3]), True, 1e-5, "inside_sqrt"), X4),
    "MVN-6-outside": (lambda a: o6.mvn(a, c([1, 2, 3]), True, 1e-3, "outside_sqrt"), X4),
    "NormalizeL2": (lambda a: o1.normalize_l2(a, c([1]), 1e-6, "add"), X4),
    "TopK": (lambda a: list(o11.topk(a, c(3), 1, "max", "value").outputs()), [[2, 6, 3]]),
    "TopK-min-index": (lambda a: list(o11.topk(a, c(2), -1, "min", "index").outputs()), [[2, 5]]),
    "FakeQuantize": (
        lambda a: o1.fake_quantize(a, c(-1.0, F32), c(1.0, F32), c(-0.5, F32), c(0.5, F32), 16),
        [[2, 7]],
    ),
    "Interpolate-1-linear": (
        lambda a: o1.interpolate(
            a, c([12, 16]), {"axes": [2, 3], "mode": "linear", "align_corners": True}
        ),
        X4,
    ),
    "Interpolate-1-nearest": (
        lambda a: o1.interpolate(a, c([16, 20]), {"axes": [2, 3], "mode": "nearest"}),
        X4,
    ),
    "Interpolate-11-linear_onnx": (
        lambda a: o11.interpolate(
            a,
            c([16, 15]),
            "linear_onnx",
            "sizes",
            axes=c([2, 3]),
            coordinate_transformation_mode="half_pixel",
        ),
        X4,
    ),
    "Interpolate-11-nearest": (
        lambda a: o11.interpolate(
            a,
            c([2.0, 2.0], F32),
            "nearest",
            "scales",
            axes=c([2, 3]),
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        X4,
    ),
    "Interpolate-11-cubic": (
        lambda a: o11.interpolate(
            a,
            c([12, 13]),
            "cubic",
            "sizes",
            axes=c([2, 3]),
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
        X4,
    ),
    "Interpolate-11-nearest-down": (
        lambda a: o11.interpolate(
            a,
            c([4, 5]),
            "nearest",
            "sizes",
            axes=c([2, 3]),
            coordinate_transformation_mode="half_pixel",
            nearest_mode="round_prefer_ceil",
        ),
        X4,
    ),
    "Trigonometry": (
        lambda a: o1.add(o1.add(o1.sin(a), o1.cos(a)), o1.add(o1.tan(a), o1.sinh(a))),
        [[2, 5]],
    ),
    "Inverse-trigonometry": (
        lambda a: o1.add(
            o1.add(o1.asin(o1.tanh(a)), o1.acos(o1.tanh(a))), o1.add(o1.atan(a), o1.cosh(a))
        ),
        [[2, 5]],
    ),
    "Inverse-hyperbolic": (
        lambda a: o1.add(
            o1.add(o4.asinh(a), o4.acosh(o1.add(o1.abs(a), c(1.5, F32)))),
            o4.atanh(o1.multiply(o1.tanh(a), c(0.9, F32))),
        ),
        [[2, 5]],
    ),
    "Ceiling-Sign-SoftSign": (
        lambda a: o1.add(o1.add(o1.ceiling(a), o1.sign(a)), ov.opset9.softsign(a)),
        [[2, 5]],
    ),
    "Comparisons-logic": (
        lambda a, b: o1.convert(
            o1.logical_xor(
                o1.logical_and(
                    o1.greater_equal(a, b), o1.logical_not(o1.less_equal(a, c(0.0, F32)))
                ),
                o1.equal(a, a),
            ),
            "f32",
        ),
        [[2, 3], [2, 3]],
    ),
    "FloorMod-Mod": (
        lambda a, b: o1.add(
            o1.floor_mod(a, o1.add(o1.abs(b), c(0.5, F32))),
            o1.mod(a, o1.add(o1.abs(b), c(0.5, F32))),
        ),
        [[3, 4], [3, 4]],
    ),
    "ConvertLike": (
        lambda a: o1.convert_like(o1.multiply(a, c(10.0, F32)), c([0], np.int32)),
        [[2, 3]],
    ),
    "Selu": (lambda a: o1.selu(a, c([1.67], F32), c([1.05], F32)), [[2, 5]]),
    "Round-even": (lambda a: o5.round(o1.multiply(a, c(4.0, F32)), "half_to_even"), [[2, 5]]),
    "Round-away": (
        lambda a: o5.round(o1.multiply(a, c(4.0, F32)), "half_away_from_zero"),
        [[2, 5]],
    ),
    "Gather-1": (lambda a: o1.gather(a, c([1, 0]), c(0)), [[2, 4, 3]]),
    "Gather-7": (lambda a: ov.opset7.gather(a, c([2, 0]), c(2)), [[2, 4, 3]]),
    "Broadcast-1-explicit": (lambda a: o1.broadcast(a, c([2, 3, 4]), c([1]), "explicit"), [[3]]),
    "ShapeOf-3": (lambda a: o1.add(a, o1.convert(ov.opset3.shape_of(a, "i32"), "f32")), [[3, 2]]),
    "Squeeze-15": (lambda a: ov.opset15.squeeze(a, c([1])), [[2, 1, 4]]),
    "Pad-12-negative": (lambda a: ov.opset12.pad(a, c([0, -1]), c([1, 2]), "constant"), [[2, 5]]),
    "AvgPool-14": (lambda a: ov.opset14.avg_pool(a, [2, 2], [0, 0], [0, 0], [2, 2], True), X4),
    "MaxPool-14": (
        lambda a: ov.opset14.max_pool(a, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2]).output(0),
        X4,
    ),
    "ReduceL1-L2": (
        lambda a: o1.add(o4.reduce_l1(a, c([1]), True), o4.reduce_l2(a, c([1]), True)),
        [[2, 3, 4]],
    ),
    "ReduceLogical": (
        lambda a: o1.convert(
            o1.logical_or(
                o1.reduce_logical_and(o1.greater(a, c(-1.0, F32)), c([1]), False),
                o1.reduce_logical_or(o1.greater(a, c(1.0, F32)), c([1]), False),
            ),
            "f32",
        ),
        [[2, 3, 4]],
    ),
    "MVN-1": (lambda a: o4.mvn(a, True, True, 1e-5), X4),
    "TopK-1": (lambda a: list(o1.topk(a, c(2), 1, "max", "value").outputs()), [[2, 6, 3]]),
    "TopK-3": (lambda a: list(ov.opset3.topk(a, c(2), -1, "min", "value").outputs()), [[2, 5]]),
}

#: Registered (type, version) pairs exercised by a dedicated test instead of CASES.
COVERED_ELSEWHERE = {
    ("BatchToSpace", "opset2"): "test_data_movement_layers_are_lowered_and_exact",
    ("SpaceToBatch", "opset2"): "test_data_movement_layers_are_lowered_and_exact",
    ("DepthToSpace", "opset1"): "test_data_movement_layers_are_lowered_and_exact",
    ("SpaceToDepth", "opset1"): "test_data_movement_layers_are_lowered_and_exact",
    ("PriorBoxClustered", "opset1"): "test_prior_box_clustered_is_a_constant_equal_to_openvino",
    ("PriorBox", "opset1"): "test_prior_box_is_a_constant_equal_to_openvino",
    ("PriorBox", "opset8"): "test_prior_box_is_a_constant_equal_to_openvino",
    ("DetectionOutput", "opset1"): "test_corpus (face-detection-retail-0004)",
    ("DetectionOutput", "opset8"): "shares DetectionOutput-1's converter; no opset8 model",
    ("Range", "opset4"): "test_corpus (person-attributes-recognition-crossroad-0230)",
    ("Range", "opset1"): "test_range_1_with_runtime_bounds",
    ("Interpolate", "opset4"): "openvino's Python API builds only v1/v11; shares v11's code",
}


@pytest.mark.parametrize("case", CASES)
def test_layer_matches_openvino(tmp_path, case):
    build, shapes = CASES[case]
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_division_floors_as_the_spec_says(tmp_path, dtype):
    """Divide with m_pythondiv (default) floors; OpenVINO's core reference does, its CPU
    plugin truncates (a plugin deviation, pinned here)."""
    a = np.array([[-7, -1, 7, 5, -20]], dtype)
    b = np.array([[2, 5, 2, 5, 3]], dtype)
    (pair,), _ = run_both(
        tmp_path,
        lambda x, y: o1.divide(x, y),
        [[1, 5], [1, 5]],
        [dtype, dtype],
        feeds={"in0": a, "in1": b},
    )
    ours, plugin = pair
    assert ours.tolist() == [[-4, -1, 3, 1, -7]] == (a // b).tolist()
    assert plugin.tolist() == [[-3, 0, 3, 1, -6]]
    node = o1.divide(o1.parameter([1, 5], dtype), o1.parameter([1, 5], dtype))
    out = ov.Tensor(np.zeros((1, 5), dtype))
    assert node.evaluate([out], [ov.Tensor(a), ov.Tensor(b)])
    assert out.data.tolist() == ours.tolist()


def test_strided_slice_with_shrink_and_new_axis_follows_openvino_reference(tmp_path):
    """OpenVINO's CPU plugin returns uninitialised memory for this mask combination; its
    core reference and b2s_onnx agree on x[1, 2:5:2] with a new axis in front."""

    def build(a):
        return o1.strided_slice(
            a, c([1, 0, 2]), c([2, 0, 5]), c([1, 1, 2]), [0, 0, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0]
        )

    data = np.arange(48, dtype=F32).reshape(2, 4, 6)
    (pair,), _ = run_both(tmp_path, build, [[2, 4, 6]], feeds={"in0": data})
    expected = data[1, 2:5:2][None]
    assert pair[0].tobytes() == expected.tobytes()
    param = o1.parameter([2, 4, 6], F32)
    node = build(param)
    out = ov.Tensor(np.zeros(expected.shape, F32))
    bounds = [ov.Tensor(np.asarray(v, I64)) for v in ([1, 0, 2], [2, 0, 5], [1, 1, 2])]
    assert node.evaluate([out], [ov.Tensor(data), *bounds])
    assert out.data.tobytes() == expected.tobytes()


def test_floor_mod_and_mod_match_openvino(tmp_path):
    pairs, _ = run_both(
        tmp_path,
        lambda a, b: [
            o1.floor_mod(a, o1.add(o1.abs(b), c(0.5, F32))),
            o1.mod(a, o1.add(o1.abs(b), c(0.5, F32))),
        ],
        [[3, 4], [3, 4]],
    )
    assert_close(pairs, atol=1e-5)


def test_prior_box_clustered_is_a_constant_equal_to_openvino(tmp_path):
    attrs = {
        "widths": [9.4, 25.1, 14.7],
        "heights": [15.0, 39.6, 25.5],
        "clip": False,
        "step_widths": 16.0,
        "step_heights": 16.0,
        "offset": 0.5,
        "variances": [0.1, 0.1, 0.2, 0.2],
    }
    pairs, converted = run_both(
        tmp_path,
        lambda a: o1.add(
            o1.prior_box_clustered(
                o1.strided_slice(o1.shape_of(a), c([2]), c([4]), c([1]), [0], [0]),
                c([300, 300]),
                attrs,
            ),
            o1.reduce_sum(a, c([0, 1, 2, 3]), False),
        ),
        [[1, 3, 19, 19]],
    )
    assert_close(pairs, atol=1e-6)
    assert "PriorBoxClustered" not in {n.op_type for n in converted.graph.node}


RUN_TIME_PRIORS = {
    "per-prior-steps": {
        "width": [10.0, 20.5, 33.0],
        "height": [12.0, 8.0, 40.0],
        "clip": True,
        "offset": 0.5,
        "variance": [0.1, 0.1, 0.2, 0.2],
    },
    "one-step-one-variance": {
        "width": [10.0],
        "height": [12.0],
        "clip": False,
        "offset": 0.5,
        "variance": [0.1],
        "step": 16.0,
    },
    "fixed-image-and-steps": {
        "width": [30.0, 50.0],
        "height": [30.0, 20.0],
        "clip": False,
        "offset": 0.25,
        "variance": [0.1, 0.1, 0.2, 0.2],
        "step_w": 7.0,
        "step_h": 9.0,
        "img_w": 300.0,
        "img_h": 200.0,
    },
}


@pytest.mark.parametrize("attrs", RUN_TIME_PRIORS.values(), ids=RUN_TIME_PRIORS.keys())
def test_prior_box_clustered_on_run_time_sizes_is_bit_exact(tmp_path, attrs):
    """With dynamic H and W the priors are computed by ONNX ops, in OpenVINO's float32
    order: bit for bit what the plugin computes at each size."""
    feature = o1.parameter([1, 4, -1, -1], F32, name="feature")
    image = o1.parameter([1, 3, -1, -1], F32, name="image")

    def spatial(node):
        return o1.strided_slice(o3.shape_of(node), c([2]), c([4]), c([1]), [0], [0])

    priors = o1.prior_box_clustered(spatial(feature), spatial(image), attrs)
    xml = tmp_path / "priors.xml"
    ov.save_model(ov.Model([priors], [feature, image]), xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for h, w, image_h, image_w in ((5, 7, 300, 300), (19, 19, 300, 300), (3, 10, 97, 333)):
        feeds = {
            "feature": np.zeros([1, 4, h, w], F32),
            "image": np.zeros([1, 3, image_h, image_w], F32),
        }
        (ours,) = run_onnxruntime(converted, feeds).values()
        theirs = compiled(feeds)[0]
        assert ours.shape == theirs.shape == (2, 4 * h * w * len(attrs["width"]))
        assert ours.tobytes() == theirs.tobytes()


@pytest.mark.parametrize(
    ("name", "build", "shape"),
    [
        (
            "BatchToSpace",
            lambda a: o2.batch_to_space(a, c([1, 1, 2, 2]), c([0, 0, 1, 0]), c([0, 0, 0, 1])),
            [8, 3, 5, 6],
        ),
        (
            "SpaceToBatch",
            lambda a: o2.space_to_batch(a, c([1, 1, 2, 3]), c([0, 0, 1, 0]), c([0, 0, 1, 0])),
            [2, 3, 4, 6],
        ),
        ("DepthToSpace-5D", lambda a: o1.depth_to_space(a, "depth_first", 2), [1, 16, 2, 3, 4]),
        ("SpaceToDepth", lambda a: o1.space_to_depth(a, "blocks_first", 2), [1, 3, 4, 6]),
    ],
)
def test_data_movement_layers_are_lowered_and_exact(tmp_path, name, build, shape):
    pairs, converted = run_both(tmp_path, build, [shape])
    assert_close(pairs, exact=True)
    assert {n.domain for n in converted.graph.node} == {""}
    assert [o.domain for o in converted.opset_import] == [""]


def test_dilated_convolution_pattern_in_context(tmp_path):
    """SpaceToBatch -> Convolution -> BatchToSpace, as TensorFlow writes dilated convs."""

    def build(a):
        s2b = o2.space_to_batch(a, c([1, 1, 2, 2]), c([0, 0, 2, 2]), c([0, 0, 2, 2]))
        conv = o1.convolution(s2b, rng_const([4, 3, 3, 3]), [1, 1], [0, 0], [0, 0], [1, 1])
        return o1.relu(o2.batch_to_space(conv, c([1, 1, 2, 2]), c([0, 0, 0, 0]), c([0, 0, 0, 0])))

    pairs, _ = run_both(tmp_path, build, [[1, 3, 12, 12]])
    assert_close(pairs, atol=1e-5)


def test_dynamic_batch_model_converts_and_runs_for_several_batches(tmp_path):
    param = o1.parameter([-1, 4, 3, 2], F32, name="data")
    b2s = o2.batch_to_space(param, c([1, 2, 1, 2]), c([0, 1, 0, 0]), c([0, 0, 0, 1]))
    model = ov.Model([o1.relu(b2s)], [param])
    xml = tmp_path / "dyn.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    assert converted.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    compiled = ov.Core().compile_model(
        ov.Core().read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    for batch in (4, 8, 12):
        data = np.random.default_rng(batch).standard_normal((batch, 4, 3, 2)).astype(F32)
        ours = next(iter(run_onnxruntime(converted, {"data": data}).values()))
        theirs = compiled({"data": data})[compiled.outputs[0]]
        assert ours.tobytes() == np.asarray(theirs).tobytes()


def test_fp16_compressed_weights_convert(tmp_path):
    pairs, converted = run_both(
        tmp_path,
        lambda a: o1.convolution(a, rng_const([4, 3, 3, 3]), [1, 1], [1, 1], [1, 1], [1, 1]),
        X4,
        compress=True,
    )
    assert_close(pairs, atol=1e-5)
    assert converted.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def _covered_by_other_modules() -> set[tuple[str, str]]:
    """The ``COVERED_LAYERS`` each test module declares: (type, version) pairs it checks
    against OpenVINO."""
    import importlib

    covered: set[tuple[str, str]] = set()
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        if path.stem == Path(__file__).stem:
            continue
        module = importlib.import_module(f"tests.{path.stem}")
        covered |= set(getattr(module, "COVERED_LAYERS", ()))
    return covered


def test_every_registered_converter_is_exercised(tmp_path):
    """Each (type, version) in the registry appears in a CASES model, is named by another
    test module's COVERED_LAYERS, or names its test here."""
    import re

    seen = set()
    for index, (build, shapes) in enumerate(CASES.values()):
        params = [o1.parameter(shape, F32) for shape in shapes]
        outputs = build(*params)
        outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
        model = ov.Model([o.output(0) if hasattr(o, "output") else o for o in outputs], params)
        xml = tmp_path / f"case{index}.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        seen |= set(re.findall(r'type="(\w+)" version="(opset\d+)"', xml.read_text()))
    missing = set(supported_ops()) - seen - set(COVERED_ELSEWHERE) - _covered_by_other_modules()
    assert not missing, f"registered but never tested: {sorted(missing)}"


def test_range_1_with_runtime_bounds(tmp_path):
    def build(a):
        start = o1.convert(o1.reduce_min(o1.abs(a), c([0, 1]), False), "f32")
        return o1.range(o1.floor(start), c(6.0, F32), c(1.5, F32))

    data = np.array([[1.7, 2.5], [3.0, 4.0]], F32)
    pairs, _ = run_both(tmp_path, build, [[2, 2]], feeds={"in0": data})
    assert_close(pairs, exact=True)


def test_unsupported_layers_are_all_listed(tmp_path):
    param = o1.parameter([1, 3, 4, 4], F32, name="x")
    noise = o8.random_uniform(c([1, 3, 4, 4]), c(0.0, F32), c(1.0, F32), "f32")
    node = o1.relu(o1.add(param, noise))
    probabilities = ov.opset1.softmax(ov.opset1.reshape(param, c([3, 16]), False), 1)
    draws = ov.opset13.multinomial(probabilities, c([2]), "i64", True, False)
    model = ov.Model([node, draws], [param])
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    with pytest.raises(b2s_onnx.B2SError, match=r"2 unsupported layer\(s\): ") as info:
        b2s_onnx.convert_ir(xml)
    assert "RandomUniform-opset8" in str(info.value)
    assert "Multinomial-opset13" in str(info.value)
    kept = convert_ir_model(xml, keep_unsupported=True)
    assert len(kept.kept_unsupported) == 2
    onnx.checker.check_model(kept.model)


def test_supported_ops_doc_is_generated_from_the_registry():
    from pathlib import Path

    from b2s_onnx.ir.converters.registry import markdown_table

    doc = Path(__file__).resolve().parents[1] / "docs" / "supported_ops.md"
    assert doc.read_text() == markdown_table(), "run: python -m b2s_onnx.ir.converters"


PRIOR_BOX_ATTRS = [
    {
        "min_size": [16.0],
        "max_size": [32.0],
        "aspect_ratio": [2.0],
        "flip": True,
        "clip": False,
        "step": 8.0,
        "offset": 0.5,
        "variance": [0.1, 0.1, 0.2, 0.2],
    },
    {
        "min_size": [10.0, 20.0],
        "aspect_ratio": [2.0, 3.0],
        "flip": False,
        "clip": True,
        "step": 0.0,
        "offset": 0.5,
        "variance": [0.1],
    },
    {
        "min_size": [16.0],
        "max_size": [40.0],
        "aspect_ratio": [0.5],
        "flip": True,
        "clip": False,
        "step": 16.0,
        "offset": 0.0,
        "variance": [0.2],
        "min_max_aspect_ratios_order": False,
    },
    {
        "fixed_size": [32.0],
        "density": [2.0],
        "aspect_ratio": [2.0],
        "clip": False,
        "step": 16.0,
        "offset": 0.5,
        "variance": [0.1],
    },
    {
        "fixed_size": [24.0],
        "fixed_ratio": [2.0],
        "density": [3.0],
        "clip": False,
        "step": 8.0,
        "offset": 0.5,
        "variance": [0.1],
    },
    {
        "min_size": [0.1, 0.2],
        "aspect_ratio": [2.0],
        "flip": True,
        "clip": False,
        "scale_all_sizes": False,
        "step": 0.0,
        "offset": 0.5,
        "variance": [0.1],
    },
]


PRIOR_BOX_CASES = [
    pytest.param(version, attrs, id=f"v{version}-" + ",".join(sorted(attrs))[:40])
    for version in (1, 8)
    for attrs in PRIOR_BOX_ATTRS
    # PriorBox-1 has no min_max_aspect_ratios_order attribute.
    if version == 8 or "min_max_aspect_ratios_order" not in attrs
]


@pytest.mark.parametrize(("version", "attrs"), PRIOR_BOX_CASES)
def test_prior_box_is_a_constant_equal_to_openvino(tmp_path, version, attrs):
    attrs = dict(attrs)
    make = o1.prior_box if version == 1 else o8.prior_box
    pairs, converted = run_both(
        tmp_path,
        lambda a: o1.add(
            make(
                o1.strided_slice(o1.shape_of(a), c([2]), c([4]), c([1]), [0], [0]),
                c([96, 128]),
                attrs,
            ),
            o1.reduce_sum(a, c([0, 1, 2, 3]), False),
        ),
        [[1, 3, 6, 8]],
    )
    assert_close(pairs, atol=1e-6)
    assert "PriorBox" not in {n.op_type for n in converted.graph.node}


@pytest.mark.parametrize(("version", "attrs"), PRIOR_BOX_CASES)
def test_prior_box_on_run_time_sizes_is_bit_exact(tmp_path, version, attrs):
    """Dynamic feature-map and image sizes: the same priors computed by ONNX ops in
    OpenVINO's float32 order (scale_all_sizes=false, relative to the image height, is
    refused there, naming the rule)."""
    attrs = dict(attrs)
    make = o1.prior_box if version == 1 else o8.prior_box
    feature = o1.parameter([1, 3, -1, -1], F32, name="feature")
    image = o1.parameter([1, 3, -1, -1], F32, name="image")

    def spatial(node):
        return o1.strided_slice(o3.shape_of(node), c([2]), c([4]), c([1]), [0], [0])

    xml = tmp_path / "priors.xml"
    model = ov.Model([make(spatial(feature), spatial(image), attrs)], [feature, image])
    ov.save_model(model, xml, compress_to_fp16=False)
    if not attrs.get("scale_all_sizes", True):
        with pytest.raises(B2SError, match="scale_all_sizes=false"):
            b2s_onnx.convert_ir(xml)
        return
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    for h, w, image_h, image_w in ((6, 8, 96, 128), (3, 5, 75, 130)):
        feeds = {
            "feature": np.zeros([1, 3, h, w], F32),
            "image": np.zeros([1, 3, image_h, image_w], F32),
        }
        (ours,) = run_onnxruntime(converted, feeds).values()
        assert ours.tobytes() == _static_priors(tmp_path, make, attrs, h, w, image_h, image_w)
        # The plugin cannot compile min_max_aspect_ratios_order=false on dynamic sizes.
        if attrs.get("min_max_aspect_ratios_order", True):
            compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            assert ours.tobytes() == compiled(feeds)[0].tobytes()


def _static_priors(tmp_path, make, attrs, h, w, image_h, image_w) -> bytes:
    """The constant the converter computes for these sizes (checked against the CPU plugin
    by the test above)."""
    xml = tmp_path / "static.xml"
    x = o1.parameter([1], F32, name="x")
    priors = make(c([h, w]), c([image_h, image_w]), attrs)
    ov.save_model(ov.Model([o1.add(priors, o1.reduce_sum(x, c([0]), False))], [x]), xml)
    converted = b2s_onnx.convert_ir(xml)
    (value,) = run_onnxruntime(converted, {"x": np.zeros([1], F32)}).values()
    return value.tobytes()


def test_prior_box_attributes_openvino_is_inconsistent_about_are_refused(tmp_path):
    """Several fixed_ratio values: OpenVINO's shape formula and its reference disagree."""
    param = o1.parameter([1, 3, 6, 8], F32, name="x")
    attrs = {
        "fixed_size": [24.0],
        "fixed_ratio": [1.0, 2.0],
        "density": [3.0],
        "step": 8.0,
        "offset": 0.5,
        "variance": [0.1],
        "clip": False,
    }
    boxes = o8.prior_box(
        o1.strided_slice(o1.shape_of(param), c([2]), c([4]), c([1]), [0], [0]), c([96, 128]), attrs
    )
    xml = tmp_path / "inconsistent.xml"
    ov.save_model(
        ov.Model([o1.add(boxes, o1.reduce_sum(param, c([0, 1, 2, 3]), False))], [param]),
        xml,
        compress_to_fp16=False,
    )
    with pytest.raises(b2s_onnx.B2SError, match="OpenVINO itself is inconsistent"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize("make", [o1.prior_box, o8.prior_box], ids=["PriorBox-1", "PriorBox-8"])
@pytest.mark.parametrize("flip", [False, True])
def test_prior_box_without_scale_all_sizes_keeps_the_declared_width(tmp_path, make, flip):
    """scale_all_sizes=false with max_size: OpenVINO's shape formula leaves the max_size
    priors out, its plugin writes them anyway up to the declared width; so do we."""
    x = o1.parameter([1], F32, name="x")
    attrs = {
        "min_size": [0.5, 0.6],
        "max_size": [0.7, 0.9],
        "aspect_ratio": [2.0, 3.0],
        "flip": flip,
        "clip": False,
        "step": 0.1,
        "offset": 0.0,
        "variance": [0.1, 0.1, 0.2, 0.2],
        "scale_all_sizes": False,
    }
    priors = make(c([4, 5]), c([32, 40]), attrs)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([o1.add(priors, o1.reduce_sum(x, c([0]), False))], [x]), xml)
    feeds = {"x": np.zeros([1], F32)}
    (ours,) = run_onnxruntime(b2s_onnx.convert_ir(xml), feeds).values()
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert ours.tobytes() == compiled(feeds)[0].tobytes()


#: Gather with batch_dims: (opset module, data shape, indices, axis, batch_dims). Indices
#: out of range give zeros in OpenVINO (negative ones count from the end in Gather-8).
BATCHED_GATHERS = {
    "v8-axis-after-batch": (o8, [2, 4, 3], [[3, -1, 0], [1, 1, 2]], 1, 1),
    "v8-axes-between": (o8, [2, 3, 5, 2], [[4, 0], [-2, 1]], 2, 1),
    "v8-out-of-range": (o8, [2, 3, 5, 2], [[7, 0], [-6, 4]], 2, 1),
    "v8-negative-batch-dims": (o8, [2, 3, 4], [[[1], [3], [0]], [[2], [2], [-4]]], 2, -1),
    "v8-scalar-per-batch": (o8, [3, 4, 2], [2, 0, 3], 1, 1),
    "v7-two-batch-axes": (ov.opset7, [2, 3, 4, 2], [[[1, 3], [0, 0], [2, 1]]] * 2, 2, 2),
    "v7-negative-is-out-of-range": (ov.opset7, [2, 4, 3], [[-1, 2], [0, 3]], 1, 1),
}


@pytest.mark.parametrize("index_type", [I64, np.int32])
@pytest.mark.parametrize("case", BATCHED_GATHERS)
def test_gather_with_batch_dims_matches_openvino(tmp_path, case, index_type):
    module, shape, indices, axis, batch_dims = BATCHED_GATHERS[case]
    pairs, converted = run_both(
        tmp_path,
        lambda a: module.gather(a, c(indices, index_type), c(axis), batch_dims),
        [shape],
    )
    assert "GatherND" in {n.op_type for n in converted.graph.node}
    for ours, theirs in pairs:
        assert ours.shape == theirs.shape
        assert ours.tobytes() == theirs.tobytes()


def test_gather_with_batch_dims_on_runtime_indices_matches_openvino(tmp_path):
    def build(data, index):
        return o8.gather(data, o1.convert(index, "i64"), c(2), 1)

    rng = np.random.default_rng(4)
    feeds = {
        "in0": rng.standard_normal([2, 3, 5, 2]).astype(F32),
        "in1": np.asarray([[4, -1, 0], [2, 3, -5]], np.int32),
    }
    pairs, _ = run_both(tmp_path, build, [[2, 3, 5, 2], [2, 3]], [F32, np.int32], feeds=feeds)
    for ours, theirs in pairs:
        assert ours.tobytes() == theirs.tobytes()


def test_gather_batch_dims_that_do_not_match_are_refused(tmp_path):
    """The data's batch axis edited from 2 to 3 (OpenVINO's shape inference would refuse
    to build such a model): refused as bad input, naming the layer and both sizes."""
    data = o1.parameter([2, 4, 3], F32, name="data")
    model = ov.Model([o8.gather(data, c([[1, 0], [0, 1]]), c(1), 1)], [data])
    xml = tmp_path / "bad.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    text = xml.read_text()
    text = text.replace('shape="2,4,3"', 'shape="3,4,3"').replace(
        "<dim>2</dim>\n\t\t\t\t\t<dim>4</dim>", "<dim>3</dim>\n\t\t\t\t\t<dim>4</dim>"
    )
    xml.write_text(text)
    with pytest.raises(B2SError, match=r"batch axis 0 is 3 in the data but 2 in the indices"):
        b2s_onnx.convert_ir(xml)


def test_split_of_a_dynamic_axis_matches_openvino(tmp_path):
    data = o1.parameter([2, -1], F32, name="data")
    parts = o1.split(data, c(1), 3)
    model = ov.Model(
        [o1.multiply(o, c(float(i + 1), F32)) for i, o in enumerate(parts.outputs())], [data]
    )
    xml = tmp_path / "split.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for width in (3, 12):
        x = np.random.default_rng(width).standard_normal([2, width]).astype(F32)
        ours = list(run_onnxruntime(converted, {"data": x}).values())
        theirs = [np.asarray(compiled({"data": x})[o]) for o in compiled.outputs]
        for mine, reference in zip(ours, theirs, strict=True):
            assert mine.tobytes() == reference.tobytes()
    with pytest.raises(Exception, match=r"(?i)split"):  # 7 does not divide by 3: both refuse
        run_onnxruntime(converted, {"data": np.zeros([2, 7], F32)})


def test_gather_of_booleans_with_an_index_out_of_range_gives_false(tmp_path):
    """A run-time index outside the axis zeroes the row: on booleans onnxruntime has no
    Where kernel, so the masking runs widened (a Keras Masking -> LSTM body does this)."""

    def build(data, index):
        return o1.convert(o8.gather(o1.greater(data, c(0.0, F32)), index, c(0)), "f32")

    feeds = {
        "in0": np.asarray([[1.0, -1.0], [-2.0, 3.0], [4.0, 5.0]], F32),
        "in1": np.asarray([2, -1, 3, -4, 0], np.int64),
    }
    pairs, _ = run_both(tmp_path, build, [[3, 2], [5]], [F32, I64], feeds=feeds)
    for ours, theirs in pairs:
        assert ours.tobytes() == theirs.tobytes()
    np.testing.assert_array_equal(pairs[0][0], [[1, 1], [1, 1], [0, 0], [0, 0], [1, 0]])


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16, np.uint16])
def test_unique_of_integer_types_onnxruntime_lacks_runs_widened(tmp_path, dtype):
    """onnxruntime's Unique takes f32/f64/i8/i64 only; the other integer types run as a
    type holding all their values. sorted=true is compared with OpenVINO; first-seen
    order with numpy (OpenVINO's CPU plugin gets it wrong, see docs/openvino.md)."""
    values = np.asarray([7, 3, 7, 0, 3, 200, 0, 3], dtype)
    for ordered in (True, False):
        data = o1.parameter([8], dtype, name="data")
        unique = ov.opset10.unique(data, sorted=ordered)
        model = ov.Model(list(unique.outputs()), [data])
        xml = tmp_path / f"unique_{ordered}.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        converted = b2s_onnx.convert_ir(xml)
        ours = list(run_onnxruntime(converted, {"data": values}).values())
        first = sorted(np.unique(values, return_index=True)[1])
        expected = np.unique(values) if ordered else values[first]
        assert ours[0].dtype == dtype
        np.testing.assert_array_equal(ours[0], expected)
        if ordered:
            compiled = ov.Core().compile_model(xml, "CPU")
            theirs = [np.asarray(compiled({"data": values})[o]) for o in compiled.outputs]
            for mine, reference in zip(ours, theirs, strict=True):
                np.testing.assert_array_equal(mine, reference)


def test_explicit_broadcast_matches_the_mapping(tmp_path):
    data = o1.parameter([3], F32, name="data")
    model = ov.Model([o3.broadcast(data, c([2, 3]), c([1]), "explicit")], [data])
    xml = tmp_path / "broadcast.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    x = np.arange(3, dtype=F32)
    (out,) = run_onnxruntime(b2s_onnx.convert_ir(xml), {"data": x}).values()
    np.testing.assert_array_equal(out, np.broadcast_to(x, (2, 3)))
    # The data edited to 4 values, which no axis of the [2, 3] target takes.
    text = (
        xml.read_text().replace('shape="3"', 'shape="4"').replace("<dim>3</dim>", "<dim>4</dim>", 2)
    )
    xml.write_text(text)
    with pytest.raises(B2SError, match=r"axes_mapping\) \[1\]: data dim 0 \(4\) must be 1"):
        b2s_onnx.convert_ir(xml)


def test_explicit_broadcast_without_its_axes_mapping_is_refused(tmp_path):
    """A numpy-mode Broadcast (two inputs) whose mode was edited to explicit: refused as bad
    input naming the layer and the missing input, not an internal error."""
    data = o1.parameter([3], F32, name="data")
    model = ov.Model([o3.broadcast(data, c([2, 3]))], [data])
    xml = tmp_path / "broadcast.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    xml.write_text(xml.read_text().replace('mode="numpy"', 'mode="explicit"'))
    with pytest.raises(B2SError, match=r"explicit Broadcast needs input 2 \(axes_mapping\)"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "transpose_a", "transpose_b"),
    [
        ([4, 3], [4], True, False),
        ([2, 4, 3], [4], True, False),
        ([4], [3, 4], False, True),
        ([4], [2, 4, 3], False, False),
        ([3, 4], [4], False, False),
        ([-1, 4, 3], [4], True, False),
    ],
)
def test_matmul_of_a_vector_and_a_transposed_matrix_matches_openvino(
    tmp_path, a_shape, b_shape, transpose_a, transpose_b
):
    """onnxruntime fused a transposed A with a 1-D B into a wrong FusedMatMul (found by a
    sweep of PyTorch-written IRs: ``W.t() @ v``); the vector is now lifted to a matrix."""
    feeds = {
        "in0": np.random.default_rng(3).standard_normal([d if d > 0 else 2 for d in a_shape]),
        "in1": np.random.default_rng(4).standard_normal(b_shape),
    }
    pairs, _ = run_both(
        tmp_path,
        lambda a, b: o1.matmul(a, b, transpose_a, transpose_b),
        [a_shape, b_shape],
        feeds={k: v.astype(F32) for k, v in feeds.items()},
    )
    assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("static", [True, False])
def test_convert_to_bf16_rounds_as_openvino(tmp_path, static):
    """A Convert to bf16 rounds to bf16 (ties to even) even though bf16 computes as f32:
    the CPU plugin does (found converting a PyTorch bf16 block). Static shapes only are
    compared element for element: with dynamic ones the plugin rounds some values another
    way, and the converted model rounds the same way for both."""
    x = np.array([0.5, 1000.3, 2049.0, 2051.0, 1.00390625, -1.01171875, 3.0e38], F32)
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(500).astype(F32) * 300])
    pairs, _ = run_both(
        tmp_path,
        lambda a: o1.convert(o1.convert(a, "bf16"), "f32"),
        [[x.size] if static else [-1]],
        feeds={"in0": x},
    )
    ours, theirs = pairs[0]
    expected = x.astype(ml_dtypes.bfloat16).astype(F32)
    assert ours.tobytes() == expected.tobytes()
    if static:
        assert ours.tobytes() == theirs.tobytes()


def test_variadic_split_with_the_rest_of_a_dynamic_axis_matches_openvino(tmp_path):
    """split_lengths [2, -1, 1] on an axis of unknown size: the -1 is resolved at run time
    (it was refused; PyTorch's frontend writes it for uneven splits)."""

    def build(a):
        return list(o1.variadic_split(a, c(1), c([2, -1, 1])).outputs())

    for size in (4, 9):
        feeds = {"in0": np.random.default_rng(size).standard_normal([2, size]).astype(F32)}
        pairs, _ = run_both(tmp_path, build, [[2, -1]], feeds=feeds)
        assert [ours.shape for ours, _ in pairs] == [(2, 2), (2, size - 3), (2, 1)]
        assert_close(pairs, exact=True)


@pytest.mark.parametrize("auto_pad", ["same_upper", "same_lower"])
@pytest.mark.parametrize(("strides", "dilations"), [([1, 1], [2, 2]), ([2, 1], [2, 3])])
def test_dilated_same_convolution_on_dynamic_sizes_matches_openvino(
    tmp_path, auto_pad, strides, dilations
):
    """onnxruntime refuses SAME auto-padding with dilations: on sizes known only at run
    time the data is padded by amounts computed from its shape (it was refused)."""
    weights = rng_const([6, 3, 3, 2], seed=5)
    grouped = rng_const([3, 1, 1, 3, 3], seed=6)

    def build(a):
        plain = o1.convolution(a, weights, strides, [0, 0], [0, 0], dilations, auto_pad)
        depthwise = o1.group_convolution(a, grouped, strides, [0, 0], [0, 0], dilations, auto_pad)
        return [plain, depthwise]

    for h, w in ((9, 10), (6, 7)):
        feeds = {"in0": np.random.default_rng(h).standard_normal([1, 3, h, w]).astype(F32)}
        pairs, _ = run_both(tmp_path, build, [[1, 3, -1, -1]], feeds=feeds)
        assert_close(pairs, atol=1e-5)


@pytest.mark.parametrize("shape", [[1, 4, -1, -1], [2, 3, -1], [1, 2, -1, 5, -1]])
def test_global_adaptive_pooling_on_dynamic_sizes_matches_openvino(tmp_path, shape):
    """AdaptiveAvgPool/AdaptiveMaxPool to one bin per axis on sizes known only at run time
    (PyTorch's AdaptiveAvgPool2d(1) converted with dynamic shapes) are global pools; the
    max's indices are the first maximum's flat spatial position. Other bin counts still
    need static sizes."""
    ones = c([1] * (len(shape) - 2))

    def build(a):
        maximum = o8.adaptive_max_pool(a, ones, "i32")
        return [o8.adaptive_avg_pool(a, ones), maximum.output(0), maximum.output(1)]

    concrete = [d if d > 0 else 3 + i for i, d in enumerate(shape)]
    values = np.random.default_rng(1).integers(-3, 3, concrete).astype(F32)  # ties
    pairs, _ = run_both(tmp_path, build, [shape], feeds={"in0": values})
    assert_close(pairs, atol=1e-6)


def test_explicit_broadcast_to_a_run_time_shape_matches_openvino(tmp_path):
    """Broadcast-1 mode none with target_shape computed from ShapeOf (PyTorch's
    index_copy): the data's axes go to their mapped positions by an Unsqueeze."""

    def build(a, b):
        return o1.broadcast(a, o3.shape_of(b), c([1]), "explicit")

    feeds = {
        "in0": np.arange(3, dtype=F32),
        "in1": np.zeros([2, 3, 4], F32),
    }
    pairs, _ = run_both(tmp_path, build, [[3], [2, -1, 4]], feeds=feeds)
    assert pairs[0][0].shape == (2, 3, 4)
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int16, np.uint32])
@pytest.mark.parametrize(("exclusive", "reverse"), [(False, False), (True, True)])
def test_cumsum_of_types_onnxruntime_lacks_matches_openvino(tmp_path, dtype, exclusive, reverse):
    """Booleans accumulate saturating at true (PyTorch's cumsum of a mask); narrow integers
    in int64, wrapping back (they were refused by onnx's checker)."""
    rng = np.random.default_rng(2)
    if dtype == np.bool_:
        values = rng.integers(0, 2, [3, 6]).astype(bool)
    else:
        values = rng.integers(0, 100, [3, 6]).astype(dtype)
    pairs, _ = run_both(
        tmp_path,
        lambda a: o3.cumsum(a, c(1), exclusive, reverse),
        [[3, 6]],
        [dtype],
        feeds={"in0": values},
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("position", [0, 2, -1, -3, 9, -12])
def test_strided_slice_with_run_time_bounds_matches_openvino(tmp_path, position):
    """begin/end computed at run time (TensorFlow's x[b:b + 3], tf.signal.frame on a
    dynamic signal): each bound is read from its tensor; a shrunk axis at -1 keeps the
    last element, and one out of range is clamped into the axis as the CPU plugin does
    (they were refused as non-constant)."""

    def build(x, b):
        index = o1.convert(o1.reduce_sum(b, c([0]), False), "i64")
        begin = o1.concat([o1.reshape(index, c([1]), False), c([1]), c([0])], 0)
        end = o1.add(begin, c([3, 4, 2]))
        sliced = o1.strided_slice(x, begin, end, c([1, 2, 1]), [0, 0, 1], [0, 0, 0])
        shrunk = o1.strided_slice(
            x, begin, end, c([1, 1, 1]), [0, 1, 0], [0, 1, 0], shrink_axis_mask=[1, 0, 0]
        )
        return [sliced, shrunk]

    feeds = {
        "in0": np.random.default_rng(0).standard_normal([6, 7, 5]).astype(F32),
        "in1": np.array([position], F32),
    }
    pairs, _ = run_both(tmp_path, build, [[6, 7, 5], [1]], feeds=feeds)
    assert_close(pairs, exact=True)


def test_strided_slice_shrinking_a_constant_index_out_of_range_is_refused(tmp_path):
    x = o1.parameter([4, 5], F32, name="x")
    layer = o1.strided_slice(
        x, c([0, 7]), c([0, 8]), c([1, 1]), [1, 0], [1, 0], shrink_axis_mask=[0, 1]
    )
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([layer], [x]), xml)
    with pytest.raises(B2SError, match=r"begin\[1\] = 7, outside \[-5, 5\) of axis 1"):
        b2s_onnx.convert_ir(xml)


@pytest.mark.parametrize(
    "build",
    [o1.tan, o1.atan, o1.asin, o1.sinh, o1.cosh, o4.asinh, o1.erf],
    ids=["tan", "atan", "asin", "sinh", "cosh", "asinh", "erf"],
)
def test_f64_functions_onnxruntime_lacks_run_in_f32_as_the_plugin_does(tmp_path, build):
    """onnxruntime has no double kernel for these: they run in f32 and are cast back (they
    were refused; TensorFlow's tf.math.angle and its f64 graphs use them)."""
    values = np.random.default_rng(0).uniform(-0.9, 0.9, [4, 5])
    pairs, converted = run_both(tmp_path, build, [[4, 5]], [np.float64], feeds={"in0": values})
    assert converted.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    assert_close(pairs, atol=1e-6, rtol=1e-6)


def test_strided_slice_shrinking_a_dynamic_axis_clamps_as_the_plugin_does(tmp_path):
    """x[:, 1] on an axis of unknown size, fed a size-1 axis: the plugin returns x[:, 0]
    (it clamps), where the slice was empty and onnxruntime's Squeeze failed."""

    def build(x):
        return o1.strided_slice(
            x, c([0, 1]), c([0, 2]), c([1, 1]), [1, 0], [1, 0], shrink_axis_mask=[0, 1]
        )

    for shape in ([2, 3], [2, 1]):
        feeds = {"in0": np.arange(np.prod(shape), dtype=F32).reshape(shape) + 1}
        pairs, _ = run_both(tmp_path, build, [[-1, -1]], feeds=feeds)
        assert_close(pairs, exact=True)


@pytest.mark.parametrize("gather", [o1.gather, o8.gather])
def test_gather_on_a_dynamic_axis_zeroes_indices_out_of_range(tmp_path, gather):
    """The axis's size is known only at run time: indices are checked against it there
    (onnxruntime failed on them; OpenVINO gives zeros; Gather-8 also counts -size..-1)."""

    def build(data, index):
        return gather(data, index, c(0))

    feeds = {
        "in0": np.arange(6, dtype=F32).reshape(3, 2) + 1,
        "in1": np.asarray([2, -1, 3, -4, 0, -3], np.int64),
    }
    pairs, _ = run_both(tmp_path, build, [[-1, 2], [6]], [F32, I64], feeds=feeds)
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(
    ("shape", "bins", "sizes"),
    [
        ([1, 3, -1, -1], [3, 4], [(10, 7), (5, 5), (3, 4)]),
        ([2, 2, -1], [5], [(7,), (12,)]),
        ([1, 2, -1, 4, -1], [2, 3, 2], [(5, 4, 3)]),
    ],
)
def test_adaptive_pooling_on_dynamic_sizes_matches_openvino(tmp_path, shape, bins, sizes):
    """Bins over sizes known only at run time (PyTorch's AdaptiveAvgPool2d((7, 7)) with
    dynamic shapes): each axis cut into its run-time bins and reduced in turn."""
    count = c(bins)

    def build(a):
        return [o8.adaptive_avg_pool(a, count), o8.adaptive_max_pool(a, count, "i32").output(0)]

    for size in sizes:
        dynamic = iter(size)
        concrete = [d if d > 0 else next(dynamic) for d in shape]
        values = np.random.default_rng(len(concrete)).standard_normal(concrete).astype(F32)
        pairs, _ = run_both(tmp_path, build, [shape], feeds={"in0": values})
        assert pairs[0][0].shape == (*concrete[:2], *bins)
        assert_close(pairs, atol=1e-6)
