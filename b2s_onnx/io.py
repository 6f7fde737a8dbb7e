"""Reading and writing models with clear errors and without half-written files."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import onnx

from b2s_onnx.errors import B2SError


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Loads an ONNX model; any problem is one :class:`B2SError` naming the file."""
    file = Path(path)
    if not file.is_file():
        raise B2SError(f"{file}: no such file")
    try:
        return onnx.load(str(file))
    except Exception as exc:
        raise B2SError(f"{file}: not a readable ONNX model ({type(exc).__name__})") from exc


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Writes ``model`` atomically: a temporary file beside the target, then a rename.

    A failure at any point leaves the target as it was (absent or the previous file).
    """
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise B2SError(f"{target}: folder {target.parent} does not exist")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(model.SerializeToString())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
