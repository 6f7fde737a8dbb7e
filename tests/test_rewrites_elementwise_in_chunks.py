"""`element-wise-in-chunks`: a chain of element-wise ops over one large tensor runs slice
by slice in a Scan, bit for bit as before; what onnxruntime fuses, what is small and what
is read elsewhere stay as they were."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites
from b2s_onnx.rewrites.elementwise_in_chunks import (
    CHUNK_ONE_THREAD,
    CHUNK_SEVERAL,
    ElementwiseInChunks,
    chunk_size,
)
from tests.helpers import (
    assert_same_bits,
    assert_well_formed,
    converted_matches_openvino,
    float_model,
)

NAME = ElementwiseInChunks.name
LARGE = [1, 16, 128, 128]  # 262144 elements: 4 slices at one thread, 1 for several


def _mish_nodes(data: str = "x", out: str = "y") -> list[onnx.NodeProto]:
    """``mish-as-exponentials``' six passes."""
    return [
        helper.make_node("Exp", [data], ["e"]),
        helper.make_node("Add", ["e", "two"], ["e2"]),
        helper.make_node("Mul", ["e", "e2"], ["n"]),
        helper.make_node("Div", ["two", "n"], ["r"]),
        helper.make_node("Add", ["r", "one"], ["d"]),
        helper.make_node("Div", [data, "d"], [out], name="mish"),
    ]


SCALARS = {"two": np.float32(2), "one": np.float32(1)}


def _chunked(model: onnx.ModelProto, threads: int | None = 1):
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten, (ElementwiseInChunks(threads),))
    return report, rewritten


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        v.name: (
            rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]) * 4
        ).astype(np.float32)
        for v in model.graph.input
    }


def _assert_same_outputs(model: onnx.ModelProto, rewritten: onnx.ModelProto) -> None:
    """Bit for bit, in sessions of one and of two intra-op threads."""
    assert_well_formed(rewritten)
    feeds = _feeds(model)
    for threads in (1, 2):
        before = run_onnxruntime(model, feeds, threads)
        after = run_onnxruntime(rewritten, feeds, threads)
        for name, value in before.items():
            assert_same_bits(after[name], value)


@pytest.mark.parametrize(
    ("threads", "shape", "slices"),
    [
        (1, LARGE, 4),
        (None, [1, 32, 208, 208], 8),
        (2, [1, 32, 208, 208], 8),
        (4, [1, 32, 256, 256], 4),
    ],
    ids=["one-thread", "several", "two", "four"],
)
def test_mish_over_a_large_tensor_runs_in_slices_bit_for_bit(threads, shape, slices):
    model = float_model(_mish_nodes(), SCALARS, shape)
    report, rewritten = _chunked(model, threads)
    assert [f.rewrite for f in report.fired] == [NAME]
    assert f"6 ops over {shape} in {slices} slices" in report.fired[0].detail
    assert [n.op_type for n in rewritten.graph.node] == ["Reshape", "Scan", "Reshape"]
    scan = rewritten.graph.node[1]
    body = scan.attribute[0].g
    assert [n.op_type for n in body.node] == ["Exp", "Add", "Mul", "Div", "Add", "Div"]
    size = math.prod(shape) // slices
    assert [d.dim_value for d in body.input[0].type.tensor_type.shape.dim] == [size]
    assert set(report.absorbed) == {"e", "e2", "n", "r", "d"}
    assert set(report.absorbed.values()) == {"y"}
    _assert_same_outputs(model, rewritten)


def test_a_chain_reading_two_tensors_scans_both():
    """TensorFlow's spelled PReLU on x, plus y: two inputs, both sliced alike."""
    nodes = [
        helper.make_node("Relu", ["x"], ["pos"]),
        helper.make_node("Neg", ["x"], ["negx"]),
        helper.make_node("Relu", ["negx"], ["neg"]),
        helper.make_node("Mul", ["c", "neg"], ["scaled"]),
        helper.make_node("Sub", ["pos", "scaled"], ["p"]),
        helper.make_node("Mul", ["p", "x2"], ["y"], name="gate"),
    ]
    model = float_model(nodes, {"c": np.float32(-0.25)}, LARGE)
    model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, LARGE))
    report, rewritten = _chunked(model)
    assert [f.rewrite for f in report.fired] == [NAME]
    scan = rewritten.graph.node[[n.op_type for n in rewritten.graph.node].index("Scan")]
    assert len(scan.input) == 2
    _assert_same_outputs(model, rewritten)


def test_small_tensors_and_short_chains_are_left_whole():
    small = float_model(_mish_nodes(), SCALARS, [1, 16, 64, 64])  # 65536: one slice
    assert not _chunked(small, 1)[0].fired
    assert not _chunked(float_model(_mish_nodes(), SCALARS, LARGE), None)[0].fired
    # 128K elements per thread: four threads want four slices of 512K.
    assert not _chunked(float_model(_mish_nodes(), SCALARS, [1, 32, 208, 208]), 4)[0].fired
    pair = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    assert not _chunked(float_model(pair, {}, LARGE))[0].fired


def test_gelu_spelled_for_onnxruntimes_fusion_is_left_alone():
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["scaled"]),
        helper.make_node("Erf", ["scaled"], ["erf"]),
        helper.make_node("Add", ["erf", "one"], ["shifted"]),
        helper.make_node("Mul", ["x", "shifted"], ["prod"]),
        helper.make_node("Mul", ["prod", "half"], ["y"]),
    ]
    constants = {"sqrt2": np.float32(math.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    report, rewritten = _chunked(float_model(nodes, constants, LARGE))
    assert not report.fired
    assert "Scan" not in [n.op_type for n in rewritten.graph.node]


def _tanh_gelu(c: float = 0.044715) -> onnx.ModelProto:
    """The converter's tanh Gelu (onnxruntime's FastGelu spelling), then a Neg: onnxruntime
    fuses no subgraph whose last node writes a graph output."""
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Mul", ["cube", "c"], ["term"]),
        helper.make_node("Add", ["x", "term"], ["poly"]),
        helper.make_node("Mul", ["poly", "k"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["t"]),
        helper.make_node("Add", ["one", "t"], ["shifted"]),
        helper.make_node("Mul", ["x", "half"], ["halved"]),
        helper.make_node("Mul", ["halved", "shifted"], ["gelu"]),
        helper.make_node("Neg", ["gelu"], ["y"]),
    ]
    constants = {
        "three": np.float32(3),
        "c": np.float32(c),
        "k": np.float32(math.sqrt(2 / math.pi)),
        "one": np.float32(1),
        "half": np.float32(0.5),
    }
    return float_model(nodes, constants, LARGE)


def test_the_tanh_gelu_onnxruntime_fuses_is_left_to_its_fast_gelu(tmp_path):
    """Sliced, the nine passes took 1.14x the fused kernel's time (0.875x the other way)."""
    model = _tanh_gelu()
    report, rewritten = _chunked(model)
    assert not report.fired
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(rewritten.SerializeToString(), options)
    ops = [n.op_type for n in onnx.load(tmp_path / "optimized.onnx").graph.node]
    assert "FastGelu" in ops


def test_a_tanh_gelu_with_other_constants_is_sliced():
    report, rewritten = _chunked(_tanh_gelu(c=0.05))
    assert [f.detail.split(" over")[0] for f in report.fired] == ["9 ops"]
    _assert_same_outputs(_tanh_gelu(c=0.05), rewritten)


def test_an_activation_onnxruntime_folds_into_its_conv_stays_outside():
    weights = np.random.default_rng(1).standard_normal([16, 16, 1, 1]).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"]),
        helper.make_node("Relu", ["conv"], ["act"]),
        helper.make_node("Mul", ["act", "act"], ["sq"]),
        helper.make_node("Add", ["sq", "one"], ["sq1"]),
        helper.make_node("Sqrt", ["sq1"], ["y"], name="norm"),
    ]
    model = float_model(nodes, {"w": weights, "one": np.float32(1)}, LARGE)
    report, rewritten = _chunked(model)
    assert "3 ops" in report.fired[0].detail
    assert [n.op_type for n in rewritten.graph.node] == [
        "Conv",
        "Relu",
        "Reshape",
        "Scan",
        "Reshape",
    ]
    _assert_same_outputs(model, rewritten)


def test_a_value_read_outside_the_chain_ends_it():
    """``n`` is also a graph output: the chain before it and the one after it are each
    too short, so nothing is sliced and ``n`` keeps its name."""
    model = float_model(_mish_nodes(), SCALARS, LARGE)
    model.graph.output.append(helper.make_tensor_value_info("n", TensorProto.FLOAT, LARGE))
    report, rewritten = _chunked(model)
    assert [f.detail.split(" over")[0] for f in report.fired] == ["3 ops", "3 ops"]
    assert "n" in {o for node in rewritten.graph.node for o in node.output}
    _assert_same_outputs(model, rewritten)


def test_a_per_channel_constant_is_not_sliced():
    """A [1, C, 1, 1] operand broadcasts along the flat slices differently: it ends the
    chain, and the three ops after it run sliced."""
    nodes = _mish_nodes(out="m")
    nodes.append(helper.make_node("Mul", ["m", "scale"], ["y"]))
    scale = np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)
    model = float_model(nodes, {**SCALARS, "scale": scale}, LARGE)
    report, rewritten = _chunked(model)
    assert [f.node for f in report.fired] == ["mish"]
    assert [n.op_type for n in rewritten.graph.node][-1] == "Mul"
    _assert_same_outputs(model, rewritten)


def test_one_element_constants_of_the_tensors_rank_become_scalars_in_the_slice():
    """An IR's hard-swish ``x * Clip(x + 3, 0, 6) * 0.1666`` carries its constants as
    [1, 1, 1, 1]: in the rank-1 slice they are scalars, not a lift to rank 4."""
    nodes = [
        helper.make_node("Add", ["x", "three"], ["a"]),
        helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Mul", ["m", "sixth"], ["y"], name="hswish"),
    ]
    ones = [1, 1, 1, 1]
    constants = {
        "three": np.full(ones, 3, np.float32),
        "zero": np.float32(0),
        "six": np.float32(6),
        "sixth": np.full(ones, 1 / 6, np.float32),
    }
    model = float_model(nodes, constants, LARGE)
    report, rewritten = _chunked(model)
    assert [f.node for f in report.fired] == ["hswish"]
    scan = next(n for n in rewritten.graph.node if n.op_type == "Scan")
    assert all(list(t.dims) == [] for t in scan.attribute[0].g.initializer)
    _assert_same_outputs(model, rewritten)


def _prime_above(n: int) -> int:
    candidate = n + 1
    while any(candidate % d == 0 for d in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def test_no_slice_size_tiling_the_tensor_is_declined_with_the_reason():
    total = _prime_above(2 * CHUNK_ONE_THREAD)
    model = float_model(_mish_nodes(), SCALARS, [1, total])
    report, rewritten = _chunked(model)
    assert not report.fired
    assert [d.reason for d in report.declined] == [
        f"no slice of {CHUNK_ONE_THREAD // 2 + 1}..{CHUNK_ONE_THREAD} elements tiles the "
        f"{total} of [1, {total}]"
    ]
    assert "Scan" not in [n.op_type for n in rewritten.graph.node]


def test_opset_8_is_declined():
    model = float_model(_mish_nodes(), SCALARS, LARGE, opset=8)
    report, _ = _chunked(model)
    assert [d.reason for d in report.declined] == ["Scan takes its current form from opset 9"]


def test_a_dynamic_shape_is_left_alone():
    model = float_model(_mish_nodes(), SCALARS, [1, 16, "h", 128])
    assert not _chunked(model)[0].fired


@pytest.mark.parametrize(
    ("total", "target", "expected"),
    [(262144, CHUNK_ONE_THREAD, 65536), (32 * 416 * 416, CHUNK_SEVERAL, 212992), (100, 64, 50)],
)
def test_the_slice_is_the_largest_divisor_up_to_the_target(total, target, expected):
    size = chunk_size(total, target)
    assert size is not None
    assert total % size == 0
    assert size == max(d for d in range(target // 2 + 1, target + 1) if total % d == 0)
    assert size == expected


_OPS = {
    "Exp": lambda x: helper.make_node("Exp", [x], []),
    "Tanh": lambda x: helper.make_node("Tanh", [x], []),
    "Sigmoid": lambda x: helper.make_node("Sigmoid", [x], []),
    "Abs": lambda x: helper.make_node("Abs", [x], []),
    "Neg": lambda x: helper.make_node("Neg", [x], []),
    "Clip": lambda x: helper.make_node("Clip", [x, "lo", "hi"], []),
    "LeakyRelu": lambda x: helper.make_node("LeakyRelu", [x], [], alpha=0.2),
}
_BINARY = ("Add", "Sub", "Mul", "Div", "Min", "Max")


@settings(max_examples=20, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.sampled_from(sorted(_OPS)).map(lambda op: (op, None)),
            st.tuples(st.sampled_from(_BINARY), st.sampled_from(["x", "prev", "half", "two"])),
        ),
        min_size=3,
        max_size=8,
    ),
    shape=st.sampled_from([[1, 8, 128, 160], [2, 3, 211, 211], [1, 200000], [5, 7, 11, 13, 31]]),
    threads=st.sampled_from([1, None]),
)
def test_random_chains_keep_every_bit(steps, shape, threads):
    """Any chain of unary ops and binary ops with x, the previous value or a scalar."""
    nodes, prev = [], "x"
    for i, (op, operand) in enumerate(steps):
        out = "y" if i == len(steps) - 1 else f"t{i}"
        if operand is None:
            node = _OPS[op](prev)
        else:
            other = prev if operand == "prev" else operand
            node = helper.make_node(op, [prev, other], [])
        node.output.append(out)
        node.name = f"n{i}"
        nodes.append(node)
        prev = out
    constants = {
        "half": np.float32(0.5),
        "two": np.float32(2),
        "lo": np.float32(-1.5),
        "hi": np.float32(3),
    }
    used = {name for node in nodes for name in node.input}
    model = float_model(nodes, {k: v for k, v in constants.items() if k in used}, shape)
    report, rewritten = _chunked(model, threads)
    total = math.prod(shape)
    enough = total >= (2 * CHUNK_ONE_THREAD if threads == 1 else 4 * CHUNK_SEVERAL)
    assert bool(report.fired) == (enough and not report.declined)
    _assert_same_outputs(model, rewritten)


def test_a_converted_mish_ir_matches_openvino(tmp_path):
    ov = pytest.importorskip("openvino")
    import openvino.opset13 as ops

    from b2s_onnx.lowering import LoweringOptions

    rng = np.random.default_rng(5)
    data = ops.parameter([1, 8, 96, 96], np.float32, name="image")
    weights = ops.constant((rng.standard_normal([16, 8, 3, 3]) * 0.2).astype(np.float32))
    conv = ops.convolution(data, weights, [1, 1], [1, 1], [1, 1], [1, 1])
    feeds = {"image": (rng.standard_normal([1, 8, 96, 96]) * 3).astype(np.float32)}
    result = converted_matches_openvino(
        ov.Model([ops.mish(conv)], [data]),
        tmp_path,
        feeds,
        rtol=1e-5,
        atol=1e-5,
        options=LoweringOptions(threads=1),
    )
    assert result.rewrites.counts() == {"mish-as-exponentials": 1, NAME: 1}
    assert_well_formed(result.model)
    assert "Scan" in [n.op_type for n in result.model.graph.node]
