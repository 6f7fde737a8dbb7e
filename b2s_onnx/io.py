"""Reading and writing models: clear errors, external data, and no half-written files.

External data is read only from files inside the model's own folder: a reference that
is absolute, climbs out with ``..``, or points past the end of its file is refused before
anything is read. Writing goes to temporary files beside the target and is renamed into
place, so a failure leaves the target as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import external_data_helper, numpy_helper

from b2s_onnx.errors import B2SError
from b2s_onnx.graph.types import INTEGER_TYPES
from b2s_onnx.graph.walk import all_graphs

#: Above this a model cannot be one protobuf; external data becomes mandatory.
PROTOBUF_LIMIT = 2**31 - 1
DEFAULT_EXTERNAL_THRESHOLD = 1024


def _external_tensors(model: onnx.ModelProto):
    for graph in all_graphs(model.graph):
        yield from graph.initializer
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors


def uses_external_data(model: onnx.ModelProto) -> bool:
    return any(external_data_helper.uses_external_data(t) for t in _external_tensors(model))


def check_external_references(model: onnx.ModelProto, base: Path) -> None:
    """Refuses external-data references that leave ``base`` or lie past their file's end."""
    root = base.resolve()
    for tensor in _external_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        where = f"tensor '{tensor.name}'"
        if not location or os.path.isabs(location) or Path(location).drive:
            raise B2SError(
                f"{where}: external data location '{location}' must be a relative "
                "path inside the model's folder"
            )
        target = (root / location).resolve()
        if root not in target.parents:
            raise B2SError(
                f"{where}: external data location '{location}' leaves the model's "
                "folder (path traversal refused)"
            )
        if not target.is_file():
            raise B2SError(f"{where}: external data file '{location}' does not exist")
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else None
        except ValueError:
            raise B2SError(f"{where}: external data offset/length are not integers") from None
        size = target.stat().st_size
        if offset < 0 or (length is not None and (length < 0 or offset + length > size)):
            raise B2SError(
                f"{where}: external data [{offset}, +{length}) lies outside "
                f"'{location}' ({size} bytes)"
            )


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Loads an ONNX model and its external data; any problem is one :class:`B2SError`."""
    return load_model_with_info(path)[0]


def load_model_with_info(path: str | os.PathLike) -> tuple[onnx.ModelProto, bool]:
    """Like :func:`load_model`, also saying whether the model kept tensors in external data."""
    file = Path(path)
    if file.is_dir():
        raise B2SError(f"{file}: is a folder, not an ONNX model file")
    if not file.is_file():
        raise B2SError(f"{file}: no such file")
    try:
        model = onnx.load(str(file), load_external_data=False)
    except Exception as exc:
        raise B2SError(f"{file}: not a readable ONNX model ({type(exc).__name__})") from exc
    if uses_external_data(model):
        try:
            check_external_references(model, file.parent)
        except B2SError as exc:
            raise B2SError(f"{file}: {exc}") from None
        external_data_helper.load_external_data_for_model(model, str(file.parent))
        return model, True
    return model, False


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike,
    *,
    external_data: bool | None = None,
    size_threshold: int = DEFAULT_EXTERNAL_THRESHOLD,
) -> list[Path]:
    """Writes ``model`` atomically and returns the files written.

    ``external_data``: True writes initializers of at least ``size_threshold`` bytes to
    ``<name>.data`` beside the model (small integer tensors stay: they may be shape inputs);
    None does so only when the model would not fit in one protobuf (2 GiB). With external
    data the tensors' bytes move into the file (the proto is modified), which keeps memory
    near the model's size.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise B2SError(f"{target}: folder {folder} does not exist")
    if external_data is None:
        # Measuring a model serialises it (a copy of every weight): only near the limit.
        near_limit = _tensor_bytes(model) > PROTOBUF_LIMIT - _NON_TENSOR_HEADROOM
        external_data = near_limit and estimated_size(model) > PROTOBUF_LIMIT
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=folder))
    try:
        staged = staging / target.name
        if external_data and _mark_external(model, f"{target.name}.data", size_threshold):
            external_data_helper.write_external_data_tensors(model, str(staging))
            with open(staged, "wb") as handle:
                handle.write(model.SerializeToString())
            data_file = target.with_name(f"{target.name}.data")
            os.replace(staging / data_file.name, data_file)
            written = [data_file, target]
        else:
            with open(staged, "wb") as handle:
                handle.write(model.SerializeToString())
                handle.flush()
                os.fsync(handle.fileno())
            written = [target]
        os.replace(staged, target)
        return written
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)


#: Integer tensors up to this many elements stay in the model: they may be shape inputs
#: (Reshape targets, axes, pads), which onnxruntime cannot read from external data.
SHAPE_LIKE_ELEMENTS = 1024


def _mark_external(model: onnx.ModelProto, location: str, size_threshold: int) -> bool:
    """Marks the tensors that go to ``location``; returns whether any does."""
    marked = False
    for graph in all_graphs(model.graph):
        for tensor in graph.initializer:
            if external_data_helper.uses_external_data(tensor):
                continue
            if tensor.data_type in INTEGER_TYPES and _elements(tensor) <= SHAPE_LIKE_ELEMENTS:
                continue
            if _elements(tensor) * _itemsize(tensor) < size_threshold:
                continue
            if not tensor.HasField("raw_data"):
                array = numpy_helper.to_array(tensor)
                tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
            external_data_helper.set_external_data(tensor, location)
            marked = True
    return marked


def _itemsize(tensor: onnx.TensorProto) -> int:
    if tensor.data_type in (0, onnx.TensorProto.STRING):
        return 0
    return onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _elements(tensor: onnx.TensorProto) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count


#: Bytes of nodes, names and value infos no real model comes near.
_NON_TENSOR_HEADROOM = 1 << 28


def _tensor_bytes(model: onnx.ModelProto) -> int:
    return sum(
        _elements(tensor) * _itemsize(tensor)
        for graph in all_graphs(model.graph)
        for tensor in graph.initializer
    )


def estimated_size(model: onnx.ModelProto) -> int:
    """The model's size in bytes. Exact for models under 256 MiB of tensors; above, from
    tensor shapes, since ``ModelProto.ByteSize()`` serialises the model, which costs another
    copy of every weight."""
    tensors = _tensor_bytes(model)
    if tensors < 1 << 28:
        return model.ByteSize()
    return tensors + (1 << 20)  # nodes, names and value infos: generously


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
