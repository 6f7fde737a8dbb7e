"""Col2Im against OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import b2s_onnx
from tests.test_ir_ops import assert_close, run_both

ov = pytest.importorskip("openvino")
import openvino.opset1 as o1  # noqa: E402
import openvino.opset15 as o15  # noqa: E402

pytestmark = pytest.mark.openvino

F32, I64 = np.float32, np.int64

COVERED_LAYERS = {("Col2Im", "opset15")}


def c(values, dtype=I64):
    return o1.constant(np.asarray(values, dtype))


def blocks(size, kernel, strides, dilations, pads_begin, pads_end):
    count = 1
    for d in (0, 1):
        span = size[d] + pads_begin[d] + pads_end[d] - dilations[d] * (kernel[d] - 1) - 1
        count *= span // strides[d] + 1
    return count


CASES = [
    # (batch, channels, size, kernel, strides, dilations, pads_begin, pads_end)
    (2, 3, [4, 5], [2, 2], [1, 1], [1, 1], [0, 0], [0, 0]),
    (1, 2, [6, 6], [3, 2], [2, 1], [1, 2], [1, 0], [1, 2]),
    (None, 2, [5, 4], [2, 3], [1, 2], [2, 1], [0, 1], [2, 1]),
]


@pytest.mark.parametrize(
    ("batch", "channels", "size", "kernel", "strides", "dilations", "pads_begin", "pads_end"),
    CASES,
)
def test_col2im_matches_openvino(
    tmp_path, batch, channels, size, kernel, strides, dilations, pads_begin, pads_end
):
    count = blocks(size, kernel, strides, dilations, pads_begin, pads_end)
    shape = [channels * kernel[0] * kernel[1], count]
    if batch is not None:
        shape = [batch, *shape]
    pairs, _ = run_both(
        tmp_path,
        lambda a: o15.col2im(a, c(size), c(kernel), strides, dilations, pads_begin, pads_end),
        [shape],
    )
    assert_close(pairs, atol=1e-5)


def test_col2im_with_one_stride_value_is_refused(tmp_path):
    param = o1.parameter([1, 8, 12], F32, name="x")
    node = o15.col2im(param, c([4, 5]), c([2, 2]), [1, 1], [1, 1], [0, 0], [0, 0])
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([node], [param]), xml)
    xml.write_text(xml.read_text().replace('strides="1, 1"', 'strides="1"'))
    with pytest.raises(b2s_onnx.B2SError, match="strides"):
        b2s_onnx.convert_ir(xml)
