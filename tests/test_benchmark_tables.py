"""The corpus table the README carries: both geomeans, and the FP32/FP16 one without the
INT8 models (whose target is the INT8 benchmark's)."""

from __future__ import annotations

import math

from benchmarks.models import _quantized, markdown


def _row(name, ratio, threads=1, quantized=False):
    return {
        "model": name,
        "group": "corpus",
        "threads": threads,
        "quantized": quantized,
        "fused_ms": ratio,
        "openvino_ms": 1.0,
        "fused/openvino": ratio,
        "unfused/openvino": ratio,
        "kernels/openvino": ratio / 2,
    }


def test_the_fp_geomean_leaves_the_int8_models_out():
    rows = [_row("a", 0.5), _row("b", 2.0), _row("int8", 4.0, quantized=True)]
    table = markdown(rows, [1])
    assert f"| **geomean, 1 thread** | | | **{math.pow(4.0, 1 / 3):.2f}** | | |" in table
    assert "| **geomean of the FP32/FP16 models, 1 thread** | | | **1.00** | | |" in table


def test_without_int8_models_one_geomean_line():
    table = markdown([_row("a", 0.5), _row("b", 2.0)], [1])
    assert "FP32/FP16" not in table


def test_an_ir_with_fake_quantize_counts_as_quantized(tmp_path):
    xml = tmp_path / "model.xml"
    layer = '<net><layers><layer id="3" type="{}" version="opset1"/></layers></net>'
    xml.write_text(layer.format("FakeQuantize"))
    assert _quantized(xml)
    xml.write_text(layer.format("Convolution"))
    assert not _quantized(xml)
