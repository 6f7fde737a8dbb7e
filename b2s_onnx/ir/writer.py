"""Writing a converted model whose large weights are still numpy arrays, without first
copying them into the protobuf.

Putting a weight into a ``TensorProto`` copies it, and serialising the model copies it
again; for a large IR these copies cost more than the whole conversion. Protobuf parsers
merge repeated occurrences of an embedded message field, so the file can be written as
the model without those initializers, followed by a second ``graph`` field that holds
only them, each one's ``raw_data`` written straight from the array's memory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.errors import B2SError

_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_LENGTH_DELIMITED = 2
#: Protobuf's hard limit on one serialised message.
PROTOBUF_LIMIT = 2**31 - 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, length: int) -> bytes:
    """The key and length prefix of a length-delimited field."""
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(length)


def _little_endian(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if sys.byteorder != "little" or array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array


def _tensor_chunks(name: str, array: np.ndarray) -> list[bytes | memoryview]:
    """One serialised ``initializer`` entry: its header, then its bytes as a view."""
    data = _little_endian(array)
    header = onnx.TensorProto(
        name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape
    ).SerializeToString()
    raw = memoryview(data.reshape(-1).view(np.uint8))
    body = header + _field(_RAW_DATA, len(raw))
    return [_field(_INITIALIZER, len(body) + len(raw)), body, raw]


def stream_size(model: onnx.ModelProto, late: dict[str, np.ndarray]) -> int:
    """An upper bound of the written file's size (the stubs are counted twice)."""
    return model.ByteSize() + sum(a.nbytes + len(n) + 64 for n, a in late.items())


def save_with_late_tensors(
    model: onnx.ModelProto, late: dict[str, np.ndarray], path: str | os.PathLike
) -> Path:
    """Writes ``model`` with the initializers named in ``late`` (typed stubs in the model)
    filled from those arrays, atomically, as one protobuf file of under 2 GiB."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise B2SError(f"{target}: folder {folder} does not exist")
    head = onnx.ModelProto()
    head.CopyFrom(model)  # small: the stubs carry no data
    kept = [t for t in head.graph.initializer if t.name not in late]
    head.graph.ClearField("initializer")
    head.graph.initializer.extend(kept)
    tensors = [
        _tensor_chunks(t.name, late[t.name]) for t in model.graph.initializer if t.name in late
    ]
    graph_length = sum(len(chunk) for parts in tensors for chunk in parts)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=folder))
    try:
        staged = staging / target.name
        with open(staged, "wb") as handle:
            handle.write(head.SerializeToString())
            handle.write(_field(_GRAPH, graph_length))
            for parts in tensors:
                for chunk in parts:
                    handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, target)
        return target
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
