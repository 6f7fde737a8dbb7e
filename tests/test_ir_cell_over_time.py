"""A TensorIterator running one LSTM/GRU/RNN cell over time (what OpenVINO's TensorFlow and
Keras frontends write for a recurrent layer) becomes one ONNX sequence op, not a Loop:
every family, both directions, batch- and time-major slicing and stacking, f16, Reshape in
place of Squeeze/Unsqueeze, a batch of one. Bodies that do anything more stay Loops. All
against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset3 as o3  # noqa: E402
import openvino.opset4 as o4  # noqa: E402
import openvino.opset8 as o8  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32
N, T, C, H = 2, 5, 4, 3
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}
ONNX_OP = {"lstm": "LSTM", "gru": "GRU", "gru_lbr": "GRU", "rnn": "RNN"}


def _cell(family: str, step, states, dtype, rng):
    def init(*shape):
        return o8.constant((rng.standard_normal(shape) * 0.5).astype(dtype))

    if family == "lstm":
        return o4.lstm_cell(
            step, states[0], states[1], init(4 * H, C), init(4 * H, H), init(4 * H), H
        )
    if family == "rnn":
        return o3.rnn_cell(
            step, states[0], init(H, C), init(H, H), init(H), H, ["tanh"], [], [], 0.0
        )
    lbr = family == "gru_lbr"
    bias = init(4 * H if lbr else 3 * H)
    return o3.gru_cell(
        step,
        states[0],
        init(3 * H, C),
        init(3 * H, H),
        bias,
        H,
        ["sigmoid", "tanh"],
        [],
        [],
        0.0,
        lbr,
    )


def _recurrent_layer(
    family="lstm",
    *,
    reverse=False,
    time_axis=1,
    stack_axis=1,
    batch=N,
    dtype=F32,
    reshape=False,
    carry_through=False,
    stack_reversed=False,
):
    """build(x, *initial states) for run_both: a TensorIterator over the time axis of x."""
    rng = np.random.default_rng(7)
    slice_dims = [batch, C]
    slice_dims.insert(time_axis, 1)

    def build(x, *initial):
        x_t = o8.parameter(slice_dims, dtype, name="x_t")
        states = [o8.parameter([batch, H], dtype, name=f"s{i}") for i in range(len(initial))]
        if reshape:
            step = o8.reshape(x_t, o8.constant(np.asarray([-1, C])), False)
        else:
            step = o8.squeeze(x_t, o8.constant(np.asarray([time_axis])))
        cell = _cell(family, step, states, dtype, rng)
        new_states = [cell.output(i) for i in range(len(states))]
        if carry_through:  # one more op on the carried state: not the pattern
            new_states[0] = o8.multiply(new_states[0], o8.constant(np.ones([1], dtype))).output(0)
        if reshape:
            stack_dims = [-1, H]
            stack_dims.insert(stack_axis, 1)
            stacked = o8.reshape(cell.output(0), o8.constant(np.asarray(stack_dims)), False)
        else:
            stacked = o8.unsqueeze(cell.output(0), o8.constant(np.asarray([stack_axis])))
        body = ov.Model([*new_states, stacked.output(0)], [x_t, *states])
        ti = o8.tensor_iterator()
        ti.set_body(body)
        start, stride, end = (-1, -1, 0) if reverse else (0, 1, -1)
        ti.set_sliced_input(x_t, x.output(0), start, stride, 1, end, time_axis)
        for state, value, result in zip(states, initial, body.outputs, strict=False):
            ti.set_merged_input(state, value.output(0), result)
        if stack_reversed:
            start, stride, end = (0, 1, -1) if reverse else (-1, -1, 0)
        return [
            ti.get_concatenated_slices(body.outputs[-1], start, stride, 1, end, stack_axis),
            *(ti.get_iter_value(body.outputs[i], -1) for i in range(len(states))),
        ]

    x_dims = [batch, C]
    x_dims.insert(time_axis, T)
    state_count = 2 if family == "lstm" else 1
    return build, [x_dims] + [[batch, H]] * state_count, [dtype] * (1 + state_count)


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("family", ["lstm", "gru", "gru_lbr", "rnn"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize(("time_axis", "stack_axis"), [(1, 1), (0, 0)], ids=["NTC", "TNC"])
def test_a_cell_over_time_becomes_one_sequence_op(tmp_path, family, reverse, time_axis, stack_axis):
    build, shapes, dtypes = _recurrent_layer(
        family, reverse=reverse, time_axis=time_axis, stack_axis=stack_axis
    )
    pairs, model = run_both(tmp_path, build, shapes, dtypes)
    assert_close(pairs, **TOLERANCE)
    ops = _ops(model)
    assert "Loop" not in ops
    assert ops.count(ONNX_OP[family]) == 1


@pytest.mark.parametrize("variant", ["reshape", "batch_of_one", "f16"])
def test_equivalent_spellings_of_the_pattern_are_recognised(tmp_path, variant):
    build, shapes, dtypes = _recurrent_layer(
        "lstm",
        reshape=variant == "reshape",
        batch=1 if variant == "batch_of_one" else N,
        dtype=np.float16 if variant == "f16" else F32,
    )
    pairs, model = run_both(tmp_path, build, shapes, dtypes)
    tolerance = {"atol": 2e-3, "rtol": 2e-3} if variant == "f16" else TOLERANCE
    assert_close(pairs, **tolerance)
    assert pairs[0][0].dtype == pairs[0][1].dtype
    assert "Loop" not in _ops(model)
    assert "LSTM" in _ops(model)


def test_fp16_compressed_weights_still_make_one_sequence_op(tmp_path):
    """save_model's FP16 compression puts a Convert after every weight inside the body."""
    build, shapes, dtypes = _recurrent_layer("gru")
    pairs, model = run_both(tmp_path, build, shapes, dtypes, compress=True)
    assert_close(pairs, **TOLERANCE)
    assert "Loop" not in _ops(model)


def test_a_body_doing_more_stays_a_loop_and_still_matches(tmp_path):
    build, shapes, dtypes = _recurrent_layer("lstm", carry_through=True)
    pairs, model = run_both(tmp_path, build, shapes, dtypes)
    assert_close(pairs, **TOLERANCE)
    assert "Loop" in _ops(model)


def _ours_and_openvino(tmp_path, ours, theirs):
    """Our conversion of the layer ``ours`` builds, and OpenVINO's CPU plugin on the
    layer ``theirs`` builds (the same inputs)."""
    results = []
    for name, (build, shapes, dtypes) in (("ours", ours), ("theirs", theirs)):
        params = [
            o8.parameter(shape, dtype, name=f"in{i}")
            for i, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True))
        ]
        model = ov.Model(build(*params), params)
        xml = tmp_path / f"{name}.xml"
        ov.save_model(model, xml, compress_to_fp16=False)
        rng = np.random.default_rng(1)
        feeds = {f"in{i}": rng.standard_normal(shape).astype(F32) for i, shape in enumerate(shapes)}
        if name == "ours":
            converted = b2s_onnx.convert_ir(xml)
            outputs = run_onnxruntime(converted, feeds)
            results.append([outputs[o.name] for o in converted.graph.output])
        else:
            compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            results.append([np.asarray(v) for v in compiled(feeds).values()])
    return converted, results[0], results[1]


def test_stacking_along_another_axis_than_the_slicing_one(tmp_path):
    """Sliced batch-major, stacked time-major: the IR declares [T, N, H], which we output;
    OpenVINO's CPU plugin returns [N, T, H] (a plugin deviation), so the oracle is the
    plugin on the batch-major stacking, transposed."""
    converted, ours, theirs = _ours_and_openvino(
        tmp_path,
        _recurrent_layer("lstm", time_axis=1, stack_axis=0),
        _recurrent_layer("lstm", time_axis=1, stack_axis=1),
    )
    assert ours[0].shape == (T, N, H)
    theirs[0] = theirs[0].transpose(1, 0, 2)
    assert_close(list(zip(ours, theirs, strict=True)), **TOLERANCE)
    assert "Loop" not in _ops(converted)


def test_stacking_against_the_slicing_direction_stays_a_loop(tmp_path):
    """Sliced forwards, stacked backwards: the last iteration's state lands first. One ONNX
    sequence op cannot write that, so the Loop stays. OpenVINO's CPU plugin also changes
    the final states here (a plugin deviation); the oracle is the plugin on forward
    stacking, with the sequence reversed."""
    converted, ours, theirs = _ours_and_openvino(
        tmp_path,
        _recurrent_layer("lstm", stack_reversed=True),
        _recurrent_layer("lstm"),
    )
    theirs[0] = theirs[0][:, ::-1]
    assert_close(list(zip(ours, theirs, strict=True)), **TOLERANCE)
    assert "Loop" in _ops(converted)


def test_no_fuse_converts_the_tensor_iterator_literally(tmp_path):
    build, shapes, dtypes = _recurrent_layer("gru")
    params = [o8.parameter(shape, dtype) for shape, dtype in zip(shapes, dtypes, strict=True)]
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model(build(*params), params), xml, compress_to_fp16=False)
    assert "Loop" in _ops(b2s_onnx.convert_ir(xml, fuse=False))
    assert "GRU" in _ops(b2s_onnx.convert_ir(xml))


def test_weights_passed_in_as_invariant_inputs(tmp_path):
    """Weights living outside the body, read through invariant inputs: still constants."""
    rng = np.random.default_rng(3)

    def build(x, h0):
        outer = [
            o8.constant((rng.standard_normal(shape) * 0.5).astype(F32))
            for shape in ([3 * H, C], [3 * H, H], [3 * H])
        ]
        x_t = o8.parameter([N, 1, C], F32, name="x_t")
        h = o8.parameter([N, H], F32, name="h")
        inner = [
            o8.parameter(list(w.get_output_shape(0)), F32, name=f"w{i}")
            for i, w in enumerate(outer)
        ]
        step = o8.squeeze(x_t, o8.constant(np.asarray([1])))
        cell = o3.gru_cell(step, h, *inner, H, ["sigmoid", "tanh"], [], [], 0.0, False)
        body = ov.Model([cell.output(0)], [x_t, h, *inner])
        ti = o8.tensor_iterator()
        ti.set_body(body)
        ti.set_sliced_input(x_t, x.output(0), 0, 1, 1, -1, 1)
        ti.set_merged_input(h, h0.output(0), body.outputs[0])
        for parameter, value in zip(inner, outer, strict=True):
            ti.set_invariant_input(parameter, value.output(0))
        return [ti.get_iter_value(body.outputs[0], -1)]

    pairs, model = run_both(tmp_path, build, [[N, T, C], [N, H]])
    assert_close(pairs, **TOLERANCE)
    assert _ops(model).count("GRU") == 1
    assert "Loop" not in _ops(model)
