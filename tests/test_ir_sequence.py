"""CumSum, Roll, Reverse, ReverseSequence and ShuffleChannels against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset7 as o7  # noqa: E402
from openvino.utils.node_factory import NodeFactory  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I32, I64 = np.float32, np.int32, np.int64

COVERED_LAYERS = {
    ("CumSum", "opset3"),
    ("Roll", "opset7"),
    ("Reverse", "opset1"),
    ("ReverseSequence", "opset1"),
    ("ShuffleChannels", "opset1"),
}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("axis", "dtype"), [(1, F32), (-1, I32), (0, I64)])
def test_cumsum_matches_openvino(tmp_path, exclusive, reverse, axis, dtype):
    def build(a):
        return o3.cumsum(a, c(axis, I32), exclusive, reverse)

    pairs, _ = run_both(tmp_path, build, [[3, 4, 2]], [dtype])
    assert_close(pairs, atol=1e-5)


ROLLS = [
    ([2], [0]),
    ([-1], [1]),
    ([7, -3], [0, 2]),
    ([1, 1, -1], [0, 1, 2]),
    ([1, 2], [1, 1]),
    ([0], [2]),
]


@pytest.mark.parametrize(("shift", "axes"), ROLLS)
def test_roll_is_exact(tmp_path, shift, axes):
    pairs, _ = run_both(tmp_path, lambda a: o7.roll(a, c(shift, I32), c(axes)), [[3, 4, 5]])
    assert_close(pairs, exact=True)


def test_roll_with_runtime_shift_and_dynamic_dim_is_exact(tmp_path):
    param = o1.parameter([-1, 5], F32, name="x")
    shift = o1.shape_of(param)
    model = ov.Model([o7.roll(param, shift, c([0, 1]))], [param])
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    converted = b2s_onnx.convert_ir(xml)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for rows in (2, 3):
        data = np.arange(rows * 5, dtype=F32).reshape(rows, 5)
        (ours,) = run_onnxruntime(converted, {"x": data}).values()
        assert ours.tobytes() == np.asarray(compiled({"x": data})[0]).tobytes()


@pytest.mark.parametrize(
    ("axes", "mode"),
    [([0], "index"), ([2, -1 + 3, 1], "index"), ([True, False, True], "mask")],
)
def test_reverse_is_exact(tmp_path, axes, mode):
    dtype = np.bool_ if mode == "mask" else I64
    pairs, _ = run_both(
        tmp_path,
        lambda a: NodeFactory("opset1").create("Reverse", [a, c(axes, dtype)], {"mode": mode}),
        [[2, 3, 4]],
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(("batch_axis", "seq_axis"), [(0, 1), (1, 0), (2, 1), (-1, 0)])
def test_reverse_sequence_is_exact(tmp_path, batch_axis, seq_axis):
    shape = [3, 3, 3]
    lengths = [1, 3, 2]
    pairs, _ = run_both(
        tmp_path,
        lambda a: o1.reverse_sequence(a, c(lengths, I32), batch_axis, seq_axis),
        [shape],
    )
    assert_close(pairs, exact=True)


@pytest.mark.parametrize(("axis", "group"), [(1, 2), (1, 3), (-1, 2), (0, 1)])
def test_shuffle_channels_is_exact(tmp_path, axis, group):
    pairs, _ = run_both(tmp_path, lambda a: o3.shuffle_channels(a, axis, group), [[2, 6, 3, 4]])
    assert_close(pairs, exact=True)


def test_shuffle_channels_group_that_does_not_divide_is_refused(tmp_path):
    param = o1.parameter([1, 6, 2, 2], F32, name="x")
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([o3.shuffle_channels(param, 1, 3)], [param]), xml)
    xml.write_text(xml.read_text().replace('group="3"', 'group="4"'))
    with pytest.raises(b2s_onnx.B2SError, match="group=4"):
        b2s_onnx.convert_ir(xml)


def test_reverse_with_unknown_mode_is_refused(tmp_path):
    param = o1.parameter([2, 3], F32, name="x")
    xml = tmp_path / "m.xml"
    node = NodeFactory("opset1").create("Reverse", [param, c([1])], {"mode": "index"})
    ov.save_model(ov.Model([node], [param]), xml)
    xml.write_text(xml.read_text().replace('mode="index"', 'mode="flip"'))
    with pytest.raises(b2s_onnx.B2SError, match="mode"):
        b2s_onnx.convert_ir(xml)
