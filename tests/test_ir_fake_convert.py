"""FakeConvert against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset13 as o13  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32

COVERED_LAYERS = {("FakeConvert", "opset13")}

#: Ties, values just off ties, subnormals, saturation, zero and signs.
EDGES = np.asarray(
    [
        0.0,
        -0.0,
        1.0625,
        1.0625 + 1e-5,
        1.1875,
        17.5,
        448.0,
        460.0,
        1e5,
        1e-3,
        2**-10,
        3 * 2**-11,
        2**-16,
        -7.77,
        -1e5,
        6e4,
    ],
    F32,
)


@pytest.mark.parametrize("destination", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("shifted", [False, True])
def test_fake_convert_is_exact_on_edge_values(tmp_path, destination, shifted):
    def build(a):
        shift = o1.constant(np.asarray([0.25], F32)) if shifted else None
        scale = o1.constant(np.asarray([1.5], F32))
        return o13.fake_convert(a, scale, shift, destination_type=destination)

    pairs, _ = run_both(tmp_path, build, [[16]], feeds={"in0": EDGES})
    assert_close(pairs, exact=True)


@pytest.mark.parametrize("destination", ["f8e4m3", "f8e5m2"])
def test_fake_convert_per_channel_matches_openvino(tmp_path, destination):
    rng = np.random.default_rng(7)
    data = (rng.standard_normal([2, 3, 4]) * rng.choice([1e-3, 1, 300], [2, 3, 4])).astype(F32)
    scale = o1.constant(np.asarray([[0.5], [2.0], [8.0]], F32))
    shift = o1.constant(np.asarray([[0.0], [0.1], [-0.3]], F32))
    pairs, _ = run_both(
        tmp_path,
        lambda a: o13.fake_convert(a, scale, shift, destination),
        [[2, 3, 4]],
        feeds={"in0": data},
    )
    assert_close(pairs, exact=True)


def test_fake_convert_to_an_unknown_format_is_refused(tmp_path):
    a = o1.parameter([3], F32, name="a")
    xml = tmp_path / "m.xml"
    node = o13.fake_convert(a, o1.constant(np.asarray([1.0], F32)), None, "f8e4m3")
    ov.save_model(ov.Model([node], [a]), xml)
    xml.write_text(xml.read_text().replace('destination_type="f8e4m3"', 'destination_type="f4"'))
    with pytest.raises(b2s_onnx.B2SError, match="destination_type"):
        b2s_onnx.convert_ir(xml)
