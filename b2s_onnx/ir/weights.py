"""Element types of the IR and Const data from the ``.bin`` file, checked before use."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import Layer, parse_shape

#: IR element type -> (numpy dtype, ONNX type); what f16/bf16 compute in: see ``onnx_type``.
ELEMENT_TYPES: dict[str, tuple[np.dtype, int]] = {
    "f32": (np.dtype(np.float32), TensorProto.FLOAT),
    "f16": (np.dtype(np.float16), TensorProto.FLOAT16),
    "f64": (np.dtype(np.float64), TensorProto.DOUBLE),
    "bf16": (np.dtype(ml_dtypes.bfloat16), TensorProto.BFLOAT16),
    "i8": (np.dtype(np.int8), TensorProto.INT8),
    "i16": (np.dtype(np.int16), TensorProto.INT16),
    "i32": (np.dtype(np.int32), TensorProto.INT32),
    "i64": (np.dtype(np.int64), TensorProto.INT64),
    "u8": (np.dtype(np.uint8), TensorProto.UINT8),
    "u16": (np.dtype(np.uint16), TensorProto.UINT16),
    "u32": (np.dtype(np.uint32), TensorProto.UINT32),
    "u64": (np.dtype(np.uint64), TensorProto.UINT64),
    "boolean": (np.dtype(np.bool_), TensorProto.BOOL),
    # Packed in the .bin file (see SUB_BYTE_BITS), one byte per element once read.
    "u4": (np.dtype(np.uint8), TensorProto.UINT8),
    "i4": (np.dtype(np.int8), TensorProto.INT8),
    "u1": (np.dtype(np.uint8), TensorProto.UINT8),
}
#: Bits per element of the packed types: u4/i4 low nibble first, u1 most significant bit first.
SUB_BYTE_BITS = {"u4": 4, "i4": 4, "u1": 1}
#: v10 port precisions spell types differently.
PRECISIONS = {
    "FP32": "f32",
    "FP16": "f16",
    "FP64": "f64",
    "BF16": "bf16",
    "I8": "i8",
    "I16": "i16",
    "I32": "i32",
    "I64": "i64",
    "U8": "u8",
    "U16": "u16",
    "U32": "u32",
    "U64": "u64",
    "BOOL": "boolean",
    "BOOLEAN": "boolean",
    "U4": "u4",
    "I4": "i4",
    "U1": "u1",
    "BIN": "u1",
}


def element_type(name: str, where: str) -> str:
    """Normalises an element type or precision name; refuses unknown ones."""
    key = name.strip()
    if key in ELEMENT_TYPES:
        return key
    if key.upper() in PRECISIONS:
        return PRECISIONS[key.upper()]
    if key.lower() in ELEMENT_TYPES:
        return key.lower()
    raise B2SError(
        f"{where}: element type '{name}' is not supported (supported: {', '.join(ELEMENT_TYPES)})"
    )


def onnx_type(ir_type: str) -> int:
    """The ONNX type a tensor of ``ir_type`` is computed in: f16 and bf16 as f32, as
    OpenVINO's CPU plugin does under the f32 inference-precision hint (and onnxruntime
    has few kernels for either)."""
    return TensorProto.FLOAT if ir_type in ("f16", "bf16") else ELEMENT_TYPES[ir_type][1]


class Weights:
    """The ``.bin`` file, memory-mapped read-only: a Const's array is a view of the map,
    so weights are copied only where they go (into the ONNX file, or the model).

    Const values are read-only arrays: converters derive new arrays, never edit these.
    """

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path is not None else None
        self._size: int | None = None
        self._map: mmap.mmap | bytes = b""
        if self.path is not None:
            if not self.path.is_file():
                raise B2SError(f"{self.path}: no such file (the IR's weights)")
            self._size = self.path.stat().st_size
            if self._size:
                with open(self.path, "rb") as handle:
                    self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def const(self, layer: Layer) -> np.ndarray:
        where = layer.where()
        data = layer.data
        for key in ("element_type", "shape", "offset", "size"):
            if key not in data:
                raise B2SError(f"{where}: missing <data {key}=...>")
        ir_type = element_type(data["element_type"], where)
        dtype = ELEMENT_TYPES[ir_type][0]
        shape = parse_shape(data["shape"], Path(self.path or "?"), where)
        if shape is None or any(d is None for d in shape):
            raise B2SError(f"{where}: a Const must have a static shape, got '{data['shape']}'")
        try:
            offset, size = int(data["offset"]), int(data["size"])
        except ValueError:
            raise B2SError(f"{where}: offset/size must be integers") from None
        if offset < 0 or size < 0:
            raise B2SError(f"{where}: negative offset {offset} or size {size}")
        count = int(np.prod(shape, dtype=object))
        bits = SUB_BYTE_BITS.get(ir_type)
        expected = count * dtype.itemsize if bits is None else -(-count * bits // 8)
        # An empty Const reads nothing; OpenVINO's serializer still stores a byte for it.
        if size != expected and count:
            element = f"{dtype.itemsize} bytes" if bits is None else f"{bits} bit(s), packed,"
            raise B2SError(
                f"{where}: size {size} does not match shape {list(shape)} x {element} = {expected}"
            )
        if self._size is None or self.path is None:
            raise B2SError(f"{where}: needs a .bin file")
        if offset + size > self._size:
            raise B2SError(
                f"{where}: bytes {offset}..{offset + size} lie past the end of "
                f"{self.path} ({self._size} bytes)"
            )
        if ir_type == "boolean":
            raw = np.frombuffer(self._map, np.uint8, count=count, offset=offset)
            return raw.astype(np.bool_).reshape(shape)
        if ir_type in SUB_BYTE_BITS:
            packed = np.frombuffer(self._map, np.uint8, count=size, offset=offset)
            return _unpack(packed, ir_type, count).reshape(shape)
        return np.frombuffer(self._map, dtype, count=count, offset=offset).reshape(shape)


def raw_bytes(array: np.ndarray) -> bytes:
    """``array``'s bytes as ONNX stores them (little-endian, C order): the bytes object a
    weight was read into when ``array`` views all of it, else a copy."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if (
        isinstance(base, bytes)
        and len(base) == array.nbytes
        and array.flags.c_contiguous
        and sys.byteorder == "little"
        and array.dtype.byteorder in "=|<"
    ):
        return base
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def _unpack(raw: np.ndarray, ir_type: str, count: int) -> np.ndarray:
    """One byte per element from packed u4/i4 (low nibble first; i4 sign-extended) or u1
    (most significant bit first)."""
    if ir_type == "u1":
        return np.unpackbits(raw, bitorder="big")[:count]
    nibbles = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1)[:count]
    if ir_type == "u4":
        return nibbles.astype(np.uint8)
    return ((nibbles.astype(np.int16) ^ 8) - 8).astype(np.int8)
