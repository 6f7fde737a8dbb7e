"""Building and running the four ops with OpenVINO's own Python API (test-only)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import openvino as ov
import openvino.opset15 as ov_ops

CORE = ov.Core()
# The CPU plugin runs in bf16 by default on CPUs with AMX/AVX512-BF16: force f32.
CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}

OV_TYPES = {
    np.dtype(np.float32): ov.Type.f32,
    np.dtype(np.float16): ov.Type.f16,
    np.dtype(np.float64): ov.Type.f64,
    np.dtype(ml_dtypes.bfloat16): ov.Type.bf16,
    np.dtype(np.int8): ov.Type.i8,
    np.dtype(np.int16): ov.Type.i16,
    np.dtype(np.int32): ov.Type.i32,
    np.dtype(np.int64): ov.Type.i64,
    np.dtype(np.uint8): ov.Type.u8,
    np.dtype(np.uint16): ov.Type.u16,
    np.dtype(np.uint32): ov.Type.u32,
    np.dtype(np.uint64): ov.Type.u64,
    np.dtype(np.bool_): ov.Type.boolean,
}


def build(op_type: str, parameter, index: dict | None, attributes: dict | None):
    def const(values):
        return ov_ops.constant(np.array(values, np.int64))

    if op_type == "BatchToSpace":
        return ov_ops.batch_to_space(
            parameter,
            const(index["block_shape"]),
            const(index["crops_begin"]),
            const(index["crops_end"]),
        )
    if op_type == "SpaceToBatch":
        return ov_ops.space_to_batch(
            parameter,
            const(index["block_shape"]),
            const(index["pads_begin"]),
            const(index["pads_end"]),
        )
    if op_type == "DepthToSpace":
        return ov_ops.depth_to_space(parameter, attributes["mode"], attributes["block_size"])
    return ov_ops.space_to_depth(parameter, attributes["mode"], attributes["block_size"])


def run_openvino(
    op_type: str, data: np.ndarray, index: dict | None = None, attributes: dict | None = None
) -> np.ndarray:
    """OpenVINO CPU's output, as an array of ``data``'s dtype (raw bits preserved)."""
    ov_type = OV_TYPES[data.dtype]
    parameter = ov_ops.parameter(list(data.shape), ov_type)
    model = ov.Model([build(op_type, parameter, index, attributes)], [parameter])
    compiled = CORE.compile_model(model, "CPU", CONFIG)
    result = compiled([_tensor(data)])[compiled.outputs[0]]
    return np.ascontiguousarray(result).view(np.uint8).view(data.dtype).reshape(result.shape)


def _tensor(data: np.ndarray) -> ov.Tensor:
    tensor = ov.Tensor(OV_TYPES[data.dtype], list(data.shape))
    tensor.data.view(np.uint8).reshape(-1)[:] = (
        np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    )
    return tensor


def evaluate_openvino(
    op_type: str, data: np.ndarray, index: dict | None = None, attributes: dict | None = None
) -> np.ndarray:
    """OpenVINO core's own reference implementation (``Node.evaluate``): the op's
    semantics without any plugin's precision conversions."""
    parameter = ov_ops.parameter(list(data.shape), OV_TYPES[data.dtype])
    node = build(op_type, parameter, index, attributes)
    shape = list(node.get_output_shape(0))
    out = ov.Tensor(OV_TYPES[data.dtype], shape)
    inputs = [_tensor(data)] + [ov.Tensor(np.array(v, np.int64)) for v in (index or {}).values()]
    if not node.evaluate([out], inputs):
        return None
    return np.ascontiguousarray(out.data).view(np.uint8).view(data.dtype).reshape(shape)
