"""Identity-16: OpenVINO's ONNX frontend writes it for an ONNX Identity that survives its
transformations (a graph whose output is an input, a Clip with no bounds). NonZero-3 lives
with the detection layers (``nonzero``)."""

from __future__ import annotations

from onnx import TensorProto

from b2s_onnx.ir.converters.registry import converts

#: The input types onnxruntime's NonZero kernel is registered for.
KERNEL_TYPES = frozenset(
    {TensorProto.BOOL, TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8}
)


@converts("Identity", (16,), inputs=(1, 1), attrs={})
def identity(ctx, layer, inputs):
    ctx.one("Identity", [inputs[0]], ctx.out(layer))
