"""The table of IR layer converters, keyed by (layer type, opset version).

A converter module registers its functions with :func:`converts`; the README's table of
supported ops is generated from this registry, so the docs cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.reader import Layer

Converter = Callable[[ConversionContext, Layer, list[str]], None]

CONVERTERS: dict[tuple[str, str], Converter] = {}


def converts(layer_type: str, versions: Iterable[str | int] = ("opset1",)) -> Callable:
    """Registers a converter for ``layer_type`` at each of ``versions`` (1 = "opset1")."""

    def register(function: Converter) -> Converter:
        for version in versions:
            key = version if isinstance(version, str) else f"opset{version}"
            CONVERTERS[(layer_type, key)] = function
        return function

    return register


def find(layer: Layer) -> Converter | None:
    return CONVERTERS.get((layer.type, layer.version))


def supported_ops() -> list[tuple[str, str]]:
    return sorted(CONVERTERS, key=lambda k: (k[0], int(k[1].removeprefix("opset") or 0)))


def markdown_table() -> str:
    """The supported IR layers as Markdown, generated from this registry."""
    versions: dict[str, list[str]] = {}
    for layer_type, version in supported_ops():
        versions.setdefault(layer_type, []).append(version.removeprefix("opset"))
    lines = [
        "# Supported OpenVINO IR layers",
        "",
        "Generated from the converter registry by `python -m b2s_onnx.ir.converters`;",
        "a test fails when this file and the registry disagree. `Parameter`, `Const` and",
        "`Result` are always supported. Data-movement layers are lowered by the same rules as",
        "`b2s-onnx lower`.",
        "",
        "| layer type | opset versions |",
        "|---|---|",
    ]
    lines += [f"| {name} | {', '.join(v)} |" for name, v in sorted(versions.items())]
    return "\n".join(lines) + "\n"
