"""Element types, shapes and constant values of tensors, looked up by name.

ONNX tensor names are unique across a model and its subgraphs, so one table serves every
graph; a subgraph reading an outer tensor finds it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.walk import all_graphs

INTEGER_TYPES = frozenset(
    {
        onnx.TensorProto.INT8,
        onnx.TensorProto.INT16,
        onnx.TensorProto.INT32,
        onnx.TensorProto.INT64,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.UINT16,
        onnx.TensorProto.UINT32,
        onnx.TensorProto.UINT64,
    }
)


@dataclass(frozen=True)
class TensorInfo:
    """``elem_type`` 0 and ``shape`` None mean unknown; a None dim is symbolic or unknown."""

    elem_type: int = 0
    shape: tuple[int | None, ...] | None = None

    @property
    def type_name(self) -> str:
        if not self.elem_type:
            return "unknown"
        return onnx.TensorProto.DataType.Name(self.elem_type).lower()


def info_from_type(value_type: onnx.TypeProto) -> TensorInfo:
    if not value_type.HasField("tensor_type"):
        return TensorInfo()
    tensor = value_type.tensor_type
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
            for d in tensor.shape.dim
        )
    return TensorInfo(tensor.elem_type, shape)


def _merge(old: TensorInfo | None, new: TensorInfo) -> TensorInfo:
    """Keeps the most specific facts when several declarations describe one tensor."""
    if old is None:
        return new
    elem = old.elem_type or new.elem_type
    if old.shape is None:
        shape = new.shape
    elif new.shape is None or len(new.shape) != len(old.shape):
        shape = old.shape
    else:
        shape = tuple(a if a is not None else b for a, b in zip(old.shape, new.shape, strict=True))
    return TensorInfo(elem, shape)


def collect_infos(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    infos: dict[str, TensorInfo] = {}
    for g in all_graphs(model.graph):
        for value in (*g.input, *g.output, *g.value_info):
            infos[value.name] = _merge(infos.get(value.name), info_from_type(value.type))
        for tensor in g.initializer:
            infos[tensor.name] = _merge(
                infos.get(tensor.name), TensorInfo(tensor.data_type, tuple(tensor.dims))
            )
    return infos


#: Initializers larger than this are left out of the model shape inference sees.
_SKELETON_BYTES = 1 << 16


def _data_bytes(tensor: onnx.TensorProto) -> int:
    if tensor.data_type in (0, onnx.TensorProto.STRING):
        return 0
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without the bytes of its large initializers (kept as typed stubs).

    Shape inference serialises its input: without this a model over 2 GiB could not be
    inferred at all, and every model would be copied whole. Large tensors are weights,
    never the small shape tensors inference reads.
    """
    skeleton = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "domain", "model_version"):
        setattr(skeleton, field, getattr(model, field))
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    graph, source = skeleton.graph, model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    for tensor in source.initializer:
        if _data_bytes(tensor) > _SKELETON_BYTES:
            graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        else:
            graph.initializer.append(tensor)
    return skeleton


def infer_infos(
    model: onnx.ModelProto, symbolic: dict[str, frozenset[int]] | None = None
) -> dict[str, TensorInfo]:
    """Runs ONNX shape inference on a skeleton of the model (custom nodes stay untyped) and
    reads the result. ``symbolic``, when given, receives for each tensor the axes inference
    left as named symbols (a dynamic input's dim carried through), as opposed to unknown."""
    skeleton = _skeleton(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, strict_mode=False, data_prop=True)
    except Exception:  # a model ONNX cannot infer still lowers if declared types suffice
        inferred = skeleton
    if symbolic is not None:
        for value in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info):
            axes = frozenset(
                i for i, d in enumerate(value.type.tensor_type.shape.dim) if d.HasField("dim_param")
            )
            if axes:
                symbolic[value.name] = axes
    return collect_infos(inferred)


def decode_tensor(tensor: onnx.TensorProto) -> np.ndarray:
    """A tensor's value; a tensor whose data does not match its type and shape is refused."""
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:
        raise B2SError(
            f"tensor '{tensor.name}': its data does not match its type and shape "
            f"{list(tensor.dims)} ({type(exc).__name__})"
        ) from None


def constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Tensors whose value is fixed: initializers not overridable as inputs, Constant outputs.

    Only integer constants are decoded: index inputs are the only values a lowering reads.
    """
    values: dict[str, np.ndarray] = {}
    for g in all_graphs(model.graph):
        inputs = {v.name for v in g.input}
        for tensor in g.initializer:
            if tensor.name not in inputs and tensor.data_type in INTEGER_TYPES:
                values[tensor.name] = decode_tensor(tensor)
        for node in g.node:
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                continue
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type in INTEGER_TYPES:
                    values[node.output[0]] = decode_tensor(attr.t)
                elif attr.name == "value_ints":
                    values[node.output[0]] = np.asarray(list(attr.ints), dtype=np.int64)
                elif attr.name == "value_int":
                    values[node.output[0]] = np.asarray(attr.i, dtype=np.int64)
    return values
