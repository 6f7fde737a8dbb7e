"""Rewrites that keep onnxruntime's fast layouts and fusions: each fires where it should
(and declines or stays away elsewhere) and keeps the outputs within the rounding it
documents: pool-floor-mode bit-exact, gelu-fusable-form within an ulp of erf's argument,
conv-into-upsampling and small-conv-as-3d within float summation order."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from tests.helpers import float_model


def _model(nodes, initializers, shape, opset=18) -> onnx.ModelProto:
    return float_model(nodes, initializers, shape, opset)


def _rewrite(model: onnx.ModelProto, seed: int = 0):
    """(outputs before, outputs after, report, rewritten model); checks the result loads."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
    before = run_onnxruntime(model, feeds)["y"]
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    after = run_onnxruntime(rewritten, feeds)["y"]
    assert before.shape == after.shape
    return before, after, report, rewritten


def _ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def _fired(report) -> list[str]:
    return [f.rewrite for f in report.fired]


# -- pool-floor-mode -------------------------------------------------------------------------


def _pool(size, kernel, stride, pads, include_pad):
    node = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        name="pool",
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pads] * 4,
        ceil_mode=1,
        count_include_pad=include_pad,
    )
    return _model([node], {}, [1, 3, size, size + stride])


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize(
    ("size", "kernel", "stride", "pads"), [(8, 2, 2, 0), (16, 4, 4, 0), (9, 3, 2, 0), (7, 3, 2, 1)]
)
def test_average_pool_whose_windows_tile_drops_ceil_mode_within_one_rounding(
    size, kernel, stride, pads, include_pad
):
    before, after, report, rewritten = _rewrite(_pool(size, kernel, stride, pads, include_pad))
    assert _fired(report) == ["pool-floor-mode"]
    attributes = {a.name for a in rewritten.graph.node[0].attribute}
    assert "ceil_mode" not in attributes
    # Same windows and divisors; onnxruntime's two kernels sum and divide in another order.
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("size", "kernel", "stride"), [(9, 2, 2), (10, 3, 2), (6, 4, 3)])
def test_average_pool_with_a_partial_last_window_keeps_ceil_mode(size, kernel, stride):
    before, after, report, _ = _rewrite(_pool(size, kernel, stride, 0, 1))
    assert not report.fired
    assert [d.rewrite for d in report.declined] == ["pool-floor-mode"]
    assert "partial window" in report.declined[0].reason
    assert before.tobytes() == after.tobytes()


# -- gelu-fusable-form -----------------------------------------------------------------------


RSQRT2 = 1 / math.sqrt(2)


def _gelu_as_converted(rsqrt2=RSQRT2, extra_reader=False, complement=("Add", "one", "erf")):
    """The converter's erf spelling: (x * 0.5) * (1 + erf(x * (1 / sqrt 2))); with
    ``rsqrt2=-RSQRT2, complement=("Sub", "one", "erf")`` TensorFlow's erfc spelling
    (x * 0.5) * (1 - erf(x * -(1 / sqrt 2)))."""
    op, first, second = complement
    nodes = [
        helper.make_node("Mul", ["x", "rsqrt2"], ["scaled"]),
        helper.make_node("Erf", ["scaled"], ["erf"], name="erf"),
        helper.make_node(op, [first, second], ["plus"]),
        helper.make_node("Mul", ["x", "half"], ["halved"]),
        helper.make_node("Mul", ["halved", "plus"], ["gelu"], name="gelu"),
    ]
    if extra_reader:
        nodes.append(helper.make_node("Add", ["gelu", "halved"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    constants = {
        "rsqrt2": np.float32(rsqrt2),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    return _model(nodes, constants, [2, 8, 5, 7])


ERFC = {"rsqrt2": -RSQRT2, "complement": ("Sub", "one", "erf")}


@pytest.mark.parametrize("spelling", [{}, ERFC], ids=["erf", "tensorflow-erfc"])
@pytest.mark.parametrize("seed", [0, 1])
def test_gelu_in_erf_form_becomes_the_spelling_onnxruntime_fuses(seed, spelling):
    before, after, report, rewritten = _rewrite(_gelu_as_converted(**spelling), seed)
    assert _fired(report) == ["gelu-fusable-form"]
    assert _ops(rewritten) == ["Div", "Erf", "Add", "Mul", "Mul"]
    shape = [d.dim_value for d in rewritten.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape)
    reference = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(after, reference, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "spelling",
    [
        {"rsqrt2": 0.7},
        {"rsqrt2": -RSQRT2},  # 1 + erf(-x / sqrt 2): not Gelu
        {"complement": ("Sub", "one", "erf")},  # 1 - erf(x / sqrt 2): not Gelu
        {"rsqrt2": -RSQRT2, "complement": ("Sub", "erf", "one")},  # erf(...) - 1
    ],
    ids=["other-constant", "erf-of-minus-x", "one-minus-erf-of-x", "erf-minus-one"],
)
def test_gelu_with_another_constant_or_sign_is_left_alone(spelling):
    _, _, report, rewritten = _rewrite(_gelu_as_converted(**spelling))
    assert not report.fired
    assert "Div" not in _ops(rewritten)


def test_gelu_with_a_shared_part_is_left_alone():
    _, _, report, _ = _rewrite(_gelu_as_converted(extra_reader=True))
    assert not report.fired
    assert [d.rewrite for d in report.declined] == ["gelu-fusable-form"]


# -- conv-into-upsampling --------------------------------------------------------------------


def _conv_deconv(
    block,
    middle=12,
    outputs=3,
    biases=True,
    deconv_stride=None,
    shared=False,
    relu=False,
    bias_add=False,
    bias_vector=False,
    shape=(1, 2, 6, 5),
):
    """Conv -> ConvTranspose; ``bias_add``: the Conv's bias as a separate Add of a
    [1, C, 1, 1] constant, as an IR's Convolution + Add converts."""
    rng = np.random.default_rng(block)
    constants = {
        "wc": rng.standard_normal([middle, 2, 3, 3]).astype(np.float32) * 0.3,
        "wt": rng.standard_normal([middle, outputs, block, block]).astype(np.float32) * 0.3,
    }
    conv_inputs, deconv_inputs = ["x", "wc"], ["v", "wt"]
    if biases:
        constants["bc"] = rng.standard_normal(middle).astype(np.float32)
        constants["bt"] = rng.standard_normal(outputs).astype(np.float32)
        conv_inputs.append("bc")
        deconv_inputs.append("bt")
    stride = deconv_stride or block
    nodes = [helper.make_node("Conv", conv_inputs, ["v"], name="conv", pads=[1, 1, 1, 1])]
    if bias_add:
        if not bias_vector:  # a [C] vector broadcasts along the width instead
            constants["bc"] = constants["bc"].reshape(1, middle, 1, 1)
        conv_inputs.pop()
        nodes = [
            helper.make_node("Conv", conv_inputs, ["v0"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["v0", "bc"], ["v"], name="bias"),
        ]
    nodes += [
        helper.make_node(
            "ConvTranspose", deconv_inputs, ["up"], name="up", strides=[stride, stride]
        ),
    ]
    if shared:
        nodes.append(helper.make_node("ReduceMean", ["v"], ["m"], keepdims=1))
        nodes.append(helper.make_node("Add", ["up", "m"], ["y"]))
    elif relu:
        nodes.append(helper.make_node("Relu", ["up"], ["y"], name="relu"))
    else:
        nodes[-1].output[0] = "y"
    return _model(nodes, constants, list(shape))


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("biases", [True, False, "add"], ids=["bias", "no-bias", "bias-add"])
@pytest.mark.parametrize("block", [2, 3])
def test_conv_then_non_overlapping_upsampling_becomes_one_conv_and_depth_to_space(
    block, biases, relu
):
    model = _conv_deconv(block, biases=bool(biases), relu=relu, bias_add=biases == "add")
    before, after, report, rewritten = _rewrite(model)
    assert "conv-into-upsampling" in _fired(report)
    assert "ConvTranspose" not in _ops(rewritten)
    assert _ops(rewritten)[-1] == "DepthToSpace", "the activation moves before the shuffle"
    assert ("Relu" in _ops(rewritten)) == relu
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_a_large_upsampling_moves_its_blocks_in_two_transposes_with_the_same_bits(monkeypatch):
    from b2s_onnx.rewrites import conv_into_upsampling

    model = _conv_deconv(3, outputs=4, relu=True, shape=(1, 2, 180, 200))
    before, after, report, rewritten = _rewrite(model)
    assert "conv-into-upsampling" in _fired(report)
    assert "DepthToSpace" not in _ops(rewritten)
    assert _ops(rewritten).count("Transpose") == 2
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(conv_into_upsampling, "TWO_STAGE_ELEMENTS", 1 << 40)
    _, one_op, _, shuffled = _rewrite(model)
    assert _ops(shuffled)[-1] == "DepthToSpace"
    assert one_op.tobytes() == after.tobytes()


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"deconv_stride": 1}, "stride differs"),
        ({"shared": True}, "read elsewhere"),
        ({"middle": 2, "outputs": 8}, "more work"),
        ({"middle": 5, "bias_add": True, "bias_vector": True}, "not a bias"),
    ],
)
def test_conv_into_upsampling_declines_with_the_reason(kwargs, reason):
    before, after, report, rewritten = _rewrite(_conv_deconv(2, **kwargs))
    assert "conv-into-upsampling" not in _fired(report)
    if kwargs.get("deconv_stride") == 1:  # an ordinary Conv in disguise: that rewrite's
        assert "stride-one-conv-transpose" in _fired(report)
    else:
        assert "ConvTranspose" in _ops(rewritten)
    declined = [d.reason for d in report.declined if d.rewrite == "conv-into-upsampling"]
    assert declined
    assert reason in declined[0]
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)


# -- small-conv-as-3d ------------------------------------------------------------------------


def _small_conv(
    inputs,
    outputs,
    size,
    activation="Relu",
    strides=(1, 1),
    residual=False,
    bias_add=False,
    skip=False,
):
    rng = np.random.default_rng(inputs * 100 + outputs)
    constants = {
        "w": rng.standard_normal([outputs, inputs, 3, 3]).astype(np.float32) * 0.2,
        "b": rng.standard_normal(outputs).astype(np.float32),
    }
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 0, 1, 2], strides=list(strides)
    )
    nodes = [conv]
    if bias_add:  # the bias as the converter writes it: a separate per-channel Add
        constants["b"] = constants["b"].reshape(1, outputs, 1, 1)
        del conv.input[2]
        conv.output[0] = "unbiased"
        nodes.append(helper.make_node("Add", ["unbiased", "b"], ["c"], name="bias"))
    if activation:
        nodes.append(helper.make_node(activation, ["c"], ["y"], name="act"))
    else:
        nodes[-1].output[0] = "y"
    if residual:  # a blocked Add reads the result: it stays in onnxruntime's layout
        nodes[-1].output[0] = "z"
        nodes.append(helper.make_node("Add", ["z", "z"], ["y"]))
    if skip:  # a full-size constant added (a skip the layout never blocks): reads NCHW
        nodes[-1].output[0] = "z"
        rows = (size + 2 - 3) // strides[0] + 1
        columns = (size + 3 + 2 - 3) // strides[1] + 1
        constants["skip"] = rng.standard_normal([1, outputs, rows, columns]).astype(np.float32)
        nodes.append(helper.make_node("Add", ["z", "skip"], ["y"]))
    return _model(nodes, constants, [1, inputs, size, size + 3])


@pytest.mark.parametrize("bias_add", [False, True], ids=["bias-input", "bias-add"])
@pytest.mark.parametrize("activation", ["Relu", "Sigmoid", None])
@pytest.mark.parametrize(("inputs", "outputs"), [(1, 4), (4, 1), (3, 36)])
def test_few_channel_conv_on_a_large_map_runs_in_3d_with_its_activation(
    inputs, outputs, activation, bias_add
):
    model = _small_conv(inputs, outputs, 256, activation, bias_add=bias_add)
    before, after, report, rewritten = _rewrite(model)
    assert _fired(report) == ["small-conv-as-3d"]
    expected = ["Unsqueeze", "Conv", *([activation] if activation else []), "Squeeze"]
    assert _ops(rewritten) == expected
    conv = rewritten.graph.node[1]
    assert len(next(i for i in rewritten.graph.initializer if i.name == conv.input[1]).dims) == 5
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("inputs", "outputs"), [(8, 3), (4, 1)])
def test_few_channel_conv_added_to_a_constant_runs_in_3d(inputs, outputs):
    # A super-resolution output (8 -> 3) plus its bicubic skip: onnxruntime would reorder
    # the blocked result back for the Add, so the Conv gains nothing from blocking.
    model = _small_conv(inputs, outputs, 256, None, bias_add=True, skip=True)
    before, after, report, rewritten = _rewrite(model)
    assert _fired(report) == ["small-conv-as-3d"]
    assert _ops(rewritten) == ["Unsqueeze", "Conv", "Squeeze", "Add"]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("inputs", "outputs", "size", "strides", "residual"),
    [
        (1, 4, 32, (1, 1), False),
        (16, 4, 256, (1, 1), False),
        (4, 16, 256, (1, 1), False),
        (3, 4, 256, (4, 4), False),
        (3, 24, 256, (1, 1), True),
    ],
    ids=["small-map", "many-inputs", "whole-block", "strided-to-small", "blocked-reader"],
)
def test_conv_that_onnxruntime_blocks_well_or_that_is_small_stays_2d(
    inputs, outputs, size, strides, residual
):
    model = _small_conv(inputs, outputs, size, None, strides, residual)
    before, after, report, rewritten = _rewrite(model)
    assert not report.fired
    assert _ops(rewritten)[0] == "Conv"
    assert before.tobytes() == after.tobytes()


# -- through the converter, against OpenVINO -------------------------------------------------


def test_converted_ir_gets_the_layout_rewrites_and_still_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset8 as ops

    import b2s_onnx

    rng = np.random.default_rng(7)
    data = ops.parameter([1, 2, 128, 160], np.float32, name="data")
    # Large enough that the converter defers the weights' bytes: the rewrites must read them.
    head = ops.convolution(
        data,
        ops.constant(rng.standard_normal([4, 2, 3, 3]).astype(np.float32)),
        [1, 1],
        [1, 1],
        [1, 1],
        [1, 1],
    )
    act = ops.gelu(ops.relu(head), "erf")
    wide = ops.convolution(
        act,
        ops.constant(rng.standard_normal([64, 4, 3, 3]).astype(np.float32) * 0.2),
        [1, 1],
        [1, 1],
        [1, 1],
        [1, 1],
    )
    up = ops.convolution_backprop_data(
        wide,
        ops.constant(rng.standard_normal([64, 4, 2, 2]).astype(np.float32) * 0.1),
        [2, 2],
    )
    pooled = ops.avg_pool(up, [2, 2], [0, 0], [0, 0], [2, 2], False, "ceil")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([pooled], [data]), xml, compress_to_fp16=False)

    fused = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(fused, full_check=True)
    ops_fused = set(_ops(fused))
    assert {"DepthToSpace", "Div"} <= ops_fused
    assert "ConvTranspose" not in ops_fused
    pool = next(n for n in fused.graph.node if n.op_type == "AveragePool")
    assert "ceil_mode" not in {a.name for a in pool.attribute}
    feeds = {"data": rng.standard_normal([1, 2, 128, 160]).astype(np.float32)}
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = np.asarray(compiled(feeds)[compiled.outputs[0]])
    (actual,) = run_onnxruntime(fused, feeds).values()
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(actual, expected, atol=1e-5 * scale, rtol=1e-5)


# -- residual-scale --------------------------------------------------------------------------


def _gated_residual(gate="HardSigmoid", extra_reader=False, gate_shape=(1, 16, 1, 1)):
    """PaddleOCR's RSE block: x + x * gate(SE(x)), the gate per channel."""
    constants = {"w": np.full(gate_shape, 0.3, np.float32)}
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["pre"]) if gate != "none" else None,
        helper.make_node(gate, ["pre"], ["g"]) if gate != "none" else None,
        helper.make_node("Mul", ["x", "g" if gate != "none" else "w"], ["scaled"]),
        helper.make_node("Add", ["x", "scaled"], ["y"], name="residual"),
    ]
    nodes = [n for n in nodes if n is not None]
    if extra_reader:
        nodes[-1].output[0] = "sum"
        nodes.append(helper.make_node("Add", ["sum", "scaled"], ["y"]))
    return _model(nodes, constants, [1, 16, 9, 7])


@pytest.mark.parametrize("gate", ["HardSigmoid", "Sigmoid"])
def test_a_gated_residual_scale_becomes_one_multiply_within_three_ulp(gate):
    before, after, report, rewritten = _rewrite(_gated_residual(gate))
    assert _fired(report) == ["residual-scale"]
    assert _ops(rewritten) == ["Mul", gate, "Add", "Mul"]
    np.testing.assert_allclose(after, before, rtol=4e-7, atol=0)


def test_a_gate_that_broadcasts_x_to_a_larger_shape_broadcasts_alike():
    before, after, report, _ = _rewrite(_gated_residual(gate_shape=(2, 16, 1, 1)))
    assert _fired(report) == ["residual-scale"]
    assert after.shape == before.shape == (2, 16, 9, 7)
    np.testing.assert_allclose(after, before, rtol=4e-7, atol=0)


@pytest.mark.parametrize("kwargs", [{"gate": "none"}, {"extra_reader": True}])
def test_a_residual_scale_without_a_gate_or_with_a_shared_product_is_kept(kwargs):
    before, after, report, _ = _rewrite(_gated_residual(**kwargs))
    assert "residual-scale" not in _fired(report)
    assert before.tobytes() == after.tobytes()


# -- resize-as-matmul ------------------------------------------------------------------------


def _resize(shape, out_hw, coordinates, by="sizes", axes=True, mode="linear", **extra):
    constants = {}
    inputs = ["x", "", ""]
    if by == "sizes":
        constants["sizes"] = np.asarray(out_hw if axes else [*shape[:2], *out_hw], np.int64)
        inputs.append("sizes")
    else:
        factors = [o / i for o, i in zip(out_hw, shape[2:], strict=True)]
        constants["scales"] = np.asarray(factors if axes else [1, 1, *factors], np.float32)
        inputs[2] = "scales"
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates, **extra}
    if axes:
        attrs["axes"] = [2, 3]
    node = helper.make_node("Resize", inputs, ["y"], name="resize", **attrs)
    return _model([node], constants, list(shape))


COORDINATE_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
RESIZE_SHAPES = [
    ((1, 16, 8, 8), (16, 16), "sizes", True),
    ((2, 3, 5, 7), (9, 4), "sizes", False),
    ((1, 4, 6, 5), (12, 15), "scales", True),
    ((1, 2, 1, 7), (1, 14), "sizes", True),
]


@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize(("shape", "out_hw", "by", "axes"), RESIZE_SHAPES)
def test_a_small_linear_resize_becomes_two_matmuls_within_rounding(
    coordinates, shape, out_hw, by, axes
):
    before, after, report, rewritten = _rewrite(_resize(shape, out_hw, coordinates, by, axes))
    assert _fired(report) == ["resize-as-matmul"]
    assert _ops(rewritten) == ["MatMul", "MatMul"]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("coordinates", COORDINATE_MODES)
@pytest.mark.parametrize(
    ("shape", "out_hw", "by", "axes"), [*RESIZE_SHAPES, ((1, 3, 40, 70), (160, 280), "sizes", True)]
)
@pytest.mark.parametrize(
    "extra",
    [{}, {"cubic_coeff_a": -0.5}, {"exclude_outside": 1}],
    ids=["a-0.75", "a-0.5", "exclude"],
)
def test_a_cubic_resize_becomes_two_matmuls_within_rounding(
    coordinates, shape, out_hw, by, axes, extra
):
    model = _resize(shape, out_hw, coordinates, by, axes, mode="cubic", **extra)
    before, after, report, rewritten = _rewrite(model)
    assert _fired(report) == ["resize-as-matmul"]
    assert _ops(rewritten) == ["MatMul", "MatMul"]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_a_large_linear_or_a_nearest_resize_stays_a_resize():
    _, _, report, rewritten = _rewrite(_resize((1, 2, 40, 8), (80, 16), "half_pixel"))
    assert _ops(rewritten) == ["Resize"]
    assert "above 32" in report.declined[0].reason
    nearest = _resize((1, 2, 8, 8), (16, 16), "asymmetric")
    next(a for a in nearest.graph.node[0].attribute if a.name == "mode").s = b"nearest"
    _, _, report, rewritten = _rewrite(nearest)
    assert _ops(rewritten) == ["Resize"]
    assert not report.fired


# -- lrn-as-conv -----------------------------------------------------------------------------


def _lrn(channels=16, size=5, beta=0.75, bias=1.0):
    node = helper.make_node(
        "LRN", ["x"], ["y"], name="lrn", alpha=1e-3, beta=beta, bias=bias, size=size
    )
    return _model([node], {}, [1, channels, 6, 7])


@pytest.mark.parametrize("beta", [0.75, 0.5, 0.6])
@pytest.mark.parametrize(("channels", "size"), [(16, 5), (20, 3), (7, 7), (3, 9)])
def test_lrn_becomes_a_banded_conv_and_a_power_within_rounding(channels, size, beta):
    before, after, report, rewritten = _rewrite(_lrn(channels, size, beta), seed=channels)
    assert _fired(report) == ["lrn-as-conv"]
    assert "LRN" not in _ops(rewritten)
    assert "Conv" in _ops(rewritten)
    np.testing.assert_allclose(after, before, rtol=2e-6, atol=1e-7)


def test_lrn_over_many_channels_off_the_block_stays_an_lrn():
    before, after, report, rewritten = _rewrite(_lrn(channels=520))
    assert _ops(rewritten) == ["LRN"]
    assert "more than 512 channels, not in whole blocks of 16" in report.declined[0].reason
    assert before.tobytes() == after.tobytes()


@pytest.mark.parametrize("beta", [0.75, 0.6])
@pytest.mark.parametrize(("channels", "size"), [(96, 5), (192, 3), (256, 7), (528, 5), (144, 1)])
def test_lrn_over_whole_blocks_sums_each_block_from_its_window_within_rounding(
    channels, size, beta
):
    before, after, report, rewritten = _rewrite(_lrn(channels, size, beta), seed=channels)
    assert _fired(report) == ["lrn-as-conv"]
    assert "grouped by 16" in report.fired[0].detail
    ops = _ops(rewritten)
    assert "LRN" not in ops
    assert ops.count("Gather") == 1
    (conv,) = [n for n in rewritten.graph.node if n.op_type == "Conv"]
    assert helper.get_attribute_value(conv.attribute[0]) == channels // 16
    np.testing.assert_allclose(after, before, rtol=2e-6, atol=1e-7)


def _lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float):
    """ONNX's LRN in float64 (its window: c - floor((size-1)/2) .. c + ceil((size-1)/2))."""
    squares = x.astype(np.float64) ** 2
    before, after = (size - 1) // 2, size // 2
    padded = np.pad(squares, [(0, 0), (before, after), (0, 0), (0, 0)])
    window = sum(padded[:, i : i + x.shape[1]] for i in range(size))
    return x / (bias + alpha / size * window) ** beta


@pytest.mark.parametrize("size", [2, 4, 6])
def test_lrn_with_an_even_window_sums_the_spec_window(size):
    # onnxruntime's own LRN takes odd sizes only; the spec's window decides.
    model = _lrn(144, size)
    x = np.random.default_rng(size).standard_normal([1, 144, 6, 7]).astype(np.float32) * 4
    report = apply_rewrites(model)
    assert "grouped by 16" in report.fired[0].detail
    after = run_onnxruntime(model, {"x": x})["y"]
    np.testing.assert_allclose(after, _lrn_reference(x, size, 1e-3, 0.75, 1.0), rtol=2e-6)


@pytest.mark.parametrize("channels", [64, 120])
def test_lrn_below_the_grouped_form_keeps_the_banded_conv(channels):
    model = _lrn(channels)
    before, after, report, rewritten = _rewrite(model, seed=channels)
    assert "banded" in report.fired[0].detail
    assert "Gather" not in _ops(rewritten)
    np.testing.assert_allclose(after, before, rtol=2e-6, atol=1e-7)


# -- mvn-as-normalization --------------------------------------------------------------------


def _spelled_mvn(shape, axes, gamma=None, beta=None, inside=True, shared=False):
    """The converter's MVN formula, optionally followed by a scale and a shift."""
    constants = {"axes": np.asarray(axes, np.int64), "eps": np.float32(1e-5)}
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"]),
        helper.make_node("Sub", ["x", "mean"], ["centered"]),
        helper.make_node("Mul", ["centered", "centered"], ["squares"]),
        helper.make_node("ReduceMean", ["squares", "axes"], ["variance"]),
    ]
    if inside:
        nodes += [
            helper.make_node("Add", ["variance", "eps"], ["shifted"]),
            helper.make_node("Sqrt", ["shifted"], ["deviation"]),
        ]
    else:
        nodes += [
            helper.make_node("Sqrt", ["variance"], ["root"]),
            helper.make_node("Add", ["root", "eps"], ["deviation"]),
        ]
    nodes.append(helper.make_node("Div", ["centered", "deviation"], ["normed"], name="mvn"))
    last = "normed"
    if gamma is not None:
        constants["gamma"] = gamma
        nodes.append(helper.make_node("Mul", [last, "gamma"], ["scaled"]))
        last = "scaled"
    if beta is not None:
        constants["beta"] = beta
        nodes.append(helper.make_node("Add", [last, "beta"], ["shifted_out"]))
        last = "shifted_out"
    if shared:
        nodes.append(helper.make_node("Add", [last, "centered"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    return _model(nodes, constants, list(shape))


@pytest.mark.parametrize(
    ("shape", "axes", "gamma", "beta", "kind"),
    [
        ((2, 8, 9, 7), [2, 3], None, None, "InstanceNormalization"),
        (
            (1, 8, 9, 7),
            [-2, -1],
            np.linspace(0.5, 2, 8).reshape(8, 1, 1),
            np.full((1, 8, 1, 1), 0.3),
            "InstanceNormalization",
        ),
        ((1, 6, 16), [2], np.linspace(0.5, 2, 16), np.full((1, 1, 16), 0.3), "LayerNormalization"),
        ((2, 4, 5, 6), [1, 2, 3], None, None, "LayerNormalization"),
    ],
)
def test_spelled_mvn_becomes_one_normalization_kernel_within_rounding(
    shape, axes, gamma, beta, kind
):
    gamma = None if gamma is None else np.asarray(gamma, np.float32)
    beta = None if beta is None else np.asarray(beta, np.float32)
    before, after, report, rewritten = _rewrite(_spelled_mvn(shape, axes, gamma, beta))
    assert _fired(report) == ["mvn-as-normalization"]
    assert _ops(rewritten) == [kind]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize(
    "kwargs",
    [{"axes": [1]}, {"axes": [2, 3], "inside": False}, {"axes": [2, 3], "shared": True}],
    ids=["leading-axis", "eps-outside-sqrt", "centered-read-elsewhere"],
)
def test_other_mvn_spellings_are_kept(kwargs):
    before, after, report, rewritten = _rewrite(_spelled_mvn((1, 4, 5, 6), **kwargs))
    assert "mvn-as-normalization" not in _fired(report)
    assert "ReduceMean" in _ops(rewritten)
    assert before.tobytes() == after.tobytes()


# -- residual-add-as-sum ---------------------------------------------------------------------


def _optimized_ops(model: onnx.ModelProto, tmp_path) -> list[str]:
    """The op types of onnxruntime's fully optimized graph of ``model``."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return _ops(onnx.load(str(tmp_path / "optimized.onnx")))


def _unoptimized_run(model: onnx.ModelProto, feeds) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def _residual_layer_norm(shape=(2, 6, 16), bias=False, reader="LayerNormalization", extra=False):
    """``LayerNorm(x + Relu(x))``: a transformer's residual connection in miniature."""
    width = shape[-1]
    constants = {
        "gamma": np.linspace(0.5, 2, width, dtype=np.float32),
        "beta": np.full(width, 0.25, np.float32),
        "bias": np.linspace(-1, 1, width, dtype=np.float32),
    }
    nodes = [
        helper.make_node("Relu", ["x"], ["branch"]),
        helper.make_node("Add", ["x", "bias" if bias else "branch"], ["sum"], name="residual"),
    ]
    if reader == "LayerNormalization":
        nodes.append(
            helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["normed"], axis=-1)
        )
    else:
        nodes.append(helper.make_node(reader, ["sum"], ["normed"]))
    if extra:
        nodes.append(helper.make_node("Add", ["normed", "sum"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    return _model(nodes, constants, list(shape))


@pytest.mark.parametrize("shape", [(2, 6, 16), (1, 128, 256)])
def test_residual_add_before_layer_norm_becomes_a_sum_onnxruntime_does_not_fuse(shape, tmp_path):
    model = _residual_layer_norm(shape)
    assert "SkipLayerNormalization" in _optimized_ops(model, tmp_path)
    before, after, report, rewritten = _rewrite(model)
    assert _fired(report) == ["residual-add-as-sum"]
    assert _ops(rewritten) == ["Relu", "Sum", "LayerNormalization"]
    optimized = _optimized_ops(rewritten, tmp_path)
    assert "SkipLayerNormalization" not in optimized
    assert "LayerNormalization" in optimized
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    # As graphs the two are the same additions: same bits with onnxruntime's fusions off.
    feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    assert np.array_equal(_unoptimized_run(model, feeds), _unoptimized_run(rewritten, feeds))


@pytest.mark.parametrize(
    "kwargs",
    [{"bias": True}, {"reader": "Relu"}, {"extra": True}],
    ids=["constant-operand", "no-layer-norm", "sum-read-again"],
)
def test_an_add_onnxruntime_would_not_fuse_into_a_skip_layer_norm_stays_an_add(kwargs):
    before, after, report, rewritten = _rewrite(_residual_layer_norm(**kwargs))
    assert "residual-add-as-sum" not in _fired(report)
    assert "Sum" not in _ops(rewritten)
    assert before.tobytes() == after.tobytes()
