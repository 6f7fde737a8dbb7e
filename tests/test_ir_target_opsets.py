"""The tensor converters at every target ONNX opset b2s_onnx writes (13..21): the model
checks, runs in onnxruntime and gives the default opset's result; converters whose ONNX
forms need a later opset refuse earlier ones by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import b2s_onnx
from b2s_onnx.parity.runtime import run_onnxruntime

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset3 as o3  # noqa: E402
import openvino.opset7 as o7  # noqa: E402
import openvino.opset8 as o8  # noqa: E402
import openvino.opset9 as o9  # noqa: E402
import openvino.opset10 as o10  # noqa: E402
import openvino.opset14 as o14  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I64 = np.float32, np.int64

#: Checked at several target opsets here; their OpenVINO parity is tested per family.
COVERED_LAYERS: set[tuple[str, str]] = set()


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


def build(a):
    """Many tensor layers in one model, all expressible from ONNX opset 13 on."""
    sliced = o8.slice(a, c([0, 1]), c([2, 5]), c([1, 2]), c([0, 2]))
    gathered = o8.gather_nd(a, c([[0, 1], [1, 2]]), 0)
    ones = o1.convert(o1.one_hot(c([0, 2, -1]), c(3), c(1.0, F32), c(0.0, F32), 0), "f32")
    summed = o3.cumsum(a, c(1), True, False)
    rolled = o7.roll(a, c([1, -2]), c([1, 2]))
    shuffled = o3.shuffle_channels(o1.reshape(a, c([1, 2, 3, 4]), False), 1, 2)
    product = o7.einsum([a, a], "bij,bkj->bik")
    spectrum = o9.rdft(a, c([2]))
    inverse = o14.inverse(o1.add(o1.reshape(a, c([6, 2, 2]), False), c(np.eye(2) * 3, F32)), True)
    finite = o1.convert(o10.is_finite(a), "f32")
    found = o15.search_sorted(c([-1.0, 0.0, 1.0], F32), a, False)
    unique = o10.unique(c([3, 1, 3, 2], F32)).output(0)
    return [
        sliced,
        gathered,
        ones,
        summed,
        rolled,
        shuffled,
        product,
        spectrum,
        inverse,
        finite,
        found,
        unique,
    ]


@pytest.mark.parametrize("opset", [13, 15, 17, 21])
def test_tensor_layers_convert_at_every_target_opset(tmp_path, opset):
    param = o1.parameter([2, 3, 4], F32, name="x")
    outputs = build(param)
    xml = tmp_path / "m.xml"
    ov.save_model(
        ov.Model([o.output(0) if hasattr(o, "output") else o for o in outputs], [param]), xml
    )
    data = {"x": np.random.default_rng(0).standard_normal([2, 3, 4]).astype(F32)}
    model = b2s_onnx.convert_ir(xml, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert [i.version for i in model.opset_import if i.domain in ("", "ai.onnx")] == [opset]
    reference = run_onnxruntime(b2s_onnx.convert_ir(xml), data)
    ours = run_onnxruntime(model, data)
    for name, value in reference.items():
        np.testing.assert_allclose(ours[name], value, atol=1e-6)
