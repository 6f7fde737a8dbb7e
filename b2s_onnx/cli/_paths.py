"""Paths users give on the command line, checked before any work starts.

Every mistake is a :class:`B2SError` (exit 2) naming the path once and saying what to do: a
folder where a file is expected, a file of the wrong kind (with the command that reads it),
an output whose folder does not exist. Outputs are validated up front so that a long run
never fails at its very end because of a typo in ``--json``.
"""

from __future__ import annotations

from pathlib import Path

from b2s_onnx.errors import B2SError

#: The command that reads each kind of model file.
_READER = {".onnx": "b2s-onnx lower or b2s-onnx check", ".xml": "b2s-onnx convert"}


def model_file(path: Path, suffix: str, command: str) -> Path:
    """The model file ``command`` reads (``suffix`` ".onnx" or ".xml").

    ``convert`` accepts a folder holding exactly one ``.xml``; other commands refuse folders.
    """
    if path.is_dir():
        if suffix != ".xml":
            raise B2SError(f"{path}: is a folder; {command} expects a {suffix} file")
        found = sorted(path.glob("*.xml"))
        if len(found) != 1:
            names = ", ".join(p.name for p in found) if found else "none"
            raise B2SError(
                f"{path}: is a folder with {len(found)} .xml files ({names}); "
                f"give the {suffix} file to convert"
            )
        return found[0]
    if not path.exists():
        raise B2SError(f"{path}: no such file")
    given = path.suffix.lower()
    if given != suffix and given in _READER:
        kind = "an ONNX model" if given == ".onnx" else "an OpenVINO IR"
        raise B2SError(f"{path}: is {kind}, which {command} does not read; use {_READER[given]}")
    return path


def output_file(given: str, source: Path, suffix: str = ".onnx") -> Path:
    """Where to write: ``given``, or ``given/<source stem><suffix>`` for a folder (an existing
    one, or a path written with a trailing slash). Its folder must exist."""
    path = Path(given)
    if path.is_dir() or given.endswith(("/", "\\")):
        path = path / f"{source.stem}{suffix}"
    return writable_file(path)


def writable_file(path: Path, option: str = "") -> Path:
    """``path`` can be written: not a folder, and its folder exists."""
    label = f"{option} {path}" if option else str(path)
    if path.is_dir():
        raise B2SError(f"{label}: is a folder; give a file name")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise B2SError(f"{label}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise B2SError(
            f"{label}: the folder {parent} does not exist (create it first: mkdir -p {parent})"
        )
    return path
