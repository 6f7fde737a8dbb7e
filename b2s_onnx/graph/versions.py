"""Which opset a lowered model targets and which IR version it declares.

onnx >= 1.23 stamps IR version 14 on new models while onnxruntime 1.31 reads at most 13,
so every model we write declares the lowest IR version its opsets need, but never more
than onnxruntime reads (nor less than the input model declared, unless that is too new).
"""

from __future__ import annotations

import re

import onnx
from onnx import helper, version_converter

from b2s_onnx.errors import B2SError

MIN_OPSET = 13
MAX_OPSET = 21
#: The newest IR version the supported onnxruntime releases load (a test pins this).
MAX_RUNTIME_IR_VERSION = 13


def default_opset(model: onnx.ModelProto) -> int | None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return None


def required_ir_version(opset: int) -> int:
    """The first IR version that onnx released together with ``opset``."""
    for _release, ir_version, ai_onnx, *_rest in helper.VERSION_TABLE:
        if ai_onnx >= opset:
            return ir_version
    raise B2SError(f"opset {opset} is newer than this onnx package knows")


def resolve_opset(model: onnx.ModelProto, requested: int | None) -> onnx.ModelProto:
    """Returns the model at the target opset, converting with onnx's version converter."""
    current = default_opset(model)
    if requested is not None and not MIN_OPSET <= requested <= MAX_OPSET:
        raise B2SError(f"--opset {requested} is outside the supported {MIN_OPSET}..{MAX_OPSET}")
    target = requested if requested is not None else max(current or MIN_OPSET, MIN_OPSET)
    if current is None:
        model.opset_import.append(helper.make_opsetid("", target))
        return model
    if current == target:
        return model
    try:
        converted = version_converter.convert_version(model, target)
    except Exception as exc:
        raise B2SError(
            f"cannot convert the model from opset {current} to opset {target}: "
            f"{_conversion_blocker(str(exc), target)}"
        ) from exc
    return converted


def _conversion_blocker(message: str, target: int) -> str:
    """Which op blocks which opset, from onnx's version-converter assertion text."""
    found = re.search(r"No Adapter (From|To) Version \$?(\d+) for (\w+)", message)
    if found is None:
        text = message.strip()
        return text.splitlines()[-1].split("failed: ")[-1] if text else "unknown reason"
    direction, version, op = found.groups()
    if direction == "From":
        return (
            f"{op} (opset {version}) has no conversion to an older version; "
            f"opset {target} is below what {op} needs here (try --opset {version} or newer)"
        )
    return f"{op} has no conversion to opset {version}"


def choose_ir_version(model: onnx.ModelProto) -> int:
    opset = default_opset(model) or MIN_OPSET
    needed = required_ir_version(opset)
    chosen = min(max(model.ir_version, needed), MAX_RUNTIME_IR_VERSION)
    if chosen < needed:
        raise B2SError(
            f"opset {opset} needs IR version {needed}, newer than onnxruntime reads "
            f"({MAX_RUNTIME_IR_VERSION})"
        )
    return chosen
