"""DeformableConvolution against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset8 as o8  # noqa: E402

pytestmark = pytest.mark.openvino

F32 = np.float32

COVERED_LAYERS = {("DeformableConvolution", "opset1"), ("DeformableConvolution", "opset8")}


def const(shape, seed, scale=1.0):
    return o1.constant((np.random.default_rng(seed).standard_normal(shape) * scale).astype(F32))


CASES = [
    # (input shape, filters shape, strides, pads, dilations, group, deformable group)
    ([1, 2, 5, 6], [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1, 1),
    ([2, 4, 6, 5], [4, 2, 3, 2], [2, 1], [0, 1], [1, 2], 2, 2),
    ([1, 4, 5, 5], [2, 4, 2, 2], [1, 2], [1, 0], [2, 1], 1, 4),
]


def offsets_shape(shape, filters, strides, pads, dilations, deformable):
    size = [
        (shape[2 + d] + 2 * pads[d] - dilations[d] * (filters[2 + d] - 1) - 1) // strides[d] + 1
        for d in (0, 1)
    ]
    return [shape[0], deformable * filters[2] * filters[3] * 2, *size]


@pytest.mark.parametrize(
    ("shape", "filters", "strides", "pads", "dilations", "group", "deformable"), CASES
)
@pytest.mark.parametrize("version", ["v1", "v8", "v8-mask-pad"])
def test_deformable_convolution_matches_openvino(
    tmp_path, shape, filters, strides, pads, dilations, group, deformable, version
):
    offsets_at = offsets_shape(shape, filters, strides, pads, dilations, deformable)
    offsets = const(offsets_at, 1, scale=1.5)  # many points land near and past the border

    def build(a):
        common = (a, offsets, const(filters, 2), strides, pads, pads, dilations)
        if version == "v1":
            return o1.deformable_convolution(*common, group=group, deformable_group=deformable)
        mask = None
        if version == "v8-mask-pad":
            mask_shape = [offsets_at[0], offsets_at[1] // 2, *offsets_at[2:]]
            mask = o1.constant(np.random.default_rng(3).random(mask_shape).astype(F32))
        return o8.deformable_convolution(
            *common,
            mask,
            group=group,
            deformable_group=deformable,
            bilinear_interpolation_pad=version == "v8-mask-pad",
        )

    pairs, _ = run_both(tmp_path, build, [shape])
    assert_close(pairs, atol=2e-5, rtol=1e-4)


def test_deformable_convolution_group_that_does_not_divide_is_refused(tmp_path):
    param = o1.parameter([1, 4, 5, 5], F32, name="x")
    node = o1.deformable_convolution(
        param, const([1, 18, 5, 5], 1), const([2, 4, 3, 3], 2), [1, 1], [1, 1], [1, 1], [1, 1]
    )
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [param]), xml)
    xml.write_text(xml.read_text().replace('deformable_group="1"', 'deformable_group="3"'))
    with pytest.raises(b2s_onnx.B2SError, match=r"deformable_group='?3"):
        b2s_onnx.convert_ir(xml)
