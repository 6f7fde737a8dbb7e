"""The table of IR layer converters, keyed by (layer type, opset version).

A converter module registers its functions with :func:`converts`, declaring beside each
the inputs it takes and the attributes it reads (:mod:`schema`); :func:`prepare` checks
both for a layer before anything is converted. The README's table of supported ops is
generated from this registry, so the docs cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.schema import Schema, validate
from b2s_onnx.ir.converters.structural import (
    STRUCTURAL,
    check_inputs,
    check_outputs,
    check_structural,
)
from b2s_onnx.ir.inexpressible import INEXPRESSIBLE, NOT_YET
from b2s_onnx.ir.openvino_opsets import LATEST, all_versions
from b2s_onnx.ir.reader import Layer

Converter = Callable[[ConversionContext, Layer, list[str]], None]


@dataclass(frozen=True)
class Registration:
    converter: Converter
    #: The attributes the converter reads; None only for converters not yet described.
    attrs: Schema | None
    #: (fewest, most) inputs; None only for converters not yet described.
    inputs: tuple[int, int] | None


CONVERTERS: dict[tuple[str, str], Converter] = {}
REGISTRATIONS: dict[tuple[str, str], Registration] = {}
#: What ``converts`` put in CONVERTERS, to tell a swapped entry from the registered one.
_REGISTERED: dict[tuple[str, str], Converter] = {}
#: OpenVINO looks layer types up case-insensitively (``Relu`` is ``ReLU``).
_CANONICAL: dict[str, str] = {name.lower(): name for name in STRUCTURAL}


def converts(
    layer_type: str,
    versions: Iterable[str | int] = ("opset1",),
    *,
    attrs: Schema | None = None,
    inputs: tuple[int, int] | None = None,
) -> Callable[[Converter], Converter]:
    """Registers a converter for ``layer_type`` at each of ``versions`` (1 = "opset1"),
    with the attributes it reads (``attrs``) and how many inputs it takes (``inputs``)."""

    def register(function: Converter) -> Converter:
        for version in versions:
            key = (layer_type, version if isinstance(version, str) else f"opset{version}")
            CONVERTERS[key] = function
            _REGISTERED[key] = function
            REGISTRATIONS[key] = Registration(
                function, None if attrs is None else dict(attrs), inputs
            )
        _CANONICAL[layer_type.lower()] = layer_type
        return function

    return register


def canonical_type(layer_type: str) -> str:
    """The registered spelling of ``layer_type`` (types match case-insensitively)."""
    return _CANONICAL.get(layer_type.lower(), layer_type)


def registration(layer: Layer) -> Registration | None:
    """The layer's converter with its declaration; an entry swapped in :data:`CONVERTERS`
    (the public table) takes precedence over the registered one."""
    key = (canonical_type(layer.type), layer.version)
    found = REGISTRATIONS.get(key)
    if found is None:
        return None
    swapped = CONVERTERS.get(key)
    if swapped is None or swapped is _REGISTERED.get(key):
        return found
    return replace(found, converter=swapped)


def find(layer: Layer) -> Converter | None:
    found = registration(layer)
    return None if found is None else found.converter


def prepare(layer: Layer, path: Path | None = None) -> None:
    """Checks a layer against its converter's declaration before conversion starts: the
    type is spelled as registered, the input count fits, and every declared attribute is
    parsed and checked into ``layer.attrs``. Parameter, Const and Result are checked
    against their own schemas (:mod:`structural`)."""
    layer.type = canonical_type(layer.type)
    if check_structural(layer, path or Path("?")):
        return
    found = registration(layer)
    if found is None:
        return
    if found.inputs is not None:
        check_inputs(layer, found.inputs)
    check_outputs(layer)
    if found.attrs is not None:
        layer.attrs = validate(layer, found.attrs)


def supported_ops() -> list[tuple[str, str]]:
    return sorted(CONVERTERS, key=lambda k: (k[0], int(k[1].removeprefix("opset") or 0)))


def missing_ops() -> dict[str, list[str]]:
    """Op versions of OpenVINO's opsets 1-{LATEST} without a converter: type -> versions."""
    registered = {(name.lower(), version) for name, version in CONVERTERS}
    missing: dict[str, list[str]] = {}
    for name, versions in all_versions().items():
        absent = [v for v in versions if (name.lower(), v) not in registered]
        if absent:
            missing[name] = absent
    return missing


def _numbers(versions: Iterable[str]) -> str:
    return ", ".join(v.removeprefix("opset") for v in versions)


def markdown_table() -> str:
    """The supported IR layers as Markdown, generated from this registry, followed by the
    op types of the tabulated opsets (1 to ``LATEST``) it lacks: those no ONNX graph can
    compute, with the reason, then any not converted yet."""
    versions: dict[str, list[str]] = {}
    for layer_type, version in supported_ops():
        versions.setdefault(layer_type, []).append(version)
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
    lines += [f"| {name} | {_numbers(v)} |" for name, v in sorted(versions.items())]
    missing = missing_ops()
    inexpressible = {name: v for name, v in missing.items() if name in INEXPRESSIBLE}
    lines += [
        "",
        "## Not expressible in ONNX",
        "",
        f"{len(inexpressible)} op type(s) of OpenVINO opsets 1-{LATEST} that no ONNX graph "
        "computes; `--keep-unsupported` writes them as custom-domain nodes.",
        "",
        "| layer type | opset versions | reason |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {_numbers(v)} | {INEXPRESSIBLE[name]} |"
        for name, v in sorted(inexpressible.items())
    ]
    pending = {name: v for name, v in missing.items() if name not in INEXPRESSIBLE}
    lines += ["", "## Not converted yet", ""]
    if pending:
        lines += [
            f"{len(pending)} op type(s) of OpenVINO opsets 1-{LATEST} have no converter for "
            "these versions yet (ONNX could compute them).",
            "",
            "| layer type | opset versions | why not yet |",
            "|---|---|---|",
        ]
        lines += [
            f"| {name} | {_numbers(v)} | {NOT_YET.get(name, 'not yet written')} |"
            for name, v in sorted(pending.items())
        ]
    else:
        lines.append(f"None: every other op type of OpenVINO opsets 1-{LATEST} converts.")
    return "\n".join(lines) + "\n"
