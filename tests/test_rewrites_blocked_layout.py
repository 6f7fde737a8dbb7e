"""Rewrites that keep tensors in onnxruntime's blocked channel layout (NCHWc): per-channel
PReLU as blocked depthwise scalings, zero channel padding of a shortcut as a Concat of a
split convolution, a convolution of a channel Concat as a sum of convolutions. Each fires
only where the layout holds, keeps the outputs bit-exact as a graph (or within rounding,
where it sums in another order), and leaves onnxruntime's optimized graph without a
reorder around the pattern."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.rewrites import apply_rewrites
from tests.helpers import float_model, spelled_prelu_nodes

SPECIAL = [0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-40, 3e38, -3e38]


def _model(nodes, initializers, shape, opset=18) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(float_model(nodes, initializers, shape, opset))


def _session(model: onnx.ModelProto, level, optimized_path=None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _run(model, level, feeds):
    return _session(model, level).run(None, feeds)[0]


def _feeds(model: onnx.ModelProto, special: bool = True) -> dict[str, np.ndarray]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 4
    if special:
        x.reshape(-1)[: len(SPECIAL)] = SPECIAL
    return {"x": x}


def _rewrite(model: onnx.ModelProto):
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    return report, rewritten


def _same_values(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    assert np.array_equal(a, b, equal_nan=True)
    nonzero = a != 0
    assert a[nonzero].tobytes() == b[nonzero].tobytes()


def _close_at_both_levels(rewritten, model, feeds, rtol: float, atol: float = 1e-5) -> None:
    """Within rounding of the original, with onnxruntime's optimizations off and on."""
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        np.testing.assert_allclose(
            _run(rewritten, level, feeds), _run(model, level, feeds), rtol=rtol, atol=atol
        )


def _blocked_layout_available(tmp_path) -> bool:
    """Whether this CPU's onnxruntime uses its blocked layout at all (x86 with AVX2 up)."""
    weights = np.ones([16, 16, 1, 1], np.float32)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"])], {"w": weights}, [1, 16, 4, 4])
    path = tmp_path / "probe.onnx"
    _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, path)
    return any(n.domain == "com.microsoft.nchwc" for n in onnx.load(path).graph.node)


def _optimized_ops(model, tmp_path) -> collections.Counter:
    path = tmp_path / "optimized.onnx"
    _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, path)
    return collections.Counter((n.domain, n.op_type) for n in onnx.load(path).graph.node)


# -- blocked-layout PReLU --------------------------------------------------------------------


def _slopes(channels: int) -> np.ndarray:
    # Negative, zero, above one: slopes Max(x, x * s) cannot take.
    return np.linspace(-1.5, 2.5, channels).astype(np.float32)


def _prelu_after(
    producer: str, channels: int, spelled: bool, size: tuple[int, int] = (6, 5)
) -> onnx.ModelProto:
    """x -> producer (MaxPool 1x1, blocked; or Mul by a constant, not blocked) -> PReLU."""
    constants: dict[str, np.ndarray] = {}
    if producer == "pool":
        first = helper.make_node("MaxPool", ["x"], ["h"], kernel_shape=[1, 1])
    else:
        constants["k"] = np.float32(1.0)
        first = helper.make_node("Mul", ["x", "k"], ["h"])
    slope = _slopes(channels).reshape(1, channels, 1, 1)
    if spelled:
        constants["c"] = -slope
        nodes = spelled_prelu_nodes("h", "y", "prelu")
    else:
        constants["s"] = slope.reshape(channels, 1, 1)
        nodes = [helper.make_node("PRelu", ["h", "s"], ["y"], name="prelu")]
    return _model([first, *nodes], constants, [1, channels, *size])


@pytest.mark.parametrize("spelled", [False, True], ids=["prelu-op", "spelled-out"])
@pytest.mark.parametrize("channels", [16, 48])
def test_per_channel_prelu_on_a_blocked_tensor_takes_the_blocked_form_within_rounding(
    spelled, channels, tmp_path
):
    model = _prelu_after("pool", channels, spelled)
    report, rewritten = _rewrite(model)
    assert [(f.detail, f.exact) for f in report.fired] == [("blocked-layout PReLU", False)]
    assert collections.Counter(n.op_type for n in rewritten.graph.node)["BatchNormalization"] == 2
    feeds = _feeds(model)
    x = feeds["x"]
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        before, after = _run(model, level, feeds), _run(rewritten, level, feeds)
        # x + (1 - s)(-x) for x < 0: three roundings, (1 - s), the product and the sum,
        # against the one of s x: within 2^-23 (|1 - s| + |s|) |x|; -inf becomes NaN. Near
        # float32's largest values (1 - s) x may overflow where s x does not.
        slope = _slopes(channels).reshape(1, channels, 1, 1)
        bound = 2.0**-23 * (np.abs(1 - slope) + np.abs(slope)) * np.abs(x) + 1e-30
        finite = np.isfinite(x) & (np.abs(x) < 1e37)
        np.testing.assert_array_less(np.abs(after[finite] - before[finite]), bound[finite])
        np.testing.assert_array_equal(after[x == np.inf], np.inf)
        at_minus_inf = x == -np.inf
        assert (np.isnan(after) | (after == before))[at_minus_inf].all()
        assert np.isnan(after[np.isnan(x)]).all()
        positive = x >= 0
        _same_values(before[positive], after[positive])
    if _blocked_layout_available(tmp_path):
        ops = _optimized_ops(rewritten, tmp_path)
        assert ops[("com.microsoft.nchwc", "ReorderOutput")] == 1, ops
        assert not any(op in ("BatchNormalization", "PRelu", "Neg") for _, op in ops), ops


@pytest.mark.parametrize("spelled", [False, True], ids=["prelu-op", "spelled-out"])
@pytest.mark.parametrize(("producer", "channels"), [("mul", 16), ("pool", 24)])
def test_per_channel_prelu_off_the_blocked_layout_takes_the_exact_where_form(
    spelled, producer, channels
):
    """Off the blocked layout (a Mul the layout does not keep; a pool onnxruntime blocks
    only on whole blocks), slopes Max cannot take: ``x * Where(x < 0, s, 1)``, bit-exact."""
    model = _prelu_after(producer, channels, spelled, size=(64, 48))
    report, rewritten = _rewrite(model)
    assert [(f.detail, f.exact) for f in report.fired] == [("x * Where(x < 0, slope, 1)", True)]
    assert "BatchNormalization" not in {n.op_type for n in rewritten.graph.node}
    feeds = _feeds(model)
    for level in (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    ):
        before, after = _run(model, level, feeds), _run(rewritten, level, feeds)
        if spelled:  # Relu(x) + c * Relu(-x) has its own signed zeros
            _same_values(before, after)
        else:
            assert before.tobytes() == after.tobytes()


def test_per_channel_prelu_after_a_conv_with_channels_off_the_block_size_stays_blocked(
    tmp_path,
):
    """onnxruntime blocks a Conv of any output count (padding the last block) and the two
    BatchNormalizations with it: 24 channels, no reorder between them."""
    rng = np.random.default_rng(5)
    constants = {
        "w": (rng.standard_normal([24, 16, 3, 3]) * 0.2).astype(np.float32),
        "s": _slopes(24).reshape(24, 1, 1),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("PRelu", ["h", "s"], ["y"], name="prelu"),
    ]
    model = _model(nodes, constants, [1, 16, 6, 5])
    report, rewritten = _rewrite(model)
    assert [(f.detail, f.exact) for f in report.fired] == [("blocked-layout PReLU", False)]
    _close_at_both_levels(rewritten, model, _feeds(model, special=False), rtol=1e-5)
    if _blocked_layout_available(tmp_path):
        ops = _optimized_ops(rewritten, tmp_path)
        assert ops[("com.microsoft.nchwc", "ReorderOutput")] == 1, ops
        assert not any(op in ("BatchNormalization", "PRelu") for _, op in ops), ops


def _residual_prelu_chain(channels: int = 16, blocks: int = 3) -> onnx.ModelProto:
    """Conv -> spelled PReLU, then residual blocks ending in Add -> spelled PReLU (the
    MediaPipe detectors' shape): every PReLU must see its input as blocked."""
    rng = np.random.default_rng(3)
    constants: dict[str, np.ndarray] = {}
    nodes = []
    previous = "x"
    for block in range(blocks):
        w, b, c = f"w{block}", f"b{block}", f"c{block}"
        constants[w] = (rng.standard_normal([channels, channels, 3, 3]) * 0.2).astype(np.float32)
        constants[b] = rng.standard_normal([1, channels, 1, 1]).astype(np.float32)
        constants[c] = -_slopes(channels).reshape(1, channels, 1, 1)
        t = f"t{block}"
        nodes += [
            helper.make_node("Conv", [previous, w], [f"{t}conv"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", [f"{t}conv", b], [f"{t}biased"]),
        ]
        data = f"{t}biased"
        if block:
            nodes.append(helper.make_node("Add", [previous, f"{t}biased"], [f"{t}sum"]))
            data = f"{t}sum"
        out = "y" if block == blocks - 1 else f"{t}out"
        nodes += [
            helper.make_node("Relu", [data], [f"{t}pos"]),
            helper.make_node("Neg", [data], [f"{t}negd"]),
            helper.make_node("Relu", [f"{t}negd"], [f"{t}neg"]),
            helper.make_node("Mul", [c, f"{t}neg"], [f"{t}scaled"]),
            helper.make_node("Add", [f"{t}pos", f"{t}scaled"], [out], name=f"prelu{block}"),
        ]
        previous = out
    return _model(nodes, constants, [1, channels, 8, 8])


def test_a_chain_of_residual_prelus_all_take_the_blocked_form(tmp_path):
    model = _residual_prelu_chain()
    report, rewritten = _rewrite(model)
    assert [f.detail for f in report.fired] == ["blocked-layout PReLU"] * 3
    feeds = _feeds(model, special=False)
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    before, after = _run(model, level, feeds), _run(rewritten, level, feeds)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6 * float(np.abs(before).max()))
    if _blocked_layout_available(tmp_path):
        ops = _optimized_ops(rewritten, tmp_path)
        assert ops[("com.microsoft.nchwc", "ReorderOutput")] == 1, ops


# -- channel-padding-as-concat ---------------------------------------------------------------


def _padded_shortcut(kept=16, extra=16, pads=None, value=0.0, bias_as_add=True, conv_pads=None):
    """MaxPool(x) widened with zero channels, added to a Conv of x (BlazeFace's block)."""
    rng = np.random.default_rng(5)
    total = kept + extra
    pads = pads if pads is not None else [0, 0, 0, 0, 0, extra, 0, 0]
    conv_pads = conv_pads or [1, 1, 1, 1]
    constants = {
        "w": (rng.standard_normal([total, kept, 3, 3]) * 0.2).astype(np.float32),
        "b": rng.standard_normal([total]).astype(np.float32),
        "pads": np.asarray(pads, np.int64),
        "value": np.float32(value),
    }
    nodes = [
        helper.make_node("MaxPool", ["x"], ["pooled"], kernel_shape=[1, 1]),
        helper.make_node("Pad", ["pooled", "pads", "value"], ["widened"], mode="constant"),
    ]
    if bias_as_add:
        constants["b"] = constants["b"].reshape(1, total, 1, 1)
        nodes += [
            helper.make_node("Conv", ["x", "w"], ["conv"], pads=conv_pads),
            helper.make_node("Add", ["conv", "b"], ["biased"]),
        ]
    else:
        nodes.append(helper.make_node("Conv", ["x", "w", "b"], ["biased"], pads=conv_pads))
    nodes.append(helper.make_node("Add", ["widened", "biased"], ["y"], name="shortcut"))
    return _model(nodes, constants, [1, kept, 7, 6])


@pytest.mark.parametrize("bias_as_add", [True, False])
@pytest.mark.parametrize(("kept", "extra"), [(16, 16), (32, 16)])
def test_zero_channel_padding_of_a_shortcut_becomes_a_concat_of_a_split_conv(
    kept, extra, bias_as_add, tmp_path
):
    model = _padded_shortcut(kept, extra, bias_as_add=bias_as_add)
    report, rewritten = _rewrite(model)
    assert "channel-padding-as-concat" in [f.rewrite for f in report.fired]
    ops = [n.op_type for n in rewritten.graph.node]
    assert "Pad" not in ops
    assert ops.count("Conv") == 2
    assert "Concat" in ops
    feeds = _feeds(model, special=False)
    # Bit-exact as a graph; with its layout optimizations on, onnxruntime may run the split
    # convolutions in its blocked kernels, which sum in another order.
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    _same_values(_run(model, level, feeds), _run(rewritten, level, feeds))
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    np.testing.assert_allclose(
        _run(rewritten, level, feeds), _run(model, level, feeds), rtol=1e-5, atol=1e-5
    )
    if _blocked_layout_available(tmp_path):
        optimized = _optimized_ops(rewritten, tmp_path)
        assert optimized[("com.microsoft.nchwc", "ReorderOutput")] == 1, optimized


@pytest.mark.parametrize(
    "change",
    [
        {"pads": [0, 0, 0, 0, 0, 16, 0, 1], "conv_pads": [1, 1, 1, 2]},  # and the width
        {"pads": [0, 16, 0, 0, 0, 0, 0, 0]},  # zeros before the channels
        {"value": 1.0},
    ],
    ids=["spatial", "leading", "non-zero"],
)
def test_other_paddings_are_left_alone(change):
    report, rewritten = _rewrite(_padded_shortcut(**change))
    assert "channel-padding-as-concat" not in [f.rewrite for f in report.fired]
    assert "Pad" in [n.op_type for n in rewritten.graph.node]


def test_channel_padding_off_the_block_size_is_declined_with_the_reason():
    report, rewritten = _rewrite(_padded_shortcut(kept=8, extra=8))
    declined = [d for d in report.declined if d.rewrite == "channel-padding-as-concat"]
    assert declined
    assert "blocked layout" in declined[0].reason
    assert "Pad" in [n.op_type for n in rewritten.graph.node]


# -- the layout predicate ---------------------------------------------------------------------


def _layout_graph():
    """Conv -> Relu -> MaxPool -> Identity, Concat with a second Conv, a nearest and a
    linear 2x Resize by scales, the linear one by sizes too (of two axes, of all four), a
    per-channel Mul and Add by
    constants, a Conv on 24 input channels, and an Erf (no blocked kernel)."""
    rng = np.random.default_rng(0)
    constants = {
        "w1": rng.standard_normal([16, 3, 3, 3]).astype(np.float32),
        "w2": rng.standard_normal([16, 16, 1, 1]).astype(np.float32),
        "w3": rng.standard_normal([24, 32, 1, 1]).astype(np.float32),
        "w4": rng.standard_normal([16, 24, 1, 1]).astype(np.float32),
        "k": np.full([1, 32, 1, 1], 0.5, np.float32),
        "two": np.asarray([1, 1, 2, 2], np.float32),
        "sizes": np.asarray([8, 8], np.int64),
        "sizes4": np.asarray([1, 32, 8, 8], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Identity", ["p0"], ["p1"]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("Concat", ["p1", "c2"], ["cat"], axis=1),
        helper.make_node(
            "Resize",
            ["cat", "", "two"],
            ["near"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Resize", ["cat", "", "two"], ["lin"], mode="linear"),
        helper.make_node(
            "Resize", ["cat", "", "", "sizes"], ["lin_sizes"], mode="linear", axes=[2, 3]
        ),
        helper.make_node("Resize", ["cat", "", "", "sizes4"], ["lin_sizes4"], mode="linear"),
        helper.make_node("Mul", ["cat", "k"], ["scaled"]),
        helper.make_node("Add", ["cat", "k"], ["shifted"]),
        helper.make_node("Erf", ["cat"], ["erf"]),
        helper.make_node("Conv", ["near", "w3"], ["c3"]),
        helper.make_node("Conv", ["c3", "w4"], ["y"]),
    ]
    model = _model(nodes, constants, [1, 3, 8, 8])
    model.graph.output.extend(
        helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
        for n in ("lin", "lin_sizes", "lin_sizes4", "scaled", "shifted", "erf")
    )
    return model


LAYOUT = {
    "c1": True,  # a Conv reading 3 channels: NCHW input, blocked output
    "r1": True,
    "p0": True,
    "p1": True,  # onnxruntime removes the Identity
    "cat": True,  # channel Concat of two blocked, aligned tensors
    "near": True,  # nearest, asymmetric, floor, whole scales
    "lin": True,  # linear, half_pixel, whole scales
    "lin_sizes": False,  # the same given as sizes of two axes: onnxruntime 1.31 leaves it NCHW
    "lin_sizes4": True,  # ... but sizes of all four axes, whole factors, it blocks
    "scaled": True,  # Mul by a per-channel constant: a blocked depthwise 1x1 Conv
    "shifted": False,  # Add of a constant: no blocked form
    "erf": False,
    "c3": True,
    "y": True,  # 24 input channels: blocked too, the last block padded
}


@pytest.mark.parametrize(("tensor", "blocked"), LAYOUT.items())
def test_the_layout_predicate_follows_onnxruntimes_rules(tensor, blocked):
    from b2s_onnx.rewrites._blocked_layout import is_blocked
    from b2s_onnx.rewrites._index import GraphIndex

    assert is_blocked(GraphIndex(_layout_graph()), tensor) == blocked


def test_onnxruntime_lays_the_graph_out_as_the_predicate_says(tmp_path):
    """Each graph output the predicate calls blocked comes out of a ReorderOutput; the
    others straight from an NCHW kernel."""
    if not _blocked_layout_available(tmp_path):
        pytest.skip("this CPU's onnxruntime has no blocked layout")
    path = tmp_path / "optimized.onnx"
    _session(_layout_graph(), ort.GraphOptimizationLevel.ORT_ENABLE_ALL, path)
    produced = {out: n for n in onnx.load(path).graph.node for out in n.output}
    for name in ("lin", "lin_sizes", "lin_sizes4", "scaled", "shifted", "erf", "y"):
        from_blocked = produced[name].op_type == "ReorderOutput"
        assert from_blocked == LAYOUT[name], name


# -- pad-channels-to-block -------------------------------------------------------------------


def _bottleneck(narrow=8, middle="depthwise", reader="Conv", wide=16, size=12):
    """x[wide] -> 1x1 Conv (+ bias) to ``narrow`` channels -> Relu -> ``middle`` -> 1x1 Conv
    back to ``wide`` (read by ``reader``), added to x: an ENet/MobileNet bottleneck."""
    rng = np.random.default_rng(1)

    def values(*shape, low=-1.0, high=1.0):
        return rng.uniform(low, high, shape).astype(np.float32)

    constants = {
        "w_in": values(narrow, wide, 1, 1),
        "b_in": values(narrow),
        "w_out": values(wide, narrow, 1, 1),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w_in", "b_in"], ["reduced"]),
        helper.make_node("Relu", ["reduced"], ["a"]),
    ]
    if middle == "depthwise":
        constants.update(w_dw=values(narrow, 1, 3, 3), b_dw=values(narrow))
        nodes.append(
            helper.make_node("Conv", ["a", "w_dw", "b_dw"], ["m"], group=narrow, pads=[1] * 4)
        )
    elif middle == "maxpool":
        nodes.append(helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=[3, 3], pads=[1] * 4))
    elif middle == "batchnorm":
        constants.update(
            scale=values(narrow),
            bias=values(narrow),
            mean=values(narrow),
            var=values(narrow, low=0.5),
        )
        nodes.append(
            helper.make_node("BatchNormalization", ["a", "scale", "bias", "mean", "var"], ["m"])
        )
    elif middle == "scales":
        constants.update(s=values(1, narrow, 1, 1), d=values(narrow, 1, 1, low=0.5, high=2.0))
        nodes += [
            helper.make_node("Mul", ["a", "s"], ["scaled"]),
            helper.make_node("Div", ["scaled", "d"], ["m"]),
        ]
    elif middle == "prelu":
        constants.update(slope=values(narrow, 1, 1))
        nodes.append(helper.make_node("PRelu", ["a", "slope"], ["m"]))
    elif middle == "squeeze-excite":
        # A 1x1 Conv that reads the region and produces into it, and a Mul of two tensors.
        constants.update(axes=np.asarray([2, 3], np.int64), w_se=values(narrow, narrow, 1, 1))
        nodes += [
            helper.make_node("ReduceMean", ["a", "axes"], ["pooled"], keepdims=1),
            helper.make_node("Conv", ["pooled", "w_se"], ["excite"]),
            helper.make_node("Sigmoid", ["excite"], ["gate"]),
            helper.make_node("Mul", ["a", "gate"], ["m"]),
        ]
    else:  # activations only
        nodes.append(helper.make_node("LeakyRelu", ["a"], ["m"], alpha=0.1))
    if reader == "Conv":
        nodes += [
            helper.make_node("Conv", ["m", "w_out"], ["expanded"]),
            helper.make_node("Add", ["expanded", "x"], ["y"]),
        ]
    elif reader == "Transpose":
        nodes.append(helper.make_node("Transpose", ["m"], ["y"], perm=[0, 2, 3, 1]))
    else:  # the region's tensor is also the graph's output
        nodes.append(helper.make_node("Conv", ["m", "w_out"], ["expanded"]))
        nodes.append(helper.make_node("Identity", ["m"], ["y"]))
    return _model(nodes, constants, [1, wide, size, size])


def _pad_fired(report) -> list[str]:
    return [f.detail for f in report.fired if f.rewrite == "pad-channels-to-block"]


@pytest.mark.parametrize(
    "middle", ["depthwise", "maxpool", "batchnorm", "scales", "prelu", "squeeze-excite"]
)
@pytest.mark.parametrize("narrow", [8, 12])
def test_a_narrow_bottleneck_is_padded_to_a_whole_block_within_rounding(middle, narrow):
    model = _bottleneck(narrow, middle)
    report, rewritten = _rewrite(model)
    assert len(_pad_fired(report)) == 1
    assert f"from {narrow} to 16 channels" in _pad_fired(report)[0]
    assert not report.fired[-1].exact
    feeds = _feeds(model, special=False)
    _close_at_both_levels(rewritten, model, feeds, rtol=1e-5)
    shapes = {t.name: tuple(t.dims) for t in rewritten.graph.initializer}
    conv_weights = [shapes[n.input[1]] for n in rewritten.graph.node if n.op_type == "Conv"]
    assert (16, 16, 1, 1) in conv_weights  # the reducing Conv now makes a whole block
    assert all(16 in dims[:2] for dims in conv_weights)
    # The old names are gone; each maps to the tensor that carries its value, padded.
    assert report.absorbed["a"].startswith("a/16ch")


def test_padding_removes_onnxruntimes_reorders_around_the_narrow_tensors(tmp_path):
    if not _blocked_layout_available(tmp_path):
        pytest.skip("onnxruntime has no blocked layout on this CPU")
    model = _bottleneck(8, "depthwise", size=32)
    _, rewritten = _rewrite(model)

    def reorders(m):
        ops = _optimized_ops(m, tmp_path)
        return sum(n for (domain, op), n in ops.items() if op.startswith("Reorder"))

    before, after = reorders(model), reorders(rewritten)
    assert after <= before
    if before > 2:  # AVX-512 (16 channels per block): 8 channels left the layout
        assert after < before


@pytest.mark.parametrize(
    ("narrow", "middle", "reader"),
    [
        (6, "depthwise", "Conv"),  # more than doubled: measured slower
        (24, "maxpool", "Conv"),  # wider than a block, no depthwise conv: measured no faster
        (24, "batchnorm", "Conv"),
        (56, "depthwise", "Conv"),  # beyond 47 channels
        (8, "activations", "Conv"),  # onnxruntime folds them into the convolution
    ],
)
def test_regions_not_worth_padding_are_left_alone(narrow, middle, reader):
    model = _bottleneck(narrow, middle, reader)
    report, rewritten = _rewrite(model)
    assert not _pad_fired(report)
    assert [n.op_type for n in rewritten.graph.node] == [n.op_type for n in model.graph.node]


@pytest.mark.parametrize(("narrow", "padded"), [(24, 32), (40, 48), (34, 48)])
def test_a_wider_region_around_a_depthwise_conv_is_padded_within_rounding(narrow, padded):
    """onnxruntime runs a depthwise Conv blocked only on whole blocks (EfficientNet-B3's and
    NASNet's 17-47-channel branches: 0.95x)."""
    model = _bottleneck(narrow, "depthwise")
    report, rewritten = _rewrite(model)
    assert _pad_fired(report) == [f"3 tensors from {narrow} to {padded} channels"]
    _close_at_both_levels(rewritten, model, _feeds(model, special=False), rtol=1e-5)


def _squeeze_excite(squeezed: int, channels: int = 64, size: int = 12) -> onnx.ModelProto:
    """x -> spatial mean -> 1x1 Conv to ``squeezed`` -> Swish -> 1x1 Conv back -> Sigmoid ->
    times x: a Keras EfficientNet squeeze-and-excitation block."""
    rng = np.random.default_rng(3)
    constants = {
        "axes": np.asarray([2, 3], np.int64),
        "w_sq": rng.uniform(-1, 1, (squeezed, channels, 1, 1)).astype(np.float32),
        "b_sq": rng.uniform(-1, 1, squeezed).astype(np.float32),
        "w_ex": rng.uniform(-1, 1, (channels, squeezed, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["pooled"], keepdims=1),
        helper.make_node("Conv", ["pooled", "w_sq", "b_sq"], ["squeezed"]),
        helper.make_node("Sigmoid", ["squeezed"], ["s"]),
        helper.make_node("Mul", ["squeezed", "s"], ["swish"]),
        helper.make_node("Conv", ["swish", "w_ex"], ["excited"]),
        helper.make_node("Sigmoid", ["excited"], ["gate"]),
        helper.make_node("Mul", ["x", "gate"], ["y"]),
    ]
    return _model(nodes, constants, [1, channels, size, size])


@pytest.mark.parametrize(("squeezed", "padded"), [(24, 32), (34, 48), (12, 16)])
def test_a_squeeze_wider_than_a_block_is_padded_so_its_gate_stays_blocked(squeezed, padded):
    """A squeeze of 17-47 channels at one value per channel: padding costs nothing, and the
    excite Conv reading whole blocks keeps the gate, and the Mul of the whole tensor by it,
    in onnxruntime's blocked layout (Keras EfficientNet-B3: 0.95x)."""
    model = _squeeze_excite(squeezed)
    report, rewritten = _rewrite(model)
    assert _pad_fired(report) == [f"3 tensors from {squeezed} to {padded} channels"]
    _close_at_both_levels(rewritten, model, _feeds(model, special=False), rtol=1e-5)


@pytest.mark.parametrize(
    ("reader", "reason"),
    [
        ("Transpose", "Transpose"),
        ("output", "graph output"),
    ],
)
def test_a_region_read_as_it_is_declines_with_the_reason(reader, reason):
    report, _ = _rewrite(_bottleneck(8, "depthwise", reader))
    assert not _pad_fired(report)
    reasons = [d.reason for d in report.declined if d.rewrite == "pad-channels-to-block"]
    assert reasons
    assert reason in reasons[0]


# -- scale-shift-as-batchnorm ----------------------------------------------------------------


def _scale_shift(
    channels=32, producer="Relu", scale_shape=None, shift_shape=None, swapped=False, shared=False
):
    """x -> Conv -> producer -> Mul(s) -> Add(b) -> Conv: OpenVINO's ScaleShift after an
    activation ("Conv": right after the convolution; "input": on the graph's input)."""
    rng = np.random.default_rng(2)
    scale_shape = scale_shape or (1, channels, 1, 1)
    shift_shape = shift_shape or (1, channels, 1, 1)
    constants = {
        "s": rng.uniform(-2, 2, scale_shape).astype(np.float32),
        "b": rng.uniform(-2, 2, shift_shape).astype(np.float32),
        "w": rng.uniform(-1, 1, (16, channels, 3, 3)).astype(np.float32),
        "w0": rng.uniform(-1, 1, (channels, channels, 1, 1)).astype(np.float32),
    }
    if producer == "input":
        nodes = [helper.make_node("Identity", ["x"], ["p"])]
    elif producer == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w0"], ["p"])]
    else:
        nodes = [
            helper.make_node("Conv", ["x", "w0"], ["c0"]),
            helper.make_node(
                producer,
                ["c0"],
                ["p"],
                **({"kernel_shape": [2, 2]} if producer == "MaxPool" else {}),
            ),
        ]
    nodes += [
        helper.make_node("Mul", ["s", "p"] if swapped else ["p", "s"], ["scaled"]),
        helper.make_node("Add", ["b", "scaled"] if swapped else ["scaled", "b"], ["shifted"]),
        helper.make_node("Conv", ["shifted", "w"], ["c"], pads=[1] * 4),
    ]
    if shared:
        nodes.append(helper.make_node("ReduceSum", ["scaled"], ["total"], keepdims=1))
        nodes.append(helper.make_node("Add", ["c", "total"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["y"]))
    return _model(nodes, constants, [1, channels, 10, 10])


def _scale_shift_fired(report) -> list[str]:
    return [f.detail for f in report.fired if f.rewrite == "scale-shift-as-batchnorm"]


@pytest.mark.parametrize(
    ("channels", "scale_shape", "swapped", "producer"),
    [
        (32, None, False, "Relu"),
        (3, None, False, "Relu"),
        (32, (32, 1, 1), True, "Relu"),
        (16, (1,), False, "Relu"),
        (32, None, False, "MaxPool"),
    ],
)
def test_a_scale_shift_on_a_blocked_tensor_becomes_one_batch_normalization_within_an_ulp(
    channels, scale_shape, swapped, producer
):
    model = _scale_shift(channels, producer, scale_shape=scale_shape, swapped=swapped)
    report, rewritten = _rewrite(model)
    assert _scale_shift_fired(report) == [f"{channels} channels"]
    ops = [n.op_type for n in rewritten.graph.node]
    assert "BatchNormalization" in ops
    assert "Mul" not in ops
    assert "Add" not in ops
    feeds = _feeds(model, special=False)
    _close_at_both_levels(rewritten, model, feeds, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"producer": "Conv"},  # onnxruntime folds the pair into the convolution
        {"producer": "input"},  # not in the blocked layout: measured no faster
        {"shared": True},  # the scaled tensor has another reader
        {"shift_shape": (1, 1, 1, 10)},  # the shift varies along the width
    ],
)
def test_other_scale_shifts_are_left_alone(kwargs):
    model = _scale_shift(**kwargs)
    report, rewritten = _rewrite(model)
    assert not _scale_shift_fired(report)
    assert "BatchNormalization" not in [n.op_type for n in rewritten.graph.node]


def test_a_scale_shift_with_a_non_finite_scale_declines_with_the_reason():
    model = _scale_shift()
    scale = next(t for t in model.graph.initializer if t.name == "s")
    values = numpy_helper.to_array(scale).copy()
    values.reshape(-1)[3] = np.inf
    scale.CopyFrom(numpy_helper.from_array(values, "s"))
    report, _ = _rewrite(model)
    assert not _scale_shift_fired(report)
    assert [d.reason for d in report.declined if d.rewrite == "scale-shift-as-batchnorm"] == [
        "a scale is not finite"
    ]


# -- concat-as-conv-sum ----------------------------------------------------------------------


def _concat_then_conv(
    widths=(16, 32),
    after="bias-add",
    readers=1,
    other_reader=None,
    group=1,
    stride=2,
    as_output=False,
    activations=None,
):
    """Blocked branches (Conv -> Relu from x[16], or the ``activations`` given per branch:
    Neg has no blocked kernel) of ``widths`` channels, concatenated over channels and read
    by ``readers`` 3x3 Convs of 32 channels (and ``other_reader``). The
    first Conv's bias: an input (``after`` "bias-input"), an Add after it ("bias-add"), or
    none with a residual added: a blocked Conv ("residual") or its negation
    ("unblocked-residual": Neg has no blocked kernel)."""
    rng = np.random.default_rng(7)
    total = sum(widths)
    constants: dict[str, np.ndarray] = {}
    nodes = []
    for k, width in enumerate(widths):
        constants[f"wb{k}"] = (rng.standard_normal([width, 16, 3, 3]) * 0.3).astype(np.float32)
        activation = activations[k] if activations else "Relu"
        nodes += [
            helper.make_node("Conv", ["x", f"wb{k}"], [f"c{k}"], pads=[1] * 4),
            helper.make_node(activation, [f"c{k}"], [f"part{k}"]),
        ]
    nodes.append(
        helper.make_node("Concat", [f"part{k}" for k in range(len(widths))], ["cat"], axis=1)
    )
    outputs = []
    for r in range(readers):
        constants[f"w{r}"] = (rng.standard_normal([32, total // group, 3, 3]) * 0.1).astype(
            np.float32
        )
        constants[f"b{r}"] = rng.standard_normal([32]).astype(np.float32)
        conv = {"pads": [1] * 4, "strides": [stride] * 2, "group": group}
        if r == 0 and after == "bias-input":
            nodes.append(helper.make_node("Conv", ["cat", "w0", "b0"], ["o0"], **conv))
        else:
            nodes.append(helper.make_node("Conv", ["cat", f"w{r}"], [f"conv{r}"], **conv))
            if r == 0 and after in ("residual", "unblocked-residual"):
                constants["wr"] = (rng.standard_normal([32, 16, 1, 1]) * 0.3).astype(np.float32)
                strides = [stride] * 2
                nodes.append(helper.make_node("Conv", ["x", "wr"], ["res"], strides=strides))
                residual = "res"
                if after == "unblocked-residual":  # Neg has no blocked kernel
                    nodes.append(helper.make_node("Neg", ["res"], ["negated"]))
                    residual = "negated"
                nodes.append(helper.make_node("Add", [f"conv{r}", residual], [f"o{r}"]))
            else:
                constants[f"b{r}"] = constants[f"b{r}"].reshape(1, 32, 1, 1)
                nodes.append(helper.make_node("Add", [f"conv{r}", f"b{r}"], [f"o{r}"]))
        outputs.append(f"o{r}")
    if other_reader == "MaxPool":
        nodes.append(helper.make_node("MaxPool", ["cat"], ["pooled"], kernel_shape=[2, 2]))
        outputs.append("pooled")
    joined = outputs[0]
    for k, name in enumerate(outputs[1:]):
        nodes.append(helper.make_node("ReduceMean", [name], [f"m{k}"], keepdims=1))
        nodes.append(helper.make_node("Add", [joined, f"m{k}"], [f"j{k}"]))
        joined = f"j{k}"
    nodes.append(helper.make_node("Relu", [joined], ["y"]))
    model = _model(nodes, constants, [1, 16, 20, 18])
    if as_output:
        cat = helper.make_tensor_value_info("cat", TensorProto.FLOAT, [None] * 4)
        model.graph.output.append(cat)
    return model


def _concat_fired(report) -> list[str]:
    return [f.detail for f in report.fired if f.rewrite == "concat-as-conv-sum"]


def _concat_declined(report) -> list[str]:
    return [d.reason for d in report.declined if d.rewrite == "concat-as-conv-sum"]


@pytest.mark.parametrize(
    ("widths", "after", "readers"),
    [
        ((16, 32), "bias-add", 1),
        ((16, 32), "bias-input", 1),
        ((32, 16, 16), "residual", 1),
        ((16, 16), "unblocked-residual", 1),
        ((16, 32), "bias-add", 2),
    ],
)
def test_a_conv_of_a_blocked_concat_becomes_a_sum_of_convs_within_rounding(
    widths, after, readers, tmp_path
):
    model = _concat_then_conv(widths, after, readers)
    report, rewritten = _rewrite(model)
    assert _concat_fired(report) == [f"{len(widths)} parts into {readers} convolution(s)"]
    assert not next(f for f in report.fired if f.rewrite == "concat-as-conv-sum").exact
    ops = collections.Counter(n.op_type for n in rewritten.graph.node)
    assert ops["Concat"] == 0
    assert ops["Conv"] == len(widths) * (1 + readers) + (after.endswith("residual"))
    feeds = _feeds(model, special=False)
    _close_at_both_levels(rewritten, model, feeds, rtol=1e-5)
    # An unblocked residual stays an Add after the sum of the parts.
    assert report.absorbed["cat"] == ("conv0" if after == "unblocked-residual" else "o0")
    if not _blocked_layout_available(tmp_path):
        return
    before, optimized = _optimized_ops(model, tmp_path), _optimized_ops(rewritten, tmp_path)
    assert optimized[("com.microsoft.nchwc", "Concat")] + optimized[("", "Concat")] == 0
    # onnxruntime folds every sum into the convolution after it: no Add of the parts is
    # left, and no reorder was added.
    adds = [k for k in set(optimized) | set(before) if k[1] in ("Add", "Sum")]
    assert sum(optimized[k] for k in adds) <= sum(before[k] for k in adds), optimized
    reorders = [k for k in optimized if k[1].startswith("Reorder")]
    assert sum(optimized[k] for k in reorders) <= sum(before[k] for k in reorders)


@pytest.mark.parametrize("activations", [("Neg", "Neg"), ("Relu", "Neg")], ids=["none", "one"])
def test_a_concat_of_parts_outside_the_blocked_layout_becomes_a_sum_of_convs(activations, tmp_path):
    """Parts without blocked kernels (a Mish branch: 0.93-0.98x): each part is reordered
    for its own convolution instead of the Concat as a whole, and a blocked part no longer
    leaves the blocked layout for the Concat."""
    model = _concat_then_conv((16, 32), activations=activations)
    report, rewritten = _rewrite(model)
    assert _concat_fired(report) == ["2 parts into 1 convolution(s)"]
    _close_at_both_levels(rewritten, model, _feeds(model, special=False), rtol=1e-5)
    if not _blocked_layout_available(tmp_path):
        return
    before, optimized = _optimized_ops(model, tmp_path), _optimized_ops(rewritten, tmp_path)
    assert optimized[("com.microsoft.nchwc", "Concat")] + optimized[("", "Concat")] == 0
    outputs = [k for k in set(optimized) | set(before) if k[1] == "ReorderOutput"]
    left = sum(optimized[k] for k in outputs) - sum(before[k] for k in outputs)
    # The Relu part stays blocked; Neg parts leave as before, now without the Concat.
    assert left == (-1 if "Relu" in activations else 0)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"widths": (8, 16)}, "a part does not fill whole channel blocks"),
        ({"other_reader": "MaxPool"}, "the Concat is also read by a MaxPool"),
        ({"as_output": True}, "the Concat is a graph output"),
        ({"widths": (16, 16), "group": 2}, "a grouped convolution reads the Concat"),
    ],
)
def test_a_concat_that_must_stay_declines_with_the_reason(kwargs, reason):
    report, rewritten = _rewrite(_concat_then_conv(**kwargs))
    assert not _concat_fired(report)
    assert len(_concat_declined(report)) == 1
    assert reason in _concat_declined(report)[0]
    assert "Concat" in [n.op_type for n in rewritten.graph.node]


def test_two_reading_convs_added_together_share_one_sum_of_parts():
    """Add(Conv_0(cat), Conv_1(cat)): the Add is each Conv's residual; one of them takes it."""
    rng = np.random.default_rng(4)
    constants = {
        "wa": (rng.standard_normal([16, 16, 3, 3]) * 0.3).astype(np.float32),
        "wb": (rng.standard_normal([16, 16, 3, 3]) * 0.3).astype(np.float32),
        "w0": (rng.standard_normal([32, 32, 1, 1]) * 0.2).astype(np.float32),
        "w1": (rng.standard_normal([32, 32, 1, 1]) * 0.2).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1] * 4),
        helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1] * 4),
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w0"], ["c0"]),
        helper.make_node("Conv", ["cat", "w1"], ["c1"]),
        helper.make_node("Add", ["c0", "c1"], ["y"]),
    ]
    model = _model(nodes, constants, [1, 16, 10, 12])
    report, rewritten = _rewrite(model)
    assert _concat_fired(report) == ["2 parts into 2 convolution(s)"]
    ops = collections.Counter(n.op_type for n in rewritten.graph.node)
    assert ops["Concat"] == 0
    assert ops["Add"] == 3  # two parts' sums, the residual starting one of them
    _close_at_both_levels(rewritten, model, _feeds(model, special=False), rtol=1e-5)


def test_a_concat_not_read_by_a_conv_or_not_over_channels_is_not_a_match():
    rng = np.random.default_rng(3)
    constants = {"w": rng.standard_normal([16, 16, 1, 1]).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["wide"], axis=3),
        helper.make_node("MaxPool", ["wide"], ["y"], kernel_shape=[1, 1]),
    ]
    report, rewritten = _rewrite(_model(nodes, constants, [1, 16, 6, 6]))
    assert not _concat_fired(report)
    assert not _concat_declined(report)
    assert "Concat" in [n.op_type for n in rewritten.graph.node]


# -- resize-sizes-as-scales -------------------------------------------------------------------


def _resize_by_sizes(
    channels=16,
    mode="linear",
    coordinates="align_corners",
    factors=(2, 3),
    axes=True,
    producer="Conv",
    nearest_mode="floor",
):
    """x -> ``producer`` (a 1x1 Conv: blocked; or Neg: not) -> Resize by output sizes
    (``axes`` [2, 3], else all four sizes) -> 1x1 Conv."""
    rng = np.random.default_rng(11)
    height, width = 40, 34  # above resize-as-matmul's sides
    out = [height * factors[0], width * factors[1]]
    constants = {
        "w1": (rng.standard_normal([channels, 16, 1, 1]) * 0.3).astype(np.float32),
        "w2": (rng.standard_normal([16, channels, 1, 1]) * 0.3).astype(np.float32),
        "sizes": np.asarray(out if axes else [1, channels, *out], np.int64),
    }
    first = (
        helper.make_node("Conv", ["x", "w1"], ["a"])
        if producer == "Conv"
        else helper.make_node("Neg", ["x"], ["a"])
    )
    attributes = {"mode": mode, "coordinate_transformation_mode": coordinates}
    if mode == "nearest":
        attributes["nearest_mode"] = nearest_mode
    if axes:
        attributes["axes"] = [2, 3]
    nodes = [
        first,
        helper.make_node("Resize", ["a", "", "", "sizes"], ["b"], name="up", **attributes),
        helper.make_node("Conv", ["b", "w2"], ["y"]),
    ]
    shape = [1, 16 if producer == "Conv" else channels, height, width]
    return _model(nodes, constants, shape)


def _resize_fired(report) -> list[str]:
    return [f.detail for f in report.fired if f.rewrite == "resize-sizes-as-scales"]


@pytest.mark.parametrize(
    ("kwargs", "detail"),
    [
        ({}, "linear x2x3"),
        ({"coordinates": "half_pixel", "factors": (2, 2)}, "linear x2x2"),
        ({"coordinates": "asymmetric", "channels": 24}, "linear x2x3"),
        ({"mode": "nearest", "coordinates": "asymmetric", "factors": (3, 1)}, "nearest x3x1"),
    ],
)
def test_an_upsampling_by_sizes_on_a_blocked_tensor_takes_scales(kwargs, detail, tmp_path):
    model = _resize_by_sizes(**kwargs)
    report, rewritten = _rewrite(model)
    assert _resize_fired(report) == [detail]
    resize = next(n for n in rewritten.graph.node if n.op_type == "Resize")
    assert len(resize.input) == 3
    assert resize.input[2]
    assert "axes" not in [a.name for a in resize.attribute]
    feeds = _feeds(model, special=False)
    # The same coordinates: the same bits in onnxruntime's NCHW kernel.
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    _same_values(_run(model, level, feeds), _run(rewritten, level, feeds))
    _close_at_both_levels(rewritten, model, feeds, rtol=1e-5)
    if _blocked_layout_available(tmp_path):

        def reorders(ops):
            return sum(n for (_, op), n in ops.items() if op.startswith("Reorder"))

        before, optimized = _optimized_ops(model, tmp_path), _optimized_ops(rewritten, tmp_path)
        assert optimized[("com.microsoft.nchwc", "Upsample")] == 1, optimized
        # The reorders out of and back into the blocked layout around the Resize are gone.
        assert reorders(optimized) == reorders(before) - 2, (before, optimized)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"channels": 4}, "fewer channels than a block"),  # 8-15 get padded to 16
        ({"producer": "Neg"}, "not in onnxruntime's blocked layout"),
    ],
)
def test_an_upsampling_that_would_not_gain_declines_with_the_reason(kwargs, reason):
    report, rewritten = _rewrite(_resize_by_sizes(**kwargs))
    assert not _resize_fired(report)
    declined = [d.reason for d in report.declined if d.rewrite == "resize-sizes-as-scales"]
    assert len(declined) == 1
    assert reason in declined[0]
    resize = next(n for n in rewritten.graph.node if n.op_type == "Resize")
    assert resize.input[3] == "sizes"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"coordinates": "pytorch_half_pixel"},  # no blocked kernel for it
        {"mode": "nearest", "coordinates": "asymmetric", "nearest_mode": "round_prefer_floor"},
        {"mode": "cubic"},
        {"axes": False},  # sizes of all four axes: onnxruntime blocks it as it is
    ],
)
def test_resizes_onnxruntime_does_not_block_are_left_alone(kwargs):
    report, _ = _rewrite(_resize_by_sizes(**kwargs))
    assert not _resize_fired(report)
    assert not [d for d in report.declined if d.rewrite == "resize-sizes-as-scales"]


def _resize_by_own_shape(spelling="float", factors=(1, 1, 2, 4), shared=False, dynamic=True):
    """x (a dynamic batch) -> 1x1 Conv -> Resize, nearest asymmetric floor, to sizes
    computed from its input's own shape times ``factors`` (OpenVINO's Paddle frontend)."""
    rng = np.random.default_rng(12)
    constants = {"w": (rng.standard_normal([16, 16, 1, 1]) * 0.3).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"]),
        helper.make_node("Shape", ["a"], ["shape"]),
    ]
    if spelling == "float":
        constants["f"] = np.asarray(factors, np.float32)
        nodes += [
            helper.make_node("Cast", ["shape"], ["shape_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["shape_f", "f"], ["sizes_f"]),
            helper.make_node("Cast", ["sizes_f"], ["sizes"], to=TensorProto.INT64),
        ]
    else:
        constants["f"] = np.asarray(factors, np.int64)
        nodes.append(helper.make_node("Mul", ["f", "shape"], ["sizes"]))
    nodes.append(
        helper.make_node(
            "Resize",
            ["a", "", "", "sizes"],
            ["y"],
            name="up",
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
            axes=[0, 1, 2, 3],
        )
    )
    model = _model(nodes, constants, [1, 16, 6, 5])
    if dynamic:
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    if shared:
        model.graph.output.append(helper.make_tensor_value_info("sizes", TensorProto.INT64, [4]))
    return model


@pytest.mark.parametrize("spelling", ["float", "int64"])
def test_sizes_computed_from_the_inputs_own_shape_become_its_whole_factors(spelling):
    model = _resize_by_own_shape(spelling)
    report, rewritten = _rewrite(model)
    assert _resize_fired(report) == ["nearest x2x4"]
    assert report.fired[-1].exact
    assert [n.op_type for n in rewritten.graph.node] == ["Conv", "Resize"]
    assert onnx.shape_inference.infer_shapes(rewritten).graph.output[0].type.tensor_type.shape
    feeds = {"x": np.random.default_rng(0).standard_normal([3, 16, 6, 5]).astype(np.float32)}
    level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    _same_values(_run(model, level, feeds), _run(rewritten, level, feeds))
    _close_at_both_levels(rewritten, model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"factors": (2, 1, 2, 2)},  # the batch resized too
        {"factors": (1, 1, 1.5, 2)},  # not a whole factor
        {"shared": True},  # the sizes are read elsewhere
    ],
)
def test_sizes_computed_otherwise_are_left_alone(kwargs):
    report, rewritten = _rewrite(_resize_by_own_shape(**kwargs))
    assert not _resize_fired(report)
    assert "Shape" in [n.op_type for n in rewritten.graph.node]
