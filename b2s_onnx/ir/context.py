"""What a layer converter works with: input tensors, known constants, shapes, and a place
to emit ONNX nodes.

Converters never invent tensor names for layer outputs: ``out(layer, k)`` is the name
the converted graph uses for output port ``k`` (the port's IR name where it has one), so
users find their inputs and outputs under the names OpenVINO shows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import IRModel, Layer
from b2s_onnx.ir.weights import element_type, onnx_type
from b2s_onnx.lowering._emit import NameAllocator

NUMPY_OF_ONNX = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT8: np.int8,
    TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.BOOL: np.bool_,
}


class ConversionContext:
    def __init__(self, model: IRModel, opset: int) -> None:
        self.model = model
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, TensorProto] = {}
        self.names = NameAllocator(set())
        #: (layer id, output port id) -> tensor name
        self.tensors: dict[tuple[str, int], str] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, int] = {}
        self.shapes: dict[str, tuple[int | None, ...] | None] = {}
        self._layer: Layer | None = None

    # -- naming ----------------------------------------------------------------------

    def assign_output_names(self, layer: Layer) -> None:
        """Reserves the ONNX names of a layer's outputs before it is converted."""
        single = len(layer.outputs) == 1
        for port in layer.outputs:
            if port.names:
                base = port.names[0]
            elif layer.type == "Parameter" or single:
                base = layer.name
            else:
                base = f"{layer.name}.{port.id}"
            name = self.names.fresh(base)
            self.tensors[(layer.id, port.id)] = name
            ir_type = element_type(port.precision, layer.where()) if port.precision else None
            if ir_type is not None:
                self.types[name] = onnx_type(ir_type)
            self.shapes[name] = port.dims

    def out(self, layer: Layer, index: int = 0) -> str:
        if index >= len(layer.outputs):
            raise B2SError(
                f"{layer.where()}: declares {len(layer.outputs)} output port(s); this op "
                f"has output {index} too"
            )
        return self.tensors[(layer.id, layer.outputs[index].id)]

    def inputs(self, layer: Layer) -> list[str]:
        names = []
        for port in layer.inputs:
            source_layer, source_port = self.model.sources[(layer.id, port.id)]
            names.append(self.tensors[(source_layer, source_port)])
        return names

    def tmp(self, hint: str) -> str:
        base = self._layer.name if self._layer is not None else "b2s"
        return self.names.fresh(f"{base}/{hint}")

    # -- facts ---------------------------------------------------------------------------

    def value(self, tensor: str) -> np.ndarray | None:
        return self.constants.get(tensor)

    def require_value(self, layer: Layer, tensor: str, what: str) -> np.ndarray:
        value = self.constants.get(tensor)
        if value is None:
            raise B2SError(f"{layer.where()}: {what} must be a constant to convert this layer")
        return value

    def shape(self, tensor: str) -> tuple[int | None, ...] | None:
        return self.shapes.get(tensor)

    def rank(self, layer: Layer, tensor: str) -> int:
        shape = self.shapes.get(tensor)
        if shape is None:
            raise B2SError(f"{layer.where()}: the rank of '{tensor}' is unknown")
        return len(shape)

    def type_of(self, tensor: str) -> int:
        return self.types.get(tensor, TensorProto.FLOAT)

    # -- emitting ------------------------------------------------------------------------

    def begin(self, layer: Layer) -> None:
        self._layer = layer

    def const(self, hint: str, value: np.ndarray | Sequence, dtype=None) -> str:
        array = np.asarray(value, dtype=dtype)
        if array.dtype == np.float16:
            array = array.astype(np.float32)
        name = self.tmp(hint)
        self.add_constant(name, array)
        return name

    def add_constant(self, name: str, array: np.ndarray) -> None:
        if array.dtype == np.float16:
            array = array.astype(np.float32)
        self.constants[name] = array
        self.initializers[name] = numpy_helper.from_array(array, name)
        self.types[name] = helper.np_dtype_to_tensor_dtype(array.dtype)
        self.shapes[name] = tuple(array.shape)

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str] | str | None = None,
        *,
        domain: str = "",
        hint: str | None = None,
        **attrs,
    ) -> list[str]:
        """Adds a node; ``outputs`` are names, or None for one fresh output."""
        if outputs is None:
            outputs = [self.tmp(hint or op_type.lower())]
        elif isinstance(outputs, str):
            outputs = [outputs]
        layer_name = self._layer.name if self._layer is not None else op_type
        self.nodes.append(
            helper.make_node(
                op_type,
                list(inputs),
                list(outputs),
                domain=domain,
                name=self.names.fresh(f"{layer_name}/{hint or op_type}"),
                **attrs,
            )
        )
        return list(outputs)

    def one(self, op_type: str, inputs: Sequence[str], output: str | None = None, **attrs) -> str:
        return self.node(op_type, inputs, output, **attrs)[0]

    # -- opset-dependent forms ------------------------------------------------------

    def reduce(
        self,
        op_type: str,
        data: str,
        axes: Sequence[int] | None,
        keepdims: bool,
        output: str | None = None,
    ) -> str:
        """Reduce* with axes as an input (opset >= 18, and ReduceSum >= 13) or attribute."""
        keep = int(keepdims)
        if axes is None:
            return self.one(op_type, [data], output, keepdims=keep)
        if self.opset >= 18 or op_type == "ReduceSum":
            return self.one(
                op_type,
                [data, self.const("axes", np.asarray(axes, np.int64))],
                output,
                keepdims=keep,
            )
        return self.one(op_type, [data], output, axes=[int(a) for a in axes], keepdims=keep)

    def int64(self, tensor: str) -> str:
        if self.type_of(tensor) == TensorProto.INT64:
            return tensor
        return self.one("Cast", [tensor], to=TensorProto.INT64)
