"""Atrous-convolution fusion: SpaceToBatch -> Conv -> BatchToSpace becomes one dilated Conv
exactly where that computes the same values (up to float summation order), and is left to
the literal lowering, with a reason, everywhere else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import b2s_onnx
from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.lowering import LoweringOptions, lower_model
from b2s_onnx.parity.runtime import run_onnxruntime


def atrous_model(
    *,
    spatial: int = 2,
    rate: int = 2,
    kernel: int = 3,
    channels: int = 4,
    depthwise: bool = False,
    nhwc: bool = False,
    size: int = 9,
    batch: int = 1,
    base_pads: tuple[int, int] | None = None,
    inner_pads: tuple[int, int] = (0, 0),
    stride: int = 1,
    crop_begin: int = 0,
    bias: str | None = "channel",
    extra_reader: bool = False,
) -> onnx.ModelProto:
    """The graph TensorFlow's atrous convolution becomes: pads grow the input to a multiple
    of ``rate`` (``required_space_to_batch_paddings``), crops cut the excess off again."""
    rank = spatial + 2
    begin, end = base_pads if base_pads is not None else ((kernel - 1) * rate // 2,) * 2
    extra = (rate - (size + begin + end) % rate) % rate
    spatial_axes = list(range(1, spatial + 1)) if nhwc else list(range(2, rank))

    def vector(values_at_spatial, filler=0):
        values = [filler] * rank
        for axis, value in zip(spatial_axes, values_at_spatial, strict=True):
            values[axis] = value
        return np.asarray(values, np.int64)

    rng = np.random.default_rng(spatial * 10 + rate)
    weights = rng.standard_normal(
        [channels, 1 if depthwise else channels, *[kernel] * spatial]
    ).astype(np.float32)
    conv_attrs = {
        "pads": [inner_pads[0]] * spatial + [inner_pads[1]] * spatial,
        "strides": [stride] * spatial,
    }
    if depthwise:
        conv_attrs["group"] = channels
    to_nchw = [0, rank - 1, *range(1, rank - 1)]
    to_nhwc = [0, *range(2, rank), 1]
    nodes = [
        helper.make_node(
            "SpaceToBatch",
            ["x", "block", "pads_begin", "pads_end"],
            ["s2b"],
            domain=DEFAULT_DOMAIN,
            name="s2b",
        )
    ]
    conv_in = "s2b"
    if nhwc:
        nodes.append(helper.make_node("Transpose", ["s2b"], ["s2b_t"], perm=to_nchw))
        conv_in = "s2b_t"
    nodes.append(helper.make_node("Conv", [conv_in, "w"], ["conv"], name="conv", **conv_attrs))
    last = "conv"
    initializers = {"w": weights}
    if bias is not None:
        phase = (size + begin + end + extra) // rate
        conv_out = (phase + sum(inner_pads) - kernel) // stride + 1
        shape = (
            [1, channels] + [1] * spatial if bias == "channel" else [1, 1] + [conv_out] * spatial
        )
        initializers["bias"] = rng.standard_normal(shape).astype(np.float32)
        nodes.append(helper.make_node("Add", [last, "bias"], ["biased"], name="bias"))
        nodes.append(helper.make_node("Relu", ["biased"], ["act"], name="act"))
        last = "act"
    if nhwc:
        nodes.append(helper.make_node("Transpose", [last], ["back"], perm=to_nhwc))
        last = "back"
    nodes.append(
        helper.make_node(
            "BatchToSpace",
            [last, "block", "crops_begin", "crops_end"],
            ["y"],
            domain=DEFAULT_DOMAIN,
            name="b2s",
        )
    )
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * rank)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("s2b", TensorProto.FLOAT, [None] * rank))
    initializers.update(
        block=vector([rate] * spatial, 1),
        pads_begin=vector([begin] * spatial),
        pads_end=vector([end + extra] * spatial),
        crops_begin=vector([crop_begin] * spatial),
        crops_end=vector([extra] * spatial),
    )
    shape = [batch, *[size] * spatial, channels] if nhwc else [batch, channels, *[size] * spatial]
    graph = helper.make_graph(
        nodes,
        "atrous",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


def _both(model: onnx.ModelProto):
    fused = lower_model(model, options=LoweringOptions())
    literal = lower_model(model, options=LoweringOptions(fuse=False))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(0).standard_normal(dims).astype(np.float32)}
    return fused, run_onnxruntime(fused.model, feeds), run_onnxruntime(literal.model, feeds)


def _fired(result) -> list[str]:
    return [f.rewrite for f in result.rewrites.fired]


CASES = {
    "2d full": {},
    "2d depthwise": {"depthwise": True},
    "2d nhwc with transposes": {"nhwc": True},
    "2d nhwc depthwise": {"nhwc": True, "depthwise": True},
    "1d rate 4": {"spatial": 1, "rate": 4, "size": 13},
    "3d": {"spatial": 3, "size": 5, "channels": 2},
    "3d nhwc": {"spatial": 3, "size": 5, "channels": 2, "nhwc": True},
    "valid padding": {"base_pads": (0, 0), "size": 10},
    "inner conv padding": {"base_pads": (0, 0), "inner_pads": (1, 1)},
    "batch of three": {"batch": 3},
    "rate 3 kernel 5": {"rate": 3, "kernel": 5, "size": 11},
    "no bias": {"bias": None},
}


@pytest.mark.parametrize("params", CASES.values(), ids=CASES.keys())
def test_atrous_patterns_become_one_dilated_conv_with_the_same_values(params):
    fused, ours, literal = _both(atrous_model(**params))
    assert _fired(fused) == ["atrous-convolution"]
    ops = [n.op_type for n in fused.model.graph.node]
    assert "SpaceToBatch" not in ops
    assert "BatchToSpace" not in ops
    assert ops.count("Conv") == 1
    assert "Transpose" not in ops or params.get("nhwc")
    conv = next(n for n in fused.model.graph.node if n.op_type == "Conv")
    rate = params.get("rate", 2)
    dilations = next(a.ints for a in conv.attribute if a.name == "dilations")
    assert set(dilations) == {rate}
    assert fused.model.ir_version <= MAX_RUNTIME_IR_VERSION
    onnx.checker.check_model(fused.model, full_check=True)
    for name in literal:
        np.testing.assert_allclose(ours[name], literal[name], rtol=1e-5, atol=1e-5)


def test_nhwc_transposes_around_the_fused_conv_are_kept_in_sequence():
    fused, _, _ = _both(atrous_model(nhwc=True))
    ops = [n.op_type for n in fused.model.graph.node]
    assert ops == ["Transpose", "Conv", "Add", "Relu", "Transpose"]


DECLINES = {
    "strided conv": ({"stride": 2, "size": 12, "base_pads": (0, 0)}, "strided"),
    "crops exceed padding": ({"base_pads": (0, 0), "crop_begin": 1}, "crops exceed"),
    "spatially varying add": ({"bias": "spatial"}, "not element-wise per channel"),
    "phases read elsewhere": ({"extra_reader": True}, "has other readers"),
}


@pytest.mark.parametrize(("params", "reason"), DECLINES.values(), ids=DECLINES.keys())
def test_patterns_that_are_not_a_dilated_conv_are_lowered_literally(params, reason):
    fused, ours, literal = _both(atrous_model(**params))
    assert not fused.rewrites.fired
    assert reason in fused.rewrites.declined[0].reason
    for name in literal:
        np.testing.assert_array_equal(ours[name], literal[name])


def test_run_time_pads_are_lowered_literally_with_the_reason():
    model = atrous_model()
    for name in ("pads_end", "crops_end"):
        tensor = next(t for t in model.graph.initializer if t.name == name)
        model.graph.initializer.remove(tensor)
        model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.INT64, [4]))
    result = lower_model(model)
    assert not result.rewrites.fired
    assert "computed at run time" in result.rewrites.declined[0].reason


def test_fuse_false_lowers_node_by_node():
    model = atrous_model()
    lowered = b2s_onnx.lower(model, fuse=False)
    assert [n.op_type for n in lowered.graph.node].count("Conv") == 1
    assert "Transpose" in [n.op_type for n in lowered.graph.node]


def test_adjacent_transposes_merge_or_cancel_with_the_same_bits():
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
        helper.make_node("Relu", ["b"], ["c"]),
        helper.make_node("Transpose", ["c"], ["d"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["d"], ["y"], perm=[1, 0, 2, 3]),
    ]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    result = lower_model(model)
    assert [n.op_type for n in result.model.graph.node] == ["Relu", "Transpose"]
    feeds = {"x": np.random.default_rng(0).standard_normal([1, 2, 3, 4]).astype(np.float32)}
    expected = run_onnxruntime(model, feeds)["y"]
    assert run_onnxruntime(result.model, feeds)["y"].tobytes() == expected.tobytes()


def test_converted_tensorflow_style_atrous_ir_fuses_and_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    rng = np.random.default_rng(5)
    data = ops.parameter([1, 17, 17, 8], np.float32, name="data")  # NHWC, as TensorFlow
    block = ops.constant(np.asarray([1, 2, 2, 1], np.int64))
    s2b = ops.space_to_batch(
        data,
        block,
        ops.constant(np.asarray([0, 2, 2, 0], np.int64)),
        ops.constant(np.asarray([0, 3, 3, 0], np.int64)),
    )
    nchw = ops.transpose(s2b, ops.constant(np.asarray([0, 3, 1, 2], np.int64)))
    weights = rng.standard_normal([8, 1, 1, 3, 3]).astype(np.float32)
    conv = ops.group_convolution(nchw, ops.constant(weights), [1, 1], [0, 0], [0, 0], [1, 1])
    conv = ops.add(conv, ops.constant(rng.standard_normal([1, 8, 1, 1]).astype(np.float32)))
    nhwc = ops.transpose(ops.relu(conv), ops.constant(np.asarray([0, 2, 3, 1], np.int64)))
    b2s = ops.batch_to_space(
        nhwc,
        block,
        ops.constant(np.asarray([0, 0, 0, 0], np.int64)),
        ops.constant(np.asarray([0, 1, 1, 0], np.int64)),
    )
    xml = tmp_path / "atrous.xml"
    ov.save_model(ov.Model([b2s], [data]), xml, compress_to_fp16=False)

    converted = b2s_onnx.convert_ir(xml)
    ops_after = [n.op_type for n in converted.graph.node]
    assert ops_after.count("Conv") == 1
    assert ops_after.count("Transpose") == 2
    feeds = {"data": rng.standard_normal([1, 17, 17, 8]).astype(np.float32)}
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = np.asarray(compiled(feeds)[compiled.outputs[0]])
    (actual,) = run_onnxruntime(converted, feeds).values()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def dynamic_atrous_model(rate: int = 2, channels: int = 3, trap_above: int | None = None):
    """TensorFlow's dynamic-shape atrous convolution: ``required_space_to_batch_paddings``
    computes the pads and crops from ``tf.shape`` at run time. With ``trap_above``, sizes
    above it get one more row of padding than of cropping: a graph no sample reveals."""
    kernel, base = 3, rate
    ints = lambda name, v: numpy_helper.from_array(np.asarray(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "two", "four"], ["hw"]),
        helper.make_node("Add", ["hw", "base_total"], ["full"]),
        helper.make_node("Mod", ["full", "rate"], ["rem"]),
        helper.make_node("Sub", ["rate", "rem"], ["gap"]),
        helper.make_node("Mod", ["gap", "rate"], ["extra"]),
        helper.make_node("Add", ["extra", "base_end"], ["end_hw"]),
        helper.make_node("Concat", ["zeros2", "end_hw"], ["pads_end"], axis=0),
        helper.make_node("Concat", ["zeros2", "extra"], ["crops_end"], axis=0),
    ]
    initializers = [
        ints("two", [2]),
        ints("four", [4]),
        ints("base_total", [2 * base, 2 * base]),
        ints("rate", [rate, rate]),
        ints("base_end", [base, base]),
        ints("zeros2", [0, 0]),
        ints("block", [1, 1, rate, rate]),
        ints("pads_begin", [0, 0, base, base]),
        ints("crops_begin", [0, 0, 0, 0]),
        numpy_helper.from_array(
            np.random.default_rng(9)
            .standard_normal([channels, 1, kernel, kernel])
            .astype(np.float32),
            "w",
        ),
    ]
    if trap_above is not None:
        nodes[6:7] = [
            helper.make_node("Greater", ["hw", "limit"], ["big"]),
            helper.make_node("Cast", ["big"], ["big_int"], to=TensorProto.INT64),
            helper.make_node("Add", ["extra", "base_end"], ["end_plain"]),
            helper.make_node("Add", ["end_plain", "big_int"], ["end_hw"]),
        ]
        initializers.append(ints("limit", [trap_above, trap_above]))
    nodes += [
        helper.make_node(
            "SpaceToBatch",
            ["x", "block", "pads_begin", "pads_end"],
            ["s2b"],
            domain=DEFAULT_DOMAIN,
            name="s2b",
        ),
        helper.make_node("Conv", ["s2b", "w"], ["conv"], name="conv", group=channels),
        helper.make_node(
            "BatchToSpace",
            ["conv", "block", "crops_begin", "crops_end"],
            ["y"],
            domain=DEFAULT_DOMAIN,
            name="b2s",
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic_atrous",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, None, None])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DEFAULT_DOMAIN, 1)]
    )
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


@pytest.mark.parametrize("rate", [2, 3])
def test_run_time_pads_of_tensorflow_atrous_fuse_with_a_guard(rate):
    model = dynamic_atrous_model(rate)
    fused = lower_model(model)
    literal = lower_model(model, options=LoweringOptions(fuse=False))
    assert _fired(fused) == ["atrous-convolution"]
    assert "guarded at run time" in fused.rewrites.fired[0].detail
    ops = [n.op_type for n in fused.model.graph.node]
    assert ops.count("Conv") == 1
    assert "Transpose" not in ops
    onnx.checker.check_model(fused.model, full_check=True)
    rng = np.random.default_rng(2)
    for height, width in [(9, 9), (10, 7), (16, 17), (1, 33)]:
        feeds = {"x": rng.standard_normal([1, 3, height, width]).astype(np.float32)}
        ours = run_onnxruntime(fused.model, feeds)["y"]
        expected = run_onnxruntime(literal.model, feeds)["y"]
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)


def test_a_run_time_relation_no_sample_reveals_is_caught_by_the_guard():
    from tests.helpers import ORT_ERRORS

    model = dynamic_atrous_model(trap_above=500)
    fused = lower_model(model)
    assert _fired(fused) == ["atrous-convolution"]
    small = {"x": np.zeros([1, 3, 12, 12], np.float32)}
    run_onnxruntime(fused.model, small)
    with pytest.raises(ORT_ERRORS, match="pad and crop as one dilated convolution"):
        run_onnxruntime(fused.model, {"x": np.zeros([1, 3, 501, 12], np.float32)})


def _malformed_example(damage: str) -> onnx.ModelProto:
    """models/dilated_block.onnx with one defect found by the mutation fuzz."""
    model = onnx.load(str(Path(__file__).resolve().parents[1] / "models" / "dilated_block.onnx"))
    if damage == "conv-without-weights":
        conv = next(n for n in model.graph.node if n.op_type == "Conv")
        del conv.input[1:]
    elif damage == "empty-block-shape":
        block = next(t for t in model.graph.initializer if t.name == "block")
        block.CopyFrom(numpy_helper.from_array(np.zeros([0], np.int64), "block"))
    else:
        del model.graph.input[0].type.tensor_type.shape.dim[-1]
    return model


@pytest.mark.parametrize("damage", ["conv-without-weights", "empty-block-shape", "input-of-rank-3"])
def test_malformed_atrous_patterns_are_refused_not_crashed_on(damage):
    """The rewrite leaves a malformed pattern to the lowering, which refuses it by rule
    (these raised IndexError/ValueError inside the rewrite)."""
    with pytest.raises(b2s_onnx.B2SError):
        b2s_onnx.lower(_malformed_example(damage))
