"""The inputs and outputs a converted model exposes: those of ``openvino.Core().read_model``.

A user feeds the converted model what they fed OpenVINO and gets back what OpenVINO
returned, so names, element types and (partial) shapes follow OpenVINO's reader:

- IR v11: every Parameter and Result keeps its own element type (an ``f16`` input takes
  float16).
- IR v10 (the legacy API's IRs): OpenVINO's reader converts at the edges; ``f16`` inputs
  become ``f32``, integer outputs of 32 and 64 bits become ``i32``, every other non-``f32``
  output becomes ``f32``.

Inside, the graph computes in the type OpenVINO's CPU plugin computes in under the f32
inference-precision hint (``f16`` as ``f32``, see :func:`b2s_onnx.ir.weights.onnx_type`);
where the two differ a Cast sits at the edge. f16 -> f32 -> f16 is exact for every value,
and onnxruntime's Cast quiets a signalling NaN on the way back exactly as the plugin does.

Dynamic dimensions (``?``, ``-1``, a range such as ``1..10``) get symbolic names: ONNX
has no way to state a range.
"""

from __future__ import annotations

from onnx import TensorProto

from b2s_onnx.ir.weights import ELEMENT_TYPES

_V10_INTEGER_OUTPUTS = frozenset({"i64", "u64", "i32", "u32"})


def input_type(ir_version: int, ir_type: str) -> int:
    """The ONNX element type of the graph input for a Parameter of ``ir_type``."""
    if ir_version == 10 and ir_type == "f16":
        return TensorProto.FLOAT
    return ELEMENT_TYPES[ir_type][1]


def output_type(ir_version: int, ir_type: str) -> int:
    """The ONNX element type of the graph output for a Result of ``ir_type``."""
    if ir_version == 10:
        if ir_type in _V10_INTEGER_OUTPUTS:
            return TensorProto.INT32
        return TensorProto.FLOAT
    return ELEMENT_TYPES[ir_type][1]


def symbolic_shape(name: str, dims: tuple[int | None, ...] | None) -> list[int | str] | None:
    """Dims for a graph input or output: sizes as they are, dynamic ones named after the
    tensor and axis (``None`` when even the rank is dynamic)."""
    if dims is None:
        return None
    return [d if d is not None else f"{name}_d{i}" for i, d in enumerate(dims)]
