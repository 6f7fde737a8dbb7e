"""Emits the standard-ONNX nodes that replace one custom node.

Owns what every lowering rule needs and none should write twice: unique names derived from
the original node's name, int64 constants, run-time size arithmetic (one Shape per tensor,
each distinct size computed once), and run-time guards that make inference *fail* when an
index value known only at run time breaks a rule.

How a guard fails: the violations of a rule are counted into ``v``, and a small 1-D tensor
that the first data-moving node needs is passed through ``Reshape(t, [-1] + [-1] * min(v, 1))``.
While ``v == 0`` that is a no-op on a few bytes; otherwise the target has two -1 and
onnxruntime stops with an error from the node named ``<node>/check: <rule>``, so the
message says which node and which rule. No data moves before every guard has passed,
because every data-moving node depends on the guarded tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from b2s_onnx.lowering._sizes import Size

INT64_MAX = int(np.iinfo(np.int64).max)


class NameAllocator:
    """Hands out names unused anywhere in the model (tensors and nodes share one space)."""

    def __init__(self, taken: set[str]) -> None:
        self._taken = taken

    def fresh(self, base: str) -> str:
        name = base
        counter = 1
        while name in self._taken:
            name = f"{base}_{counter}"
            counter += 1
        self._taken.add(name)
        return name


class Emitter:
    """Collects the nodes and initializers that replace one custom node."""

    def __init__(self, names: NameAllocator, prefix: str, opset: int = 14) -> None:
        self.names = names
        self.prefix = prefix
        #: The target opset: Reshape's allowzero (a literal 0 size) needs 14.
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._sizes: dict[tuple, str] = {}
        self._shapes: dict[str, str] = {}
        self._checks: list[tuple[str, str]] = []

    # -- plain building blocks -------------------------------------------------------

    def tensor_name(self, suffix: str) -> str:
        return self.names.fresh(f"{self.prefix}/{suffix}")

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        suffix: str,
        output: str | None = None,
        **attrs,
    ) -> str:
        """Adds one node and returns its (single) output name."""
        out = output if output is not None else self.tensor_name(suffix)
        self.nodes.append(
            helper.make_node(
                op_type,
                list(inputs),
                [out],
                name=self.names.fresh(f"{self.prefix}/{suffix}"),
                **attrs,
            )
        )
        return out

    def const(self, suffix: str, values: Sequence[int] | np.ndarray, dtype=np.int64) -> str:
        name = self.tensor_name(suffix)
        self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def shape_of(self, tensor: str) -> str:
        if tensor not in self._shapes:
            self._shapes[tensor] = self.node("Shape", [tensor], "shape")
        return self._shapes[tensor]

    # -- run-time sizes --------------------------------------------------------------

    def size(self, size: Size) -> str:
        """A 1-element int64 tensor holding ``size``."""
        return self._emit_key(size.key)

    def _emit_key(self, key: tuple) -> str:
        if key in self._sizes:
            return self._sizes[key]
        kind = key[0]
        if kind == "const":
            name = self.const("size", [key[1]])
        elif kind == "dim":
            _, tensor, axis = key
            name = self.node("Gather", [self.shape_of(tensor), self.const("axis", [axis])], "dim")
        elif kind == "elem":
            _, vector, index = key
            name = self.node("Gather", [vector, self.const("index", [index])], "elem")
        else:
            lhs, rhs = self._emit_key(key[1]), self._emit_key(key[2])
            if kind == "div":
                # A runtime divisor is a block value that a guard checks, but guards and this
                # Div are unordered: keep it >= 1 so an invalid value cannot divide by zero.
                rhs = self.node("Max", [rhs, self.const("one", [1])], "safe_divisor")
            op = {"mul": "Mul", "div": "Div", "add": "Add", "sub": "Sub"}[kind]
            name = self.node(op, [lhs, rhs], kind)
        self._sizes[key] = name
        return name

    def shape_vector(self, sizes: Sequence[Size], suffix: str, allow_infer: bool = True) -> str:
        """A 1-D int64 tensor of ``sizes``: a constant when possible.

        With ``allow_infer`` (Reshape targets) a single unknown size among known non-zero
        ones is written as -1, so a dynamic batch costs no shape arithmetic at all; the
        Reshape still fails when the element count does not fit.
        """
        unknown = [i for i, s in enumerate(sizes) if s.static is None]
        if not unknown:
            return self.const(suffix, [s.static for s in sizes])
        if allow_infer and len(unknown) == 1 and all(s.static != 0 for s in sizes):
            return self.const(suffix, [-1 if s.static is None else s.static for s in sizes])
        parts: list[str] = []
        run: list[int] = []
        for s in sizes:
            if s.static is not None:
                run.append(s.static)
                continue
            if run:
                parts.append(self.const(suffix, run))
                run = []
            parts.append(self.size(s))
        if run:
            parts.append(self.const(suffix, run))
        return self.node("Concat", parts, suffix, axis=0)

    # -- run-time guards -------------------------------------------------------------

    def check(self, rule: str, violated: str) -> None:
        """Registers a guard: ``violated`` is a bool tensor, True where ``rule`` is broken."""
        self._checks.append((rule, violated))

    def has_checks(self) -> bool:
        return bool(self._checks)

    def gate(self, tensor: str) -> str:
        """Returns the 1-D ``tensor`` passed through every pending guard."""
        for rule, violated in self._checks:
            tensor = self._gate_one(tensor, rule, violated)
        self._checks.clear()
        return tensor

    def guard(self, tensor: str, rule: str, violated: str) -> str:
        """Guards ``tensor`` by one rule at once, so everything that reads it runs after."""
        return self._gate_one(tensor, rule, violated)

    def _gate_one(self, tensor: str, rule: str, violated: str) -> str:
        as_int = self.node("Cast", [violated], "violations", to=TensorProto.INT64)
        count = self.node("ReduceSum", [as_int], "violation_count", keepdims=1)
        minus_one = self.const("minus_one", [-1])
        # [-1] while nothing is violated (a no-op on a 1-D tensor), [-1, -1] otherwise,
        # which no Reshape accepts.
        extra = self.node("Slice", [minus_one, self.const("zero", [0]), count], "extra_dims")
        target = self.node("Concat", [minus_one, extra], "gate_shape", axis=0)
        return self.node("Reshape", [tensor, target], f"check: {rule}")

    def gate_data(self, data: str) -> str:
        """Guards a data tensor itself (when the first data op has no small input to guard).

        Reshape to its own shape aliases the buffer in onnxruntime: no copy.
        """
        if not self.has_checks():
            return data
        guarded_one = self.gate(self.const("one", [1]))
        guarded_shape = self.node("Mul", [self.shape_of(data), guarded_one], "guarded_shape")
        return self.node("Reshape", [data, guarded_shape], "guarded_data")

    # -- helpers for vector checks on index inputs -------------------------------------

    def int64_vector(self, tensor: str, suffix: str) -> str:
        return self.node("Cast", [tensor], suffix, to=TensorProto.INT64)
