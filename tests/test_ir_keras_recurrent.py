"""Keras recurrent layers as OpenVINO's TensorFlow frontend writes them (a Loop-5 over time
with the cell spelled out, ``models/keras/``) become one ONNX LSTM/GRU/RNN: every output
form (the whole sequence, the last output, the final states), biases on every gate, both
halves of a Bidirectional layer. Bodies that compute anything else stay Loops. All against
OpenVINO's CPU plugin."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

pytestmark = pytest.mark.openvino

MODELS = Path(__file__).resolve().parents[1] / "models" / "keras"
#: The sequence ops each model must become (and no Loop).
FUSED = {
    "lstm": {"LSTM": 1},
    "lstm_states": {"LSTM": 1},
    "gru": {"GRU": 1},
    "simple_rnn_relu": {"RNN": 1},
    "bidirectional_lstm": {"LSTM": 2},
    # reset_after=False: the reset gate scales the state before its own MatMul (ONNX GRU's
    # default linear_before_reset=0).
    "gru_reset_before": {"GRU": 1},
}


def _run(xml: Path, converted: onnx.ModelProto) -> tuple[list, list]:
    """Outputs of the converted model in onnxruntime and of the IR in OpenVINO (f32)."""
    shape = [d.dim_value for d in converted.graph.input[0].type.tensor_type.shape.dim]
    data = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    ours = list(run_onnxruntime(converted, {converted.graph.input[0].name: data}).values())
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = [compiled(data)[out] for out in compiled.outputs]
    return ours, theirs


def _assert_close(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape
        np.testing.assert_allclose(mine, reference, atol=1e-5, rtol=1e-5)


def _op_counts(model: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_keras_recurrent_loop_becomes_one_sequence_op(name):
    xml = MODELS / f"{name}.xml"
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    counts = _op_counts(converted)
    assert "Loop" not in counts
    for op, count in FUSED[name].items():
        assert counts[op] == count, counts
    ours, theirs = _run(xml, converted)
    _assert_close(ours, theirs)
    # The literal Loop computes the same values.
    literal = b2s_onnx.convert_ir(xml, fuse=False)
    assert "Loop" in _op_counts(literal)
    _assert_close(_run(xml, literal)[0], ours)


def _edited(tmp_path: Path, name: str, edit) -> Path:
    """models/keras/``name``.xml with ``edit(body)`` applied to its Loop body."""
    model = ov.Core().read_model(MODELS / f"{name}.xml")
    loop = next(op for op in model.get_ordered_ops() if op.get_type_name() == "Loop")
    edit(loop.get_function())
    xml = tmp_path / "edited.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    return xml


def _stop_early(body) -> None:
    """Both loop bounds 12 -> 7: the loop runs 7 of the 12 steps."""
    for op in body.get_ordered_ops():
        if op.get_type_name() != "Less":
            continue
        bound = op.input_value(1).get_node()
        value = bound.get_data()
        op.input(1).replace_source_output(ops.constant(np.full_like(value, 7)).output(0))


def _clamp_cell_state(body) -> None:
    """The carried cell state clamped to [-0.5, 0.5] on its way to the next step."""
    for result in body.get_results():
        source = result.input_value(0)
        readers = {t.get_node().get_type_name() for t in source.get_target_inputs()}
        if source.get_node().get_type_name() == "Add" and "Tanh" in readers:
            result.input(0).replace_source_output(ops.clamp(source, -0.5, 0.5).output(0))
            return
    raise AssertionError("no cell state result in the body")


def _reset_a_scaled_state(body) -> None:
    """reset_after=False's ``r * h`` reads ``0.5 * h``: not a GRU's candidate any more."""
    for op in body.get_ordered_ops():
        inputs = [v.get_node() for v in op.input_values()]
        if (
            op.get_type_name() == "Multiply"
            and any(n.get_type_name() == "Parameter" for n in inputs)
            and any(n.get_type_name() == "Sigmoid" for n in inputs)
        ):
            readers = {t.get_node().get_type_name() for t in op.output(0).get_target_inputs()}
            if readers == {"MatMul"}:
                index = [n.get_type_name() for n in inputs].index("Parameter")
                state = op.input_value(index)
                op.input(index).replace_source_output(
                    ops.multiply(state, np.float32(0.5)).output(0)
                )
                return
    raise AssertionError("no reset product in the body")


@pytest.mark.parametrize(
    ("name", "edit", "sequence_op"),
    [
        ("lstm", _stop_early, "LSTM"),
        ("lstm", _clamp_cell_state, "LSTM"),
        ("gru_reset_before", _reset_a_scaled_state, "GRU"),
    ],
    ids=["stops-early", "clamp", "gru-reset-of-another-tensor"],
)
def test_a_body_computing_something_else_stays_a_loop(tmp_path, name, edit, sequence_op):
    xml = _edited(tmp_path, name, edit)
    converted = b2s_onnx.convert_ir(xml)
    counts = _op_counts(converted)
    assert "Loop" in counts
    assert sequence_op not in counts
    _assert_close(*_run(xml, converted))


def test_no_fuse_keeps_the_loop():
    converted = b2s_onnx.convert_ir(MODELS / "lstm.xml", fuse=False)
    assert "LSTM" not in _op_counts(converted)
