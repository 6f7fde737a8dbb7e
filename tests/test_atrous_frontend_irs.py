"""Atrous fusion on IRs shaped as OpenVINO's TensorFlow frontend writes them: Keras/TF
atrous convs and DeepLab's ASPP head (NHWC with layout Transposes, bias Add, BatchNorm
folded as Multiply/Add, Relu/Relu6 as Clamp; static and dynamic height and width).
Every pattern must fuse, and the converted graph must match OpenVINO's CPU plugin (f32)
within 1e-4 absolute and relative: both sum the same terms in their own order."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from b2s_onnx.ir.convert import convert_ir_model
from b2s_onnx.parity.runtime import run_onnxruntime
from benchmarks.atrous_irs import AtrousGraph, atrous_ir_model

ov = pytest.importorskip("openvino")

pytestmark = pytest.mark.openvino

CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
TOLERANCE = 1e-4

GRAPHS = {
    "keras depthwise nhwc": AtrousGraph(rates=(2,)),
    "keras depthwise nhwc dynamic": AtrousGraph(rates=(3,), dynamic=True),
    "atrous conv2d nhwc": AtrousGraph(branch="full", rates=(2,)),
    "atrous conv2d nchw dynamic": AtrousGraph(branch="full", nhwc=False, dynamic=True),
    "atrous conv2d valid nhwc": AtrousGraph(branch="full", rates=(3,), padding="VALID"),
    "depthwise valid nhwc dynamic": AtrousGraph(rates=(2,), padding="VALID", dynamic=True),
    "aspp separable nhwc": AtrousGraph(aspp=True, rates=(6, 12, 18)),
    "aspp separable nhwc dynamic": AtrousGraph(aspp=True, rates=(6, 12, 18), dynamic=True),
    "aspp full nchw": AtrousGraph(aspp=True, rates=(6, 12, 18), branch="full", nhwc=False),
    "aspp full nhwc dynamic": AtrousGraph(
        aspp=True, rates=(6, 12, 18), branch="full", dynamic=True
    ),
    "max pool nhwc": AtrousGraph(branch="maxpool", rates=(2,)),
    "average pool nhwc dynamic": AtrousGraph(branch="avgpool", rates=(3,), dynamic=True),
    "average pool nchw": AtrousGraph(branch="avgpool", rates=(2,), nhwc=False),
}


def _shapes(graph: AtrousGraph) -> list[list[int]]:
    sizes = [(graph.size, graph.size)]
    if graph.dynamic:
        sizes = [(13, 13), (14, 9), (20, 17)]
    c = graph.channels
    return [[1, h, w, c] if graph.nhwc else [1, c, h, w] for h, w in sizes]


@pytest.mark.parametrize("graph", GRAPHS.values(), ids=GRAPHS.keys())
def test_frontend_atrous_graphs_fuse_every_pattern_and_match_openvino(tmp_path, graph):
    xml = tmp_path / "atrous.xml"
    ov.save_model(atrous_ir_model(graph), xml, compress_to_fp16=False)
    result = convert_ir_model(xml)
    fired = [f for f in result.rewrites.fired if f.rewrite == "atrous-convolution"]
    declined = [d for d in result.rewrites.declined if d.rewrite == "atrous-convolution"]
    assert declined == []
    assert len(fired) == len(graph.rates)
    assert all(("guarded at run time" in f.detail) == graph.dynamic for f in fired)
    model = result.model
    onnx.checker.check_model(model, full_check=True)
    dilated = sorted(
        next(a.ints for a in n.attribute if a.name == "dilations")[0]
        for n in model.graph.node
        if any(a.name == "dilations" and max(a.ints) > 1 for a in n.attribute)
    )
    assert dilated == sorted(graph.rates)
    # What the literal lowering leaves: phases reshaped into the batch and back.
    assert not [n for n in model.graph.node if n.name.endswith("/reshape_split")]

    compiled = ov.Core().compile_model(ov.Core().read_model(xml), "CPU", CONFIG)
    for shape in _shapes(graph):
        data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        (ours,) = run_onnxruntime(model, {"data": data}).values()
        theirs = np.asarray(compiled({"data": data})[compiled.outputs[0]])
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=TOLERANCE)


def test_the_fused_max_pool_keeps_every_bit_of_the_literal_lowering(tmp_path):
    xml = tmp_path / "pool.xml"
    ov.save_model(atrous_ir_model(AtrousGraph(branch="maxpool")), xml, compress_to_fp16=False)
    fused = convert_ir_model(xml)
    literal = convert_ir_model(xml, fuse=False)
    assert [f.exact for f in fused.rewrites.fired if f.rewrite == "atrous-convolution"] == [True]
    data = np.random.default_rng(0).standard_normal([1, 17, 17, 8]).astype(np.float32) - 2
    (ours,) = run_onnxruntime(fused.model, {"data": data}).values()
    (expected,) = run_onnxruntime(literal.model, {"data": data}).values()
    assert ours.tobytes() == expected.tobytes()
