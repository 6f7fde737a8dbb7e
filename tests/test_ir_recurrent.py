"""LSTM, GRU and RNN cells and sequences against OpenVINO's CPU plugin: every direction,
activation list, clip, per-batch sequence length and GRU bias form; weights as constants and
as run-time inputs."""

from __future__ import annotations

import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset4 as o4  # noqa: E402
import openvino.opset5 as o5  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
N, T, INPUT, H = 2, 4, 3, 5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {
    "LSTM": ["sigmoid", "tanh", "tanh"],
    "GRU": ["sigmoid", "tanh"],
    "RNN": ["tanh"],
}
TOLERANCE = {"atol": 2e-5, "rtol": 2e-5}

COVERED_LAYERS = {
    ("LSTMCell", "opset1"),
    ("LSTMCell", "opset4"),
    ("GRUCell", "opset3"),
    ("RNNCell", "opset1"),
    ("RNNCell", "opset3"),
    ("LSTMSequence", "opset1"),
    ("LSTMSequence", "opset5"),
    ("GRUSequence", "opset5"),
    ("RNNSequence", "opset5"),
}


def weights(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(F32)


def sequence_weights(family, dirs, lbr=False, seed=0):
    gates = GATES[family]
    bias_rows = (gates + 1 if lbr else gates) * H
    return (
        weights([dirs, gates * H, INPUT], seed),
        weights([dirs, gates * H, H], seed + 1),
        weights([dirs, bias_rows], seed + 2),
    )


def build_sequence(family, direction, lengths, *, activations=None, clip=0.0, lbr=False):
    dirs = 2 if direction == "bidirectional" else 1
    w, r, b = sequence_weights(family, dirs, lbr)
    extra = {"activations": activations} if activations else {}

    def build(x, h, *rest):
        seq = o1.constant(np.asarray(lengths, np.int32))
        if family == "LSTM":
            return o5.lstm_sequence(
                x, h, rest[0], seq, w, r, b, H, direction, clip=clip, **extra
            ).outputs()
        if family == "GRU":
            return o5.gru_sequence(
                x, h, seq, w, r, b, H, direction, clip=clip, linear_before_reset=lbr, **extra
            ).outputs()
        return o5.rnn_sequence(x, h, seq, w, r, b, H, direction, clip=clip, **extra).outputs()

    shapes = [[N, T, INPUT], [N, dirs, H]] + ([[N, dirs, H]] if family == "LSTM" else [])
    return build, shapes


@pytest.mark.parametrize("family", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_matches_openvino(tmp_path, family, direction):
    build, shapes = build_sequence(family, direction, [T, T])
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("family", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_with_shorter_lengths_per_batch(tmp_path, family, direction):
    build, shapes = build_sequence(family, direction, [T - 2, T])
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize(
    ("family", "activations"),
    [
        ("LSTM", ["tanh", "relu", "sigmoid"]),
        ("LSTM", ["relu", "relu", "relu"]),
        ("GRU", ["tanh", "relu"]),
        ("GRU", ["sigmoid", "sigmoid"]),
        ("RNN", ["relu"]),
        ("RNN", ["sigmoid"]),
    ],
)
def test_sequence_activations_map_exactly(tmp_path, family, activations):
    build, shapes = build_sequence(family, "bidirectional", [T, T - 1], activations=activations)
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("family", ["LSTM", "GRU", "RNN"])
def test_sequence_clip_bounds_gate_inputs(tmp_path, family):
    build, shapes = build_sequence(family, "forward", [T, T], clip=0.3)
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_sequence_linear_before_reset(tmp_path, direction):
    build, shapes = build_sequence("GRU", direction, [T, T - 1], lbr=True)
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, **TOLERANCE)


def test_sequence_weights_computed_at_run_time(tmp_path):
    """Weights and bias that arrive as inputs are reordered by Gather/Concat in the graph."""
    w, r, b = sequence_weights("LSTM", 1)

    def build(x, h, c, wi, ri, bi, lengths):
        return o5.lstm_sequence(x, h, c, lengths, wi, ri, bi, H, "forward").outputs()

    shapes = [[N, T, INPUT], [N, 1, H], [N, 1, H], list(w.shape), list(r.shape), list(b.shape), [N]]
    dtypes = [F32] * 6 + [np.int64]
    feeds = {
        "in0": weights([N, T, INPUT], 7),
        "in1": weights([N, 1, H], 8),
        "in2": weights([N, 1, H], 9),
        "in3": w,
        "in4": r,
        "in5": b,
        "in6": np.asarray([T, 1], np.int64),
    }
    pairs, _ = run_both(tmp_path, build, shapes, dtypes, feeds=feeds)
    assert_close(pairs, **TOLERANCE)


def test_gru_linear_before_reset_bias_at_run_time(tmp_path):
    w, r, b = sequence_weights("GRU", 2, lbr=True)

    def build(x, h, bi):
        seq = o1.constant(np.asarray([T, T], np.int32))
        return o5.gru_sequence(
            x, h, seq, w, r, bi, H, "bidirectional", linear_before_reset=True
        ).outputs()

    feeds = {"in0": weights([N, T, INPUT], 3), "in1": weights([N, 2, H], 4), "in2": b}
    pairs, _ = run_both(tmp_path, build, [[N, T, INPUT], [N, 2, H], list(b.shape)], feeds=feeds)
    assert_close(pairs, **TOLERANCE)


CELLS = {
    "LSTMCell-1": (o1.lstm_cell, "LSTM"),
    "LSTMCell-4": (o4.lstm_cell, "LSTM"),
    "GRUCell-3": (o3.gru_cell, "GRU"),
    "RNNCell-3": (o3.rnn_cell, "RNN"),
}


@pytest.mark.parametrize("name", list(CELLS))
@pytest.mark.parametrize("clip", [0.0, 0.4])
def test_cell_matches_openvino(tmp_path, name, clip):
    make, family = CELLS[name]
    gates = GATES[family]
    w, r, b = weights([gates * H, INPUT], 0), weights([gates * H, H], 1), weights([gates * H], 2)

    def build(x, h, *rest):
        acts = DEFAULT_ACTIVATIONS[family]
        return make(x, h, *rest, w, r, b, H, acts, [], [], clip).outputs()

    shapes = [[N, INPUT], [N, H]] + ([[N, H]] if family == "LSTM" else [])
    pairs, _ = run_both(tmp_path, build, shapes)
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("lbr", [False, True])
def test_gru_cell_linear_before_reset(tmp_path, lbr):
    w, r = weights([3 * H, INPUT], 0), weights([3 * H, H], 1)
    b = weights([(4 if lbr else 3) * H], 2)

    def build(x, h):
        return o3.gru_cell(
            x, h, w, r, b, H, ["tanh", "sigmoid"], [], [], 0.0, linear_before_reset=lbr
        )

    pairs, _ = run_both(tmp_path, build, [[N, INPUT], [N, H]])
    assert_close(pairs, **TOLERANCE)


def test_converted_sequence_loads_in_onnxruntime_at_lowest_opset(tmp_path):
    build, shapes = build_sequence("LSTM", "bidirectional", [T, 2])
    params = [o1.parameter(s, F32, name=f"in{i}") for i, s in enumerate(shapes)]
    model = ov.Model(build(*params), params)
    xml = tmp_path / "model.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml, opset=13)
    onnx.checker.check_model(converted, full_check=True)
    assert {n.op_type for n in converted.graph.node} >= {"LSTM", "Transpose"}


def _saved_sequence(tmp_path, family="LSTM"):
    build, shapes = build_sequence(family, "forward", [T, T])
    params = [o1.parameter(s, F32, name=f"in{i}") for i, s in enumerate(shapes)]
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(build(*params), params), xml, compress_to_fp16=False)
    return xml


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ('activations="sigmoid, tanh, tanh"', 'activations="sigmoid, gelu, tanh"', "activations"),
        ('activations="sigmoid, tanh, tanh"', 'activations="sigmoid, tanh"', "activations"),
        ('direction="forward"', 'direction="sideways"', "direction"),
        ('hidden_size="5"', 'hidden_size="0"', "hidden_size"),
        ('clip="0"', 'clip="-1"', "clip"),
        ('hidden_size="5"', 'hidden_size="4"', "hidden_size=4"),
    ],
)
def test_invalid_attribute_is_refused_by_name(tmp_path, old, new, named):
    xml = _saved_sequence(tmp_path)
    text = xml.read_text()
    assert old in text
    xml.write_text(text.replace(old, new))
    with pytest.raises(B2SError, match=named):
        b2s_onnx.convert_ir(xml)


def compare_saved(xml, feeds, reference_xml=None):
    """Converts ``xml`` and compares it with OpenVINO running ``reference_xml`` (default:
    the same file)."""
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    ours = run_onnxruntime(converted, feeds)
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(reference_xml or xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    theirs = compiled(feeds)
    return [
        (ours[next(n for n in ours if n in port.get_names())], np.asarray(theirs[port]))
        for port in compiled.outputs
    ]


def _set_peepholes(xml, values):
    """Writes ``values`` over the one f32 constant of their shape in the model's .bin."""
    shape = ",".join(map(str, values.shape))
    for data in ET.parse(xml).getroot().iter("data"):
        if data.get("shape", "").replace(" ", "") == shape and data.get("offset"):
            offset = int(data.get("offset"))
            blob = bytearray(xml.with_suffix(".bin").read_bytes())
            blob[offset : offset + values.nbytes] = values.tobytes()
            xml.with_suffix(".bin").write_bytes(bytes(blob))
            return
    raise AssertionError(f"no constant of shape {shape}")


@pytest.mark.parametrize(
    ("key", "value"),
    [("input_forget", "false"), ("input_forget", "true"), ("weights_format", "icof")],
)
def test_lstm_cell_v1_peepholes_and_ignored_attributes(tmp_path, key, value):
    """LSTMCell-1's peepholes (OpenVINO's Python API writes zeros) get values in the .bin;
    input_forget and weights_format are ignored, as OpenVINO's CPU plugin ignores them."""
    w, r, b = weights([4 * H, INPUT], 0), weights([4 * H, H], 1), weights([4 * H], 2)
    params = [
        o1.parameter(s, F32, name=n) for n, s in (("x", [N, INPUT]), ("h", [N, H]), ("c", [N, H]))
    ]
    cell = o1.lstm_cell(*params, w, r, b, H, ["sigmoid", "tanh", "tanh"], [], [], 0.0)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(cell.outputs(), params), xml, compress_to_fp16=False)
    _set_peepholes(xml, weights([3 * H], 5))
    xml.write_text(re.sub(f'{key}="[a-z]+"', f'{key}="{value}"', xml.read_text()))
    feeds = {"x": weights([N, INPUT], 6), "h": weights([N, H], 7), "c": weights([N, H], 8)}
    assert_close(compare_saved(xml, feeds), **TOLERANCE)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_sequence_v1_computes_as_v5(tmp_path, direction):
    """OpenVINO 2026 no longer reads LSTMSequence-1, whose spec is LSTMSequence-5's plus
    optional peepholes; the same layer relabelled opset1 must give the v5 outputs."""
    build, shapes = build_sequence("LSTM", direction, [T, T - 2])
    params = [o1.parameter(s, F32, name=f"in{i}") for i, s in enumerate(shapes)]
    reference = tmp_path / "v5.xml"
    ov.save_model(ov.Model(build(*params), params), reference, compress_to_fp16=False)
    relabelled = tmp_path / "v1.xml"
    text = reference.read_text()
    assert 'type="LSTMSequence" version="opset5"' in text
    relabelled.write_text(
        text.replace('type="LSTMSequence" version="opset5"', 'type="LSTMSequence" version="opset1"')
    )
    relabelled.with_suffix(".bin").write_bytes(reference.with_suffix(".bin").read_bytes())
    feeds = {f"in{i}": weights(s, 10 + i) for i, s in enumerate(shapes)}
    assert_close(compare_saved(relabelled, feeds, reference), **TOLERANCE)


def onnx_to_ir(tmp_path, graph, name="source"):
    """What OpenVINO's own converter writes for an ONNX graph, saved as IR."""
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    source = tmp_path / f"{name}.onnx"
    onnx.save(model, source)
    xml = tmp_path / f"{name}.xml"
    ov.save_model(ov.convert_model(str(source)), xml, compress_to_fp16=False)
    return xml


@pytest.mark.parametrize(
    ("op", "gates", "extra"),
    [
        ("LSTM", 4, {"direction": "bidirectional"}),
        ("GRU", 3, {"direction": "reverse", "linear_before_reset": 1}),
        ("GRU", 3, {"direction": "bidirectional", "linear_before_reset": 0}),
        ("RNN", 1, {"direction": "forward", "activations": ["Relu"]}),
    ],
)
def test_openvino_converter_output_with_dynamic_dims(tmp_path, op, gates, extra):
    """ONNX recurrent ops through OpenVINO's converter (Sequence ops between ShapeOf and
    Transpose plumbing), time and batch dims left dynamic."""
    dirs = 2 if extra["direction"] == "bidirectional" else 1
    initializers = [
        numpy_helper.from_array(weights([dirs, gates * H, INPUT], 0), "W"),
        numpy_helper.from_array(weights([dirs, gates * H, H], 1), "R"),
        numpy_helper.from_array(weights([dirs, 2 * gates * H], 2), "B"),
    ]
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    graph = oh.make_graph(
        [oh.make_node(op, ["X", "W", "R", "B"], outputs, hidden_size=H, **extra)],
        "recurrent",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "N", INPUT])],
        [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializers,
    )
    xml = onnx_to_ir(tmp_path, graph)
    for steps, batch in ((T, N), (T + 2, 1)):
        feeds = {"X": weights([steps, batch, INPUT], steps)}
        assert_close(compare_saved(xml, feeds), **TOLERANCE)


def test_fp16_compressed_sequence_computes_in_f32(tmp_path):
    build, shapes = build_sequence("LSTM", "bidirectional", [T, T - 1])
    pairs, _ = run_both(tmp_path, build, shapes, compress=True)
    assert_close(pairs, atol=1e-3, rtol=1e-3)


def test_rnn_cell_labelled_opset3_reads_as_opset1(tmp_path):
    """OpenVINO writes RNNCell as opset1 (its class predates opset3, where the spec lists
    it) and reads either label; both convert."""
    w, r, b = weights([H, INPUT], 0), weights([H, H], 1), weights([H], 2)
    params = [o3.parameter([N, INPUT], F32, name="x"), o3.parameter([N, H], F32, name="h")]
    cell = o3.rnn_cell(*params, w, r, b, H, ["relu"], [], [], 0.0)
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([cell], params), xml, compress_to_fp16=False)
    text = xml.read_text()
    assert 'type="RNNCell" version="opset1"' in text
    xml.write_text(
        text.replace('type="RNNCell" version="opset1"', 'type="RNNCell" version="opset3"')
    )
    feeds = {"x": weights([N, INPUT], 3), "h": weights([N, H], 4)}
    assert_close(compare_saved(xml, feeds), **TOLERANCE)


ACTIVATION_NAMES = ["sigmoid", "tanh", "relu"]


@st.composite
def sequence_cases(draw):
    family = draw(st.sampled_from(["LSTM", "GRU", "RNN"]))
    steps = draw(st.integers(1, 5))
    batch = draw(st.integers(1, 3))
    return {
        "family": family,
        "direction": draw(st.sampled_from(["forward", "reverse", "bidirectional"])),
        "steps": steps,
        "batch": batch,
        "hidden": draw(st.integers(1, 6)),
        "inputs": draw(st.integers(1, 4)),
        "lengths": draw(st.lists(st.integers(1, steps), min_size=batch, max_size=batch)),
        "activations": draw(
            st.lists(
                st.sampled_from(ACTIVATION_NAMES),
                min_size=len(DEFAULT_ACTIVATIONS[family]),
                max_size=len(DEFAULT_ACTIVATIONS[family]),
            )
        ),
        "clip": draw(st.sampled_from([0.0, 0.25, 3.0])),
        "lbr": family == "GRU" and draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


@given(case=sequence_cases())
def test_any_sequence_matches_openvino(case):
    """Random sizes, directions, lengths, activations and clips: OpenVINO's outputs."""
    family, hidden, dirs = (
        case["family"],
        case["hidden"],
        1 + (case["direction"] == "bidirectional"),
    )
    gates, seed = GATES[family], case["seed"]
    w = weights([dirs, gates * hidden, case["inputs"]], seed)
    r = weights([dirs, gates * hidden, hidden], seed + 1)
    b = weights([dirs, (gates + case["lbr"]) * hidden], seed + 2)
    shapes = [[case["batch"], case["steps"], case["inputs"]], [case["batch"], dirs, hidden]]
    shapes += [shapes[1]] if family == "LSTM" else []
    params = [o1.parameter(s, F32, name=f"in{i}") for i, s in enumerate(shapes)]
    lengths = o1.constant(np.asarray(case["lengths"], np.int32))
    common = {"activations": case["activations"], "clip": case["clip"]}
    if family == "LSTM":
        node = o5.lstm_sequence(*params, lengths, w, r, b, hidden, case["direction"], **common)
    elif family == "GRU":
        node = o5.gru_sequence(
            *params,
            lengths,
            w,
            r,
            b,
            hidden,
            case["direction"],
            linear_before_reset=case["lbr"],
            **common,
        )
    else:
        node = o5.rnn_sequence(*params, lengths, w, r, b, hidden, case["direction"], **common)
    with tempfile.TemporaryDirectory() as folder:
        xml = Path(folder) / "model.xml"
        ov.save_model(ov.Model(node.outputs(), params), xml, compress_to_fp16=False)
        feeds = {f"in{i}": weights(s, seed + 3 + i) for i, s in enumerate(shapes)}
        assert_close(compare_saved(xml, feeds), atol=1e-4, rtol=1e-4)
