"""TensorIterator, Loop and If against OpenVINO's CPU plugin: bodies convert recursively
(data-movement ops inside them lowered too), port maps slice, carry and concatenate."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both
from tests.test_ir_recurrent import compare_saved, onnx_to_ir

ov = pytest.importorskip("openvino")
import openvino.opset4 as o4  # noqa: E402
import openvino.opset8 as o8  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
N, T, C = 2, 3, 4
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}

COVERED_LAYERS = {("TensorIterator", "opset1"), ("Loop", "opset5"), ("If", "opset8")}


def matrix(seed):
    return o8.constant((np.random.default_rng(seed).standard_normal([C, C]) * 0.5).astype(F32))


def recurrent_body():
    """h' = tanh(x_t W + h R): the body OpenVINO's converters write for a simple RNN."""
    x_t = o8.parameter([N, 1, C], F32, name="x_t")
    h = o8.parameter([N, C], F32, name="h")
    step = o8.squeeze(x_t, o8.constant(np.asarray([1])))
    new = o8.tanh(
        o8.add(o8.matmul(step, matrix(0), False, False), o8.matmul(h, matrix(1), False, False))
    )
    stacked = o8.unsqueeze(new, o8.constant(np.asarray([1])))
    return ov.Model([new, stacked], [x_t, h]), x_t, h


@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_iterator_slices_carries_and_concatenates(tmp_path, reverse):
    def build(x, h0):
        body, x_t, h = recurrent_body()
        ti = o8.tensor_iterator()
        ti.set_body(body)
        start, stride, end = (-1, -1, 0) if reverse else (0, 1, -1)
        ti.set_sliced_input(x_t, x.output(0), start, stride, 1, end, 1)
        ti.set_merged_input(h, h0.output(0), body.outputs[0])
        return [
            ti.get_iter_value(body.outputs[0], -1),
            ti.get_concatenated_slices(body.outputs[1], start, stride, 1, end, 1),
        ]

    pairs, model = run_both(tmp_path, build, [[N, T, C], [N, C]])
    assert_close(pairs, **TOLERANCE)
    assert [n.op_type for n in model.graph.node].count("Loop") == 1


@pytest.mark.parametrize(("trip_count", "stop_after"), [(4, 10), (6, 3), (-1, 2)])
def test_loop_trip_count_condition_and_iteration_number(tmp_path, trip_count, stop_after):
    def build(x):
        i = o8.parameter([], np.int64, name="i")
        acc = o8.parameter([N, C], F32, name="acc")
        new = o8.add(o8.multiply(acc, o8.constant(F32(0.5))), o8.convert(i, "f32"))
        keep_going = o8.less(i, o8.constant(np.int64(stop_after)))
        stacked = o8.unsqueeze(new, o8.constant(np.asarray([0])))
        body = ov.Model([keep_going, new, stacked], [i, acc])
        loop = o8.loop(o8.constant(np.int64(trip_count)), o8.constant(True))
        loop.set_function(body)
        loop.set_special_body_ports([0, 0])
        loop.set_merged_input(acc, x.output(0), body.outputs[1])
        return [
            loop.get_iter_value(body.outputs[1], -1),
            loop.get_concatenated_slices(body.outputs[2], 0, 1, 1, -1, 0),
        ]

    pairs, _ = run_both(tmp_path, build, [[N, C]])
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("trip_count", [-1, 2, 9])
def test_loop_trip_count_given_at_run_time(tmp_path, trip_count):
    """A negative run-time trip count means no bound, as OpenVINO's -1 does."""

    def build(x, trips):
        i = o8.parameter([], np.int64, name="i")
        acc = o8.parameter([N, C], F32, name="acc")
        new = o8.add(acc, o8.convert(i, "f32"))
        body = ov.Model([o8.less(i, o8.constant(np.int64(4))), new], [i, acc])
        loop = o8.loop(trips, o8.constant(True))
        loop.set_function(body)
        loop.set_special_body_ports([0, 0])
        loop.set_merged_input(acc, x.output(0), body.outputs[1])
        return [loop.get_iter_value(body.outputs[1], -1)]

    feeds = {"in0": np.ones([N, C], F32), "in1": np.asarray(trip_count, np.int64)}
    pairs, _ = run_both(tmp_path, build, [[N, C], []], [F32, np.int64], feeds=feeds)
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("condition", [True, False])
def test_if_runs_the_chosen_branch_with_data_movement_inside(tmp_path, condition):
    def build(a, b):
        then_a = o8.parameter([1, 4, 2, 2], F32, name="then_a")
        then_b = o8.parameter([1], F32, name="then_b")
        then_body = ov.Model(
            [o8.depth_to_space(o8.add(then_a, then_b), "blocks_first", 2)], [then_a, then_b]
        )
        else_a = o8.parameter([1, 4, 2, 2], F32, name="else_a")
        else_body = ov.Model(
            [o8.depth_to_space(o8.multiply(else_a, o8.constant(F32(2))), "depth_first", 2)],
            [else_a],
        )
        branch = o8.if_op(o8.constant(condition))
        branch.set_then_body(then_body)
        branch.set_else_body(else_body)
        branch.set_input(a.output(0), then_a, else_a)
        branch.set_input(b.output(0), then_b, None)
        return [branch.set_output(then_body.results[0], else_body.results[0])]

    pairs, model = run_both(tmp_path, build, [[1, 4, 2, 2], [1]])
    assert_close(pairs, exact=True)
    assert not any(n.domain for n in model.graph.node)


@pytest.mark.parametrize("hidden", [3, 128])
def test_tensor_iterator_around_an_lstm_cell(tmp_path, hidden):
    """What OpenVINO's converters write for a Keras/TensorFlow LSTM: a TensorIterator over
    time whose body is an LSTMCell, with the hidden and cell states on back edges. With
    128 units the recurrence weights (256 KiB) are large enough to join the model late,
    which bodies once lost (an invalid model)."""
    rng = np.random.default_rng(4)

    def init(shape):
        return (rng.standard_normal(shape) * 0.5).astype(F32)

    def build(x, h0, c0):
        x_t = o8.parameter([N, 1, C], F32, name="x_t")
        h = o8.parameter([N, hidden], F32, name="h")
        cell_state = o8.parameter([N, hidden], F32, name="c")
        step = o8.squeeze(x_t, o8.constant(np.asarray([1])))
        cell = o4.lstm_cell(
            step,
            h,
            cell_state,
            init([4 * hidden, C]),
            init([4 * hidden, hidden]),
            init([4 * hidden]),
            hidden,
        )
        stacked = o8.unsqueeze(cell.output(0), o8.constant(np.asarray([1])))
        body = ov.Model([cell.output(0), cell.output(1), stacked.output(0)], [x_t, h, cell_state])
        ti = o8.tensor_iterator()
        ti.set_body(body)
        ti.set_sliced_input(x_t, x.output(0), 0, 1, 1, -1, 1)
        ti.set_merged_input(h, h0.output(0), body.outputs[0])
        ti.set_merged_input(cell_state, c0.output(0), body.outputs[1])
        return [
            ti.get_concatenated_slices(body.outputs[2], 0, 1, 1, -1, 1),
            ti.get_iter_value(body.outputs[0], -1),
            ti.get_iter_value(body.outputs[1], -1),
        ]

    pairs, _ = run_both(tmp_path, build, [[N, T, C], [N, hidden], [N, hidden]])
    assert_close(pairs, **TOLERANCE)


def test_tensor_iterator_part_size_invariant_input_and_last_scan_value(tmp_path):
    """Two time steps per iteration, a weight fed as an invariant input, and a last-value
    output that no back edge carries (taken from the scan of every iteration)."""

    def build(x, h0, scale):
        x_t = o8.parameter([N, 2, C], F32, name="x_t")
        h = o8.parameter([N, C], F32, name="h")
        k = o8.parameter([C], F32, name="k")
        pair = o8.reduce_sum(x_t, o8.constant(np.asarray([1])), False)
        new = o8.tanh(o8.add(o8.multiply(pair, k), o8.matmul(h, matrix(2), False, False)))
        doubled = o8.multiply(new, o8.constant(F32(2)))
        body = ov.Model([new, doubled], [x_t, h, k])
        ti = o8.tensor_iterator()
        ti.set_body(body)
        ti.set_sliced_input(x_t, x.output(0), 0, 2, 2, -1, 1)
        ti.set_merged_input(h, h0.output(0), body.outputs[0])
        ti.set_invariant_input(k, scale.output(0))
        return [ti.get_iter_value(body.outputs[1], -1), ti.get_iter_value(body.outputs[0], -1)]

    pairs, _ = run_both(tmp_path, build, [[N, 6, C], [N, C], [C]])
    assert_close(pairs, **TOLERANCE)


@pytest.mark.parametrize("compress", [False, True])
def test_loop_slices_its_input_and_numbers_iterations_in_i32(tmp_path, compress):
    """Loop-5 with a sliced input, an i32 current-iteration parameter and f16-compressed
    weights inside the body (their decompression folds inside the body)."""

    def build(x):
        i = o8.parameter([1], np.int32, name="i")
        x_t = o8.parameter([1, C], F32, name="x_t")
        acc = o8.parameter([1, C], F32, name="acc")
        step = o8.matmul(o8.add(x_t, o8.convert(i, "f32")), matrix(3), False, False)
        new = o8.add(acc, step)
        body = ov.Model([o8.constant(True), new], [i, x_t, acc])
        loop = o8.loop(o8.constant(np.int64(T)), o8.constant(True))
        loop.set_function(body)
        loop.set_special_body_ports([0, 0])
        loop.set_sliced_input(x_t, x.output(0), 0, 1, 1, -1, 0)
        loop.set_merged_input(acc, o8.constant(np.zeros([1, C], F32)).output(0), body.outputs[1])
        return [
            loop.get_iter_value(body.outputs[1], -1),
            loop.get_concatenated_slices(body.outputs[1], 0, 1, 1, -1, 0),
        ]

    pairs, _ = run_both(tmp_path, build, [[T, C]], compress=compress)
    assert_close(pairs, atol=1e-4 if compress else 1e-5, rtol=1e-5)


def _saved_tensor_iterator(tmp_path):
    def build(x, h0):
        body, x_t, h = recurrent_body()
        ti = o8.tensor_iterator()
        ti.set_body(body)
        ti.set_sliced_input(x_t, x.output(0), 0, 1, 1, -1, 1)
        ti.set_merged_input(h, h0.output(0), body.outputs[0])
        return [ti.get_iter_value(body.outputs[0], -1)]

    params = [o8.parameter([N, T, C], F32, name="x"), o8.parameter([N, C], F32, name="h0")]
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(build(*params), params), xml, compress_to_fp16=False)
    return xml


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ('stride="1" part_size="1"', 'stride="2" part_size="1"', "stride=2"),
        ('internal_layer_id="0"', 'internal_layer_id="77"', "internal_layer_id='77'"),
        ('start="0"', 'start="zero"', "start='zero'"),
    ],
)
def test_invalid_port_map_is_refused_by_name(tmp_path, old, new, named):
    xml = _saved_tensor_iterator(tmp_path)
    text = xml.read_text()
    assert old in text
    xml.write_text(text.replace(old, new, 1))
    with pytest.raises(B2SError, match=named):
        b2s_onnx.convert_ir(xml)


def _tensor(name, kind, shape):
    return oh.make_tensor_value_info(name, kind, shape)


def _scan_graph(reverse):
    """Running sum over time, halved per step: ONNX Scan, which OpenVINO writes as a
    TensorIterator."""
    half = numpy_helper.from_array(np.asarray([0.5], F32))
    body = oh.make_graph(
        [
            oh.make_node("Add", ["s", "x"], ["s2"]),
            oh.make_node("Constant", [], ["k"], value=half),
            oh.make_node("Mul", ["s2", "k"], ["y"]),
        ],
        "step",
        [_tensor("s", TensorProto.FLOAT, ["N"]), _tensor("x", TensorProto.FLOAT, ["N"])],
        [_tensor("s2", TensorProto.FLOAT, ["N"]), _tensor("y", TensorProto.FLOAT, ["N"])],
    )
    return oh.make_graph(
        [
            oh.make_node(
                "Scan",
                ["s0", "X"],
                ["S", "Y"],
                body=body,
                num_scan_inputs=1,
                scan_input_directions=[int(reverse)],
                scan_output_directions=[int(reverse)],
            )
        ],
        "scan",
        [_tensor("s0", TensorProto.FLOAT, ["N"]), _tensor("X", TensorProto.FLOAT, ["T", "N"])],
        [_tensor("S", TensorProto.FLOAT, None), _tensor("Y", TensorProto.FLOAT, None)],
    )


@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_iterator_from_onnx_scan_with_dynamic_dims(tmp_path, reverse):
    xml = onnx_to_ir(tmp_path, _scan_graph(reverse))
    assert 'type="TensorIterator"' in xml.read_text()
    rng = np.random.default_rng(0)
    for steps, batch in ((T, N), (1, 3)):
        feeds = {
            "s0": rng.standard_normal([batch]).astype(F32),
            "X": rng.standard_normal([steps, batch]).astype(F32),
        }
        assert_close(compare_saved(xml, feeds), **TOLERANCE)


def _loop_graph(nested_if):
    """a <- a*k + i for M iterations, k read from the outer scope; optionally the update
    sits in an If on the iteration's parity (a body inside a body)."""
    update = [
        oh.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        oh.make_node("Mul", ["a", "k"], ["scaled"]),
        oh.make_node("Add", ["scaled", "fi"], ["a2"]),
    ]
    if nested_if:
        two = numpy_helper.from_array(np.asarray(2, np.int64))
        zero = numpy_helper.from_array(np.asarray(0, np.int64))
        then_branch = oh.make_graph(
            [oh.make_node("Add", ["a2", "k"], ["t"])],
            "then",
            [],
            [_tensor("t", TensorProto.FLOAT, None)],
        )
        else_branch = oh.make_graph(
            [oh.make_node("Sub", ["a2", "k"], ["e"])],
            "else",
            [],
            [_tensor("e", TensorProto.FLOAT, None)],
        )
        update += [
            oh.make_node("Constant", [], ["two"], value=two),
            oh.make_node("Constant", [], ["zero"], value=zero),
            oh.make_node("Mod", ["i", "two"], ["parity"]),
            oh.make_node("Equal", ["parity", "zero"], ["even"]),
            oh.make_node("If", ["even"], ["a3"], then_branch=then_branch, else_branch=else_branch),
        ]
    result = "a3" if nested_if else "a2"
    body = oh.make_graph(
        [
            *update,
            oh.make_node("Identity", ["c"], ["c2"]),
            oh.make_node("Identity", [result], ["out"]),
            oh.make_node("Identity", [result], ["scanned"]),
        ],
        "body",
        [
            _tensor("i", TensorProto.INT64, []),
            _tensor("c", TensorProto.BOOL, []),
            _tensor("a", TensorProto.FLOAT, ["N"]),
        ],
        [
            _tensor("c2", TensorProto.BOOL, []),
            _tensor("out", TensorProto.FLOAT, ["N"]),
            _tensor("scanned", TensorProto.FLOAT, ["N"]),
        ],
    )
    return oh.make_graph(
        [oh.make_node("Loop", ["M", "", "a0"], ["A", "SCANNED"], body=body)],
        "loop",
        [
            _tensor("M", TensorProto.INT64, []),
            _tensor("a0", TensorProto.FLOAT, ["N"]),
            _tensor("k", TensorProto.FLOAT, [1]),
        ],
        [_tensor("A", TensorProto.FLOAT, None), _tensor("SCANNED", TensorProto.FLOAT, None)],
    )


@pytest.mark.parametrize("nested_if", [False, True])
def test_loop_from_onnx_with_run_time_trip_count_and_outer_scope(tmp_path, nested_if):
    xml = onnx_to_ir(tmp_path, _loop_graph(nested_if))
    assert 'type="Loop"' in xml.read_text()
    rng = np.random.default_rng(1)
    for trips in (1, 4):
        feeds = {
            "M": np.asarray(trips, np.int64),
            "a0": rng.standard_normal([N]).astype(F32),
            "k": np.asarray([0.5], F32),
        }
        assert_close(compare_saved(xml, feeds), **TOLERANCE)


def test_bodies_nested_too_deep_are_refused(tmp_path, monkeypatch):
    xml = onnx_to_ir(tmp_path, _loop_graph(nested_if=True))
    monkeypatch.setattr("b2s_onnx.ir.reader.MAX_BODY_DEPTH", 1)
    with pytest.raises(B2SError, match="nested deeper than 1"):
        b2s_onnx.convert_ir(xml)


def test_unknown_special_port_purpose_is_refused(tmp_path):
    def build(x):
        i = o8.parameter([], np.int64, name="i")
        acc = o8.parameter([N, C], F32, name="acc")
        body = ov.Model([o8.constant(True), o8.add(acc, o8.convert(i, "f32"))], [i, acc])
        loop = o8.loop(o8.constant(np.int64(3)), o8.constant(True))
        loop.set_function(body)
        loop.set_special_body_ports([0, 0])
        loop.set_merged_input(acc, x.output(0), body.outputs[1])
        return [loop.get_iter_value(body.outputs[1], -1)]

    params = [o8.parameter([N, C], F32, name="x")]
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(build(*params), params), xml, compress_to_fp16=False)
    text = xml.read_text()
    assert 'purpose="current_iteration"' in text
    xml.write_text(text.replace('purpose="current_iteration"', 'purpose="elapsed_time"'))
    with pytest.raises(B2SError, match="purpose='elapsed_time'"):
        b2s_onnx.convert_ir(xml)


def test_unsupported_layer_inside_a_body_is_reported(tmp_path):
    xml = _saved_tensor_iterator(tmp_path)
    text = xml.read_text()
    xml.write_text(text.replace('type="Tanh"', 'type="NoSuchOp"'))
    with pytest.raises(B2SError, match="NoSuchOp"):
        b2s_onnx.convert_ir(xml)
    kept = b2s_onnx.convert_ir(xml, keep_unsupported=True)
    body = next(n for n in kept.graph.node if n.op_type == "Loop").attribute[0].g
    assert any(n.op_type == "NoSuchOp" for n in body.node)


@pytest.mark.parametrize("opset", [13, 21])
def test_bodies_convert_at_every_target_opset(tmp_path, opset):
    xml = onnx_to_ir(tmp_path, _loop_graph(nested_if=True))
    model = b2s_onnx.convert_ir(xml, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    feeds = {"M": np.asarray(3, np.int64), "a0": np.ones([N], F32), "k": np.asarray([0.5], F32)}
    ours = run_onnxruntime(model, feeds)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = compiled(feeds)
    for port in compiled.outputs:
        name = next(n for n in ours if n in port.get_names())
        np.testing.assert_allclose(ours[name], np.asarray(theirs[port]), **TOLERANCE)
