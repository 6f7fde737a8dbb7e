"""What a layer converter works with: input tensors, known constants, shapes, and a place
to emit ONNX nodes.

Converters never invent tensor names for layer outputs: ``out(layer, k)`` is the name
the converted graph uses for output port ``k`` (the port's IR name where it has one), so
users find their inputs and outputs under the names OpenVINO shows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.quantization import DequantizedConstants
from b2s_onnx.ir.reader import IRModel, Layer
from b2s_onnx.ir.weights import Weights, element_type, onnx_type
from b2s_onnx.lowering._emit import NameAllocator

#: Float types OpenVINO's CPU plugin computes in f32 under the f32 precision hint.
NARROW_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
#: Float constants larger than this join the ONNX graph last, without an extra copy.
LATE_TENSOR_BYTES = 1 << 16

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


#: Weights at least this large are widened to f32 by several threads (numpy releases the
#: GIL while converting; f16 -> f32 dominates converting an FP16 IR).
_PARALLEL_WIDEN_BYTES = 1 << 20
_WIDEN_THREADS = max(1, min(4, os.cpu_count() or 1))


def widen_to_f32(array: np.ndarray) -> np.ndarray:
    """``array.astype(float32)``, exact for f16 and bf16, in chunks across threads when
    large."""
    if array.nbytes < _PARALLEL_WIDEN_BYTES or _WIDEN_THREADS == 1:
        return array.astype(np.float32)
    out = np.empty(array.shape, np.float32)
    source, target = array.reshape(-1), out.reshape(-1)
    step = -(-source.size // _WIDEN_THREADS)
    starts = range(0, source.size, step)
    with ThreadPoolExecutor(_WIDEN_THREADS) as pool:
        list(pool.map(lambda i: np.copyto(target[i : i + step], source[i : i + step]), starts))
    return out


class ConversionContext:
    def __init__(self, model: IRModel, opset: int) -> None:
        self.model = model
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, TensorProto] = {}
        #: Constants whose ONNX tensor is built late (large float weights), in the order
        #: recorded (a dict, not a set: the written model's bytes must not depend on
        #: Python's string hashing).
        self.late_initializers: dict[str, None] = {}
        self.names = NameAllocator(set())
        #: (layer id, output port id) -> tensor name
        self.tensors: dict[tuple[str, int], str] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, int] = {}
        self.shapes: dict[str, tuple[int | None, ...] | None] = {}
        self._layer: Layer | None = None
        #: How FakeQuantize is written: "qdq" (Quantize/DequantizeLinear where exact) or
        #: "float" (its arithmetic).
        self.int8 = "qdq"
        #: Whether patterns may convert as one faster op (``--no-fuse`` converts layer by
        #: layer): a recurrent cell over time as one ONNX sequence op.
        self.fuse = True
        #: Integer provenance of folded weight constants (see ``b2s_onnx.ir.quantization``).
        self.dequantized = DequantizedConstants()
        #: Remarks for the conversion report (what was kept in another form, and why).
        self.notes: list[str] = []
        #: Where Const layers read their data (set by the driver; bodies share it).
        self.weights: Weights | None = None

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

    def is_read(self, layer: Layer, index: int) -> bool:
        """Whether any layer reads output ``index`` of ``layer`` (an unread optional output
        need not be computed)."""
        wanted = (layer.id, layer.outputs[index].id)
        return any(source == wanted for source in self.model.sources.values())

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
        name = self.tmp(hint)
        self.add_constant(name, array)
        return name

    def add_constant(self, name: str, array: np.ndarray) -> None:
        """Records a constant. Large float tensors get their ONNX tensor only when the model
        is assembled (see ``tensor_proto``): building it now would copy every weight."""
        if array.dtype in NARROW_FLOATS:
            array = widen_to_f32(array)
        self.constants[name] = array
        if array.dtype.kind == "f" and array.nbytes > LATE_TENSOR_BYTES:
            self.late_initializers[name] = None
        else:
            self.initializers[name] = numpy_helper.from_array(array, name)
        self.types[name] = helper.np_dtype_to_tensor_dtype(array.dtype)
        self.shapes[name] = tuple(array.shape)

    def is_initializer(self, name: str) -> bool:
        return name in self.initializers or name in self.late_initializers

    def tensor_proto(self, name: str) -> TensorProto:
        """The ONNX tensor of a constant, built now if it was deferred."""
        if name in self.initializers:
            return self.initializers[name]
        return numpy_helper.from_array(self.constants[name], name)

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
