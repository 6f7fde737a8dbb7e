"""INT8 IRs as QDQ: FakeQuantize becomes QuantizeLinear/DequantizeLinear exactly where the
levels allow, compressed weights stay integers, onnxruntime runs the layers on integer
kernels, and the outputs agree with OpenVINO's INT8 results as well as OpenVINO's own
float simulation does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from b2s_onnx.ir.converters.quantize import QdqPlan, qdq_plan
from b2s_onnx.ir.int8_coverage import coverage
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset13 as ops  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "models" / "int8"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "ir-corpus"


# -- the plan ---------------------------------------------------------------------------


def test_symmetric_256_levels_become_uint8_with_zero_point_128():
    plan = qdq_plan(256, -1.28, 1.27, -1.28, 1.27)
    assert isinstance(plan, QdqPlan)
    assert plan.zero_point == 128
    assert plan.scale_in == pytest.approx(0.01)
    assert plan.clip is None
    assert plan.axis is None


def test_ranges_differing_between_input_and_output_keep_one_zero_point():
    plan = qdq_plan(256, 0.0, 2.55, 0.0, 5.1)
    assert isinstance(plan, QdqPlan)
    assert plan.scale_out == pytest.approx(2 * plan.scale_in)


def test_fewer_levels_clamp_before_quantizing():
    plan = qdq_plan(255, -1.27, 1.27, -1.27, 1.27)
    assert isinstance(plan, QdqPlan)
    assert plan.clip is not None


def test_per_channel_ranges_quantize_along_their_axis():
    low = np.asarray([0.0, -1.28, 0.0], np.float32).reshape(1, 3, 1, 1)
    high = np.asarray([2.55, 1.27, 5.1], np.float32).reshape(1, 3, 1, 1)
    plan = qdq_plan(256, low, high, low, high)
    assert isinstance(plan, QdqPlan)
    assert plan.axis == -3
    assert list(plan.zero_point) == [0, 128, 0]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ((256, 1.0, 2.0, 1.0, 2.0), "does not fit uint8"),
        ((256, -0.43, 1.0, -0.43, 1.0), "zero is not one of the levels"),
        ((1024, 0.0, 1.0, 0.0, 1.0), "does not fit 8 bits"),
        ((256, 1.0, 1.0, 1.0, 1.0), "empty or inverted"),
        ((256, np.ones((1, 2, 2)), np.full((1, 2, 2), 2.0), 1.0, 2.0), "several axes"),
    ],
)
def test_fake_quantize_without_an_exact_qdq_form_says_why(args, reason):
    assert reason in qdq_plan(*args)


# -- one FakeQuantize against OpenVINO's ------------------------------------------------


def _fake_quantize_ir(tmp_path, levels, low, high, out_low=None, out_high=None):
    data = ops.parameter([2, 3, 8, 8], np.float32, name="data")
    const = lambda v: ops.constant(np.asarray(v, np.float32))  # noqa: E731
    out_low = low if out_low is None else out_low
    out_high = high if out_high is None else out_high
    fq = ops.fake_quantize(data, const(low), const(high), const(out_low), const(out_high), levels)
    xml = tmp_path / "fq.xml"
    ov.save_model(ov.Model([fq], [data]), xml, compress_to_fp16=False)
    return xml


def _openvino(xml, feeds, **config):
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32", **config})
    return [np.asarray(compiled(feeds)[port]) for port in compiled.outputs]


FQ_CASES = {
    "u8 256 levels": (256, 0.0, 2.55),
    "symmetric 256": (256, -1.28, 1.27),
    "255 levels": (255, -1.27, 1.27),
    "16 levels": (16, 0.0, 1.5),
    "rescaled output": (256, 0.0, 2.55, 0.0, 1.0),
}


@pytest.mark.parametrize("case", FQ_CASES.values(), ids=FQ_CASES.keys())
def test_fake_quantize_as_qdq_matches_openvino_to_the_level(tmp_path, case):
    xml = _fake_quantize_ir(tmp_path, *case)
    converted = b2s_onnx.convert_ir(xml)
    assert "QuantizeLinear" in [n.op_type for n in converted.graph.node]
    rng = np.random.default_rng(0)
    feeds = {"data": (rng.standard_normal([2, 3, 8, 8]) * 2).astype(np.float32)}
    (ours,) = run_onnxruntime(converted, feeds).values()
    (theirs,) = _openvino(xml, feeds)
    step = (
        np.asarray(case[4] if len(case) > 3 else case[2])
        - np.asarray(case[3] if len(case) > 3 else case[1])
    ) / (case[0] - 1)
    # (q - k) * s and q * s + low differ in the last bit; a rounding tie or a one-ulp
    # difference before rounding may move a value by one level, never more, and rarely.
    difference = np.abs(ours - theirs)
    assert np.all(difference <= step * 1.001)
    assert np.mean(difference > step / 2) < 0.01


def test_per_channel_activation_ranges_stay_float_with_the_reason(tmp_path):
    low = np.asarray([0.0, -1.28, 0.0]).reshape(1, 3, 1, 1)
    high = np.asarray([2.55, 1.27, 5.1]).reshape(1, 3, 1, 1)
    xml = _fake_quantize_ir(tmp_path, 256, low, high)
    from b2s_onnx.ir.convert import convert_ir_model

    result = convert_ir_model(xml)
    assert "QuantizeLinear" not in [n.op_type for n in result.model.graph.node]
    assert "per-channel ranges" in result.notes[0]


def test_int8_float_keeps_the_arithmetic_form(tmp_path):
    xml = _fake_quantize_ir(tmp_path, 256, 0.0, 2.55)
    converted = b2s_onnx.convert_ir(xml, int8="float")
    assert "QuantizeLinear" not in [n.op_type for n in converted.graph.node]
    with pytest.raises(B2SError, match="int8='fast'"):
        b2s_onnx.convert_ir(xml, int8="fast")


# -- NNCF's INT8 networks -----------------------------------------------------------------

#: Integer kernels each network must get; the rest are layers onnxruntime has no integer
#: kernel form for: a Conv whose output is not quantized again (ConvInteger is 18x slower
#: than float), a Conv whose input or output NNCF quantized per channel (QLinearConv takes
#: one scale; depthwise_separable has only such Convs), a MatMul with bias whose output is
#: not quantized again.
EXPECTED_INTEGER = {
    "conv_stack": 2,
    "depthwise_separable": 0,
    "residual_block": 3,
    "concat_branches": 2,
    "pooling": 2,
    "classifier": 3,
    "ssd_head": 2,
}


def _image(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"image": (rng.integers(0, 256, [1, 3, 128, 128]) / 64.0).astype(np.float32)}


@pytest.mark.parametrize("name", sorted(EXPECTED_INTEGER))
def test_nncf_networks_run_on_integer_kernels(name):
    xml = MODELS / name / "int8.xml"
    converted = b2s_onnx.convert_ir(xml)
    onnx.checker.check_model(converted, full_check=True)
    found = coverage(xml, converted)
    assert found.integer >= EXPECTED_INTEGER[name], found
    float_form = b2s_onnx.convert_ir(xml, int8="float")
    assert "QuantizeLinear" not in {n.op_type for n in float_form.graph.node}
    assert not coverage(xml, float_form).integer


@pytest.mark.parametrize("name", sorted(EXPECTED_INTEGER))
def test_nncf_networks_agree_with_openvino_int8_as_its_float_simulation_does(name):
    xml = MODELS / name / "int8.xml"
    converted = b2s_onnx.convert_ir(xml)
    names = [o.name for o in converted.graph.output]
    for seed in range(2):
        feeds = _image(seed)
        ours = run_onnxruntime(converted, feeds)
        int8 = _openvino(xml, feeds)
        simulated = _openvino(xml, feeds, LP_TRANSFORMS_MODE=False)
        for name_out, theirs, sim in zip(names, int8, simulated, strict=True):
            scale = max(float(np.abs(theirs).max()), 1e-6)
            ours_error = float(np.abs(ours[name_out] - theirs).max())
            sim_error = float(np.abs(sim - theirs).max())
            assert ours_error <= max(2 * sim_error, 0.02 * scale), (name_out, ours_error, sim_error)


def test_corpus_int8_model_runs_its_quantized_convolutions_on_integer_kernels():
    xml = CORPUS / "person-attributes-recognition-crossroad-0230" / "model.xml"
    if not xml.is_file():
        pytest.skip("shared/ir-corpus not present")
    found = coverage(xml, b2s_onnx.convert_ir(xml))
    assert found.integer_kernels["QLinearConv"] >= 42, found
