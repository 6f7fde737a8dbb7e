"""Reading ``<data>`` attributes with one clear error for a value of the wrong form."""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import Layer

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}


def _raw(layer: Layer, key: str, default: str | None) -> str:
    if key in layer.data:
        return layer.data[key]
    if default is None:
        raise B2SError(f"{layer.where()}: missing attribute '{key}'")
    return default


def ints(layer: Layer, key: str, default: str | None = None) -> list[int]:
    text = _raw(layer, key, default).strip().strip("[]")
    if not text:
        return []
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise B2SError(
            f"{layer.where()}: attribute {key}='{text}' is not a list of integers"
        ) from None


def floats(layer: Layer, key: str, default: str | None = None) -> list[float]:
    text = _raw(layer, key, default).strip().strip("[]")
    if not text:
        return []
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise B2SError(
            f"{layer.where()}: attribute {key}='{text}' is not a list of numbers"
        ) from None


def integer(layer: Layer, key: str, default: int | None = None) -> int:
    text = _raw(layer, key, None if default is None else str(default)).strip()
    try:
        return int(text)
    except ValueError:
        raise B2SError(f"{layer.where()}: attribute {key}='{text}' is not an integer") from None


def number(layer: Layer, key: str, default: float | None = None) -> float:
    text = _raw(layer, key, None if default is None else repr(default)).strip()
    try:
        return float(text)
    except ValueError:
        raise B2SError(f"{layer.where()}: attribute {key}='{text}' is not a number") from None


def flag(layer: Layer, key: str, default: bool | None = None) -> bool:
    text = _raw(layer, key, None if default is None else str(default)).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise B2SError(f"{layer.where()}: attribute {key}='{text}' is not a boolean")


def choice(layer: Layer, key: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    text = _raw(layer, key, default).strip().lower()
    if text not in allowed:
        raise B2SError(
            f"{layer.where()}: attribute {key}='{text}' is not one of {', '.join(allowed)}"
        )
    return text


def check_broadcast(layer: Layer) -> None:
    """numpy broadcasting (and 'none', same shapes) are ONNX's own; PDPD's is not."""
    mode = layer.data.get("auto_broadcast", "numpy").strip().lower()
    if mode not in ("numpy", "none"):
        raise B2SError(
            f"{layer.where()}: auto_broadcast='{mode}' is not supported (numpy and none are)"
        )
