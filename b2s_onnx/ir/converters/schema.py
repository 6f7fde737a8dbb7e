"""Declarative attribute schemas: what each converter may read from a layer's ``<data>``.

An IR comes from anywhere, and a converter that parses raw attribute strings itself will
sooner or later write an ONNX model that onnxruntime refuses (a 2-D convolution with one
dilation) or leak a helper's error (an empty ``strides``). So every converter declares its
attributes next to its registration: type, default or requirement, allowed values, and
length rules tied to the input ranks the IR declares. All of it is checked once, before any
layer is converted, with an error that names the layer, the attribute and the rule; the
converter then reads typed values only, and reading an attribute its schema does not declare
is a bug of ours (it raises :class:`UndeclaredAttributeError`, which tests catch).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import Layer
from b2s_onnx.ir.weights import element_type

#: Length rule: one value per spatial axis of input 0 (its rank minus batch and channels).
SPATIAL = "spatial"
#: Length rule: one value per axis of input 0.
RANK = "rank"

LengthRule = int | str | Callable[[Layer], "int | None"] | None


class UndeclaredAttributeError(RuntimeError):
    """A converter read an attribute its schema does not declare: our bug, not the input's."""


def input_rank(layer: Layer, index: int = 0) -> int | None:
    """The rank the IR declares for input ``index``, or None when it is not stated."""
    if index >= len(layer.inputs) or layer.inputs[index].dims is None:
        return None
    return len(layer.inputs[index].dims)


def _expected_length(rule: LengthRule, layer: Layer) -> tuple[int | None, str]:
    if rule is None:
        return None, ""
    if isinstance(rule, int):
        return rule, f"exactly {rule}"
    if rule == SPATIAL:
        rank = input_rank(layer)
        if rank is None:
            return None, ""
        return rank - 2, f"one per spatial axis of input 0 (rank {rank})"
    if rule == RANK:
        rank = input_rank(layer)
        return rank, f"one per axis of input 0 (rank {rank})"
    if callable(rule):
        return rule(layer), "as many as the layer's inputs imply"
    raise TypeError(f"unknown length rule {rule!r}")


@dataclass(frozen=True)
class Attr:
    """One attribute: absent means ``default`` (None: absent is allowed and means 'unset')
    unless ``required``; numbers are bounded by ``minimum``/``maximum`` (inclusive)."""

    required: bool = False
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None

    kind = "text"

    def parse(self, layer: Layer, key: str, text: str) -> Any:
        return text

    def check(self, layer: Layer, key: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        subject = "values must" if isinstance(value, list) else "must"
        for item in values:
            if not isinstance(item, int | float) or isinstance(item, bool):
                continue
            if self.minimum is not None and item < self.minimum:
                raise _rule(layer, key, value, f"{subject} be >= {self.minimum:g}")
            if self.maximum is not None and item > self.maximum:
                raise _rule(layer, key, value, f"{subject} be <= {self.maximum:g}")


def _rule(layer: Layer, key: str, value: Any, rule: str) -> B2SError:
    shown = ",".join(map(str, value)) if isinstance(value, list) else value
    return B2SError(f"{layer.where()}: attribute {key}='{shown}': {rule}")


def _form(layer: Layer, key: str, text: str, what: str) -> B2SError:
    return B2SError(f"{layer.where()}: attribute {key}='{text}' is not {what}")


def _int64(layer: Layer, key: str, value: int) -> int:
    """ONNX stores integer attributes as int64: anything wider cannot be written."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _rule(layer, key, value, "does not fit in a 64-bit integer")
    return value


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _split(text: str) -> list[str]:
    body = text.strip().strip("[]").strip()
    return [part.strip() for part in body.split(",")] if body else []


@dataclass(frozen=True)
class Int(Attr):
    kind = "int"

    def parse(self, layer: Layer, key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise _form(layer, key, text, "an integer") from None
        return _int64(layer, key, value)


@dataclass(frozen=True)
class Axis(Int):
    """An axis of input ``of``: in ``[-rank, rank - 1]`` (``[0, rank - 1]`` without
    ``negative``) when the IR states that input's rank; ``extra`` widens the range for
    ops whose output has more axes than the input (Unsqueeze-like)."""

    kind = "axis"
    of: int = 0
    negative: bool = True
    extra: int = 0

    def check(self, layer: Layer, key: str, value: Any) -> None:
        super().check(layer, key, value)
        rank = input_rank(layer, self.of)
        if rank is None:
            return
        rank += self.extra
        low = -rank if self.negative else 0
        if not low <= value <= rank - 1:
            raise _rule(
                layer,
                key,
                value,
                f"must be in [{low}, {rank - 1}] for input {self.of} of rank {rank}",
            )


@dataclass(frozen=True)
class Float(Attr):
    kind = "float"
    finite: bool = True

    def parse(self, layer: Layer, key: str, text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise _form(layer, key, text, "a number") from None
        if self.finite and not math.isfinite(value):
            raise _rule(layer, key, value, "must be finite")
        return value


@dataclass(frozen=True)
class Ints(Attr):
    """A comma-separated integer list; ``length`` ties its size to the input ranks."""

    kind = "ints"
    length: LengthRule = None
    #: The values must be distinct (axes lists).
    unique: bool = False

    def parse(self, layer: Layer, key: str, text: str) -> list[int]:
        try:
            values = [int(part) for part in _split(text)]
        except ValueError:
            raise _form(layer, key, text, "a list of integers") from None
        return [_int64(layer, key, value) for value in values]

    def check(self, layer: Layer, key: str, value: Any) -> None:
        super().check(layer, key, value)
        expected, why = _expected_length(self.length, layer)
        if expected is not None and len(value) != expected:
            raise _rule(layer, key, value, f"needs {max(expected, 0)} value(s), {why}")
        if self.unique and len(set(value)) != len(value):
            raise _rule(layer, key, value, "values must be distinct")


@dataclass(frozen=True)
class Floats(Attr):
    kind = "floats"
    length: LengthRule = None
    finite: bool = True

    def parse(self, layer: Layer, key: str, text: str) -> list[float]:
        try:
            values = [float(part) for part in _split(text)]
        except ValueError:
            raise _form(layer, key, text, "a list of numbers") from None
        if self.finite and not all(math.isfinite(v) for v in values):
            raise _rule(layer, key, values, "values must be finite")
        return values

    def check(self, layer: Layer, key: str, value: Any) -> None:
        super().check(layer, key, value)
        expected, why = _expected_length(self.length, layer)
        if expected is not None and len(value) != expected:
            raise _rule(layer, key, value, f"needs {max(expected, 0)} value(s), {why}")


_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


@dataclass(frozen=True)
class Bool(Attr):
    kind = "bool"

    def parse(self, layer: Layer, key: str, text: str) -> bool:
        value = text.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise _form(layer, key, text, "a boolean (true/false)")


@dataclass(frozen=True)
class Choice(Attr):
    """One of ``allowed`` (compared lower-case; an empty value means the default)."""

    kind = "choice"
    allowed: tuple[str, ...] = ()

    def parse(self, layer: Layer, key: str, text: str) -> str | None:
        value = text.strip().lower()
        if not value:
            return self.default
        if value not in self.allowed:
            raise _form(layer, key, text, f"one of {', '.join(self.allowed)}")
        return value


@dataclass(frozen=True)
class Text(Attr):
    kind = "text"


@dataclass(frozen=True)
class ElementType(Attr):
    """An element type name (``f32``, ``i64``, a v10 precision like ``FP16``…), normalised
    to the IR's lower-case name; ``allowed`` narrows it (empty: any the reader supports)."""

    kind = "element_type"
    allowed: tuple[str, ...] = ()

    def parse(self, layer: Layer, key: str, text: str) -> str:
        value = element_type(text, f"{layer.where()}: attribute {key}='{text}'")
        if self.allowed and value not in self.allowed:
            raise _form(layer, key, text, f"one of {', '.join(self.allowed)}")
        return value


#: Attributes every arithmetic layer with broadcasting inputs declares.
BROADCAST = {"auto_broadcast": Choice(allowed=("numpy", "none"), default="numpy")}

Schema = Mapping[str, Attr]


class Attributes(dict):
    """``layer.attrs``: the typed values of the declared attributes; asking for any other
    is our bug, like reading it from ``layer.data``."""

    def __init__(self, values: Mapping[str, Any], where: str) -> None:
        super().__init__(values)
        self._where = where

    def __missing__(self, key: str) -> Any:
        raise UndeclaredAttributeError(
            f"{self._where}: the converter read attribute '{key}', which its schema does "
            "not declare"
        )

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


def validate(layer: Layer, schema: Schema) -> Attributes:
    """Parses and checks every attribute ``schema`` declares; returns typed values (the
    default for an absent one). Attributes the schema does not name are ignored, as
    OpenVINO ignores them."""
    values: dict[str, Any] = {}
    for key, attr in schema.items():
        if key not in layer.data:
            if attr.required:
                raise B2SError(f"{layer.where()}: missing required attribute '{key}'")
            values[key] = attr.default
            continue
        value = attr.parse(layer, key, layer.data[key])
        if value is not None:
            attr.check(layer, key, value)
        values[key] = value
    return Attributes(values, layer.where())


class _DeclaredOnly(dict):
    """``layer.data`` while a converter runs: reading an undeclared key is our bug."""

    def __init__(self, data: Mapping[str, str], declared: Schema, where: str) -> None:
        super().__init__(data)
        self._declared = declared
        self._where = where

    def _allow(self, key: object) -> None:
        if key not in self._declared:
            raise UndeclaredAttributeError(
                f"{self._where}: the converter read attribute '{key}', which its schema "
                "does not declare"
            )

    def __getitem__(self, key: str) -> str:
        self._allow(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._allow(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._allow(key)
        return super().__contains__(key)


@contextlib.contextmanager
def declared_only(layer: Layer, schema: Schema | None) -> Iterator[None]:
    """Runs a converter with ``layer.data`` limited to what ``schema`` declares."""
    if schema is None:
        yield
        return
    raw = layer.data
    layer.data = _DeclaredOnly(raw, schema, layer.where())
    try:
        yield
    finally:
        layer.data = raw
