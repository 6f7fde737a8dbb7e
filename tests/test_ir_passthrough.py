"""Identity-16 and NonZero-3 against OpenVINO's CPU plugin, and a Result fed by a constant
keeping the output name OpenVINO exposes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import b2s_onnx
from b2s_onnx.errors import B2SError
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset16 as o16  # noqa: E402

pytestmark = pytest.mark.openvino

COVERED_LAYERS = {("Identity", "opset16"), ("NonZero", "opset3")}


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_identity_matches_openvino(tmp_path, dtype):
    pairs, _ = run_both(tmp_path, lambda x: o16.identity(x), [[2, 3]], [dtype])
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("output_type", ["i32", "i64"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.bool_])
def test_non_zero_matches_openvino(tmp_path, dtype, output_type):
    rng = np.random.default_rng(0)
    data = (rng.integers(0, 3, [2, 3, 4]) * (rng.random([2, 3, 4]) > 0.4)).astype(dtype)
    pairs, _ = run_both(
        tmp_path, lambda x: o3.non_zero(x, output_type), [data.shape], [dtype], feeds={"in0": data}
    )
    assert_close(pairs, exact=True)
    assert pairs[0][0].dtype == (np.int32 if output_type == "i32" else np.int64)


def test_non_zero_of_all_zeros_is_empty(tmp_path):
    data = np.zeros([3, 2], np.float32)
    pairs, _ = run_both(tmp_path, lambda x: o3.non_zero(x), [data.shape], feeds={"in0": data})
    assert pairs[0][0].shape == (2, 0)
    assert_close(pairs, exact=True)


def test_non_zero_refuses_an_unknown_output_type(tmp_path):
    x = o1.parameter([2, 2], np.float32, name="x")
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([o3.non_zero(x, "i32").output(0)], [x]), xml)
    xml.write_text(xml.read_text().replace('output_type="i32"', 'output_type="f32"'))
    with pytest.raises(B2SError, match="output_type"):
        b2s_onnx.convert_ir(xml)


def test_result_of_a_constant_keeps_its_exposed_name(tmp_path):
    """OpenVINO folds a graph whose output depends on no input to Const -> Result, and
    exposes the Const's tensor name; the converted model's output has that name."""
    x = o1.parameter([2], np.float32, name="x")
    const = o1.constant(np.asarray(7, np.int64))
    const.output(0).get_tensor().set_names({"len"})
    xml = tmp_path / "model.xml"
    ov.save_model(ov.Model([const.output(0)], [x]), xml)
    exposed = ov.Core().read_model(xml).outputs[0].get_any_name()
    converted = b2s_onnx.convert_ir(xml)
    assert [o.name for o in converted.graph.output] == [exposed] == ["len"]
    session = ort.InferenceSession(converted.SerializeToString())
    (value,) = session.run(None, {"x": np.zeros(2, np.float32)})
    assert value == 7
