"""Sizes known now or only at run time, as small expressions the emitter can compute.

A lowering describes its reshape targets with :class:`Size` values. A size whose operands
are all known folds to a constant at once; otherwise it keeps a structural ``key`` that the
emitter turns into Shape/Gather/Mul/Div nodes, computing each distinct key only once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    """A non-negative integer: ``static`` when known, else computed in the graph from ``key``."""

    key: tuple
    static: int | None

    @staticmethod
    def of(value: int) -> Size:
        return Size(("const", value), value)

    @staticmethod
    def data_dim(tensor: str, axis: int, known: int | None) -> Size:
        """Dimension ``axis`` of ``tensor``; read with Shape at run time when unknown."""
        return Size.of(known) if known is not None else Size(("dim", tensor, axis), None)

    @staticmethod
    def element(vector: str, index: int, known: int | None) -> Size:
        """Element ``index`` of a 1-D int64 tensor (a runtime index input)."""
        return Size.of(known) if known is not None else Size(("elem", vector, index), None)

    def _combine(self, op: str, other: Size | int, fold) -> Size:
        rhs = other if isinstance(other, Size) else Size.of(other)
        if self.static is not None and rhs.static is not None:
            return Size.of(fold(self.static, rhs.static))
        return Size((op, self.key, rhs.key), None)

    def __mul__(self, other: Size | int) -> Size:
        rhs = other if isinstance(other, Size) else Size.of(other)
        if rhs.static == 1:
            return self
        if self.static == 1:
            return rhs
        return self._combine("mul", rhs, lambda a, b: a * b)

    def __floordiv__(self, other: Size | int) -> Size:
        rhs = other if isinstance(other, Size) else Size.of(other)
        if rhs.static == 1:
            return self
        return self._combine("div", rhs, lambda a, b: a // b)

    def __add__(self, other: Size | int) -> Size:
        rhs = other if isinstance(other, Size) else Size.of(other)
        if rhs.static == 0:
            return self
        if self.static == 0:
            return rhs
        return self._combine("add", rhs, lambda a, b: a + b)

    def __sub__(self, other: Size | int) -> Size:
        rhs = other if isinstance(other, Size) else Size.of(other)
        if rhs.static == 0:
            return self
        return self._combine("sub", rhs, lambda a, b: a - b)


def product(sizes: list[Size]) -> Size:
    result = Size.of(1)
    for size in sizes:
        result = result * size
    return result
