"""Recurrent layers: LSTM, GRU and RNN cells and sequences, as ONNX's LSTM, GRU and RNN.

OpenVINO and ONNX compute the same recurrences; what differs is bookkeeping:
- gate order inside the stacked weights (OpenVINO LSTM ``fico``, ONNX ``iofc``; GRU and
  RNN agree), so weight and bias blocks are reordered;
- one bias per gate in OpenVINO against ONNX's separate input and recurrence biases
  (``[Wb, Rb]``); GRU with ``linear_before_reset`` keeps a fourth block, the recurrence
  bias of the candidate gate, which is ONNX's ``Rbh``;
- batch-major sequences (``X [N, T, I]``, ``Y [N, dirs, T, H]``, states ``[N, dirs, H]``)
  against ONNX's time-major layout: Transposes at the edges work at every target opset
  (ONNX's ``layout=1`` exists only from opset 14);
- cells are sequences of length one.
onnxruntime runs these ops in f32/f64 only; OpenVINO's CPU plugin computes f16 models in
f32 too, so f16 tensors are cast to f32 and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Attr, Bool, Choice, Float, Floats, Int, LengthRule
from b2s_onnx.ir.reader import Layer

_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}
#: Where each ONNX LSTM gate (i, o, f, c) sits in OpenVINO's ``fico`` blocks.
_LSTM_ORDER = ["fico".index(gate) for gate in "iofc"]


@dataclass(frozen=True)
class Names(Attr):
    """A comma-separated list of names from ``allowed`` (activation functions)."""

    kind = "names"
    allowed: tuple[str, ...] = ()
    length: LengthRule = None

    def parse(self, layer: Layer, key: str, text: str) -> list[str]:
        values = [part.strip().lower() for part in text.split(",") if part.strip()]
        for value in values:
            if value not in self.allowed:
                raise B2SError(
                    f"{layer.where()}: attribute {key}='{text}': '{value}' is not one of "
                    f"{', '.join(self.allowed)}"
                )
        return values

    def check(self, layer: Layer, key: str, value: Any) -> None:
        if isinstance(self.length, int) and len(value) != self.length:
            raise B2SError(
                f"{layer.where()}: attribute {key}='{','.join(value)}': needs exactly "
                f"{self.length} activation function(s)"
            )


@dataclass(frozen=True)
class _Family:
    onnx_op: str
    gates: int
    activations: tuple[str, ...]
    states: int


_LSTM = _Family("LSTM", 4, ("sigmoid", "tanh", "tanh"), 2)
_GRU = _Family("GRU", 3, ("sigmoid", "tanh"), 1)
_RNN = _Family("RNN", 1, ("tanh",), 1)


def _schema(family: _Family, sequence: bool) -> dict[str, Attr]:
    attrs: dict[str, Attr] = {
        "hidden_size": Int(required=True, minimum=1),
        "activations": Names(
            default=list(family.activations),
            allowed=tuple(_ACTIVATIONS),
            length=len(family.activations),
        ),
        "activations_alpha": Floats(default=[]),
        "activations_beta": Floats(default=[]),
        "clip": Float(default=0.0, minimum=0.0),
    }
    if sequence:
        attrs["direction"] = Choice(allowed=("forward", "reverse", "bidirectional"), required=True)
    if family is _GRU:
        attrs["linear_before_reset"] = Bool(default=False)
    return attrs


def _gate_order(family: _Family) -> list[int]:
    return _LSTM_ORDER if family is _LSTM else list(range(family.gates))


def _gate_rows(order: list[int], hidden: int) -> np.ndarray:
    return np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in order])


def _reorder(ctx: ConversionContext, tensor: str, axis: int, order: list[int], hidden: int) -> str:
    """Stacked gate blocks of ``hidden`` rows along ``axis``, put in ``order``."""
    if order == sorted(order):
        return tensor
    rows = _gate_rows(order, hidden)
    value = ctx.value(tensor)
    if value is not None:
        return ctx.const("gates", np.take(value, rows, axis=axis))
    return ctx.one("Gather", [tensor, ctx.const("gate_rows", rows.astype(np.int64))], axis=axis)


def _onnx_bias(
    ctx: ConversionContext, layer: Layer, family: _Family, bias: str, dirs: int, hidden: int
) -> str:
    """OpenVINO's ``[dirs, gates*H]`` (GRU with linear_before_reset: ``[dirs, 4H]``) as
    ONNX's ``[dirs, 2*gates*H]`` = input biases then recurrence biases."""
    dtype = NUMPY_OF_ONNX[ctx.type_of(bias)]
    value = ctx.value(bias)
    width = family.gates * hidden
    lbr = family is _GRU and layer.attrs["linear_before_reset"]
    if value is not None:
        value = value.reshape(dirs, -1)
        recurrent = np.zeros((dirs, width), dtype)
        if lbr:
            recurrent[:, 2 * hidden :] = value[:, width:]
            value = value[:, :width]
        value = np.take(value, _gate_rows(_gate_order(family), hidden), axis=1)
        return ctx.const("bias", np.concatenate([value, recurrent], axis=1))
    if lbr:
        parts = ctx.node(
            "Split",
            [bias, ctx.const("split", np.asarray([width, hidden], np.int64))],
            [ctx.tmp("bias_input"), ctx.tmp("bias_recurrent")],
            axis=1,
        )
        zeros = ctx.const("zeros", np.zeros((dirs, 2 * hidden), dtype))
        return ctx.one("Concat", [parts[0], zeros, parts[1]], axis=1)
    reordered = _reorder(ctx, bias, 1, _gate_order(family), hidden)
    return ctx.one(
        "Concat", [reordered, ctx.const("zeros", np.zeros((dirs, width), dtype))], axis=1
    )


def _compute_type(ctx: ConversionContext, tensor: str) -> int:
    kind = ctx.type_of(tensor)
    return kind if kind in (TensorProto.FLOAT, TensorProto.DOUBLE) else TensorProto.FLOAT


def _as(ctx: ConversionContext, tensor: str, kind: int) -> str:
    if ctx.type_of(tensor) == kind:
        return tensor
    value = ctx.value(tensor)
    if value is not None:
        return ctx.const("cast", value.astype(NUMPY_OF_ONNX[kind]))
    return ctx.one("Cast", [tensor], to=kind)


def _onnx_attrs(layer: Layer, family: _Family, direction: str) -> dict:
    dirs = 2 if direction == "bidirectional" else 1
    attrs: dict = {
        "hidden_size": layer.attrs["hidden_size"],
        "direction": direction,
        "activations": [_ACTIVATIONS[a] for a in layer.attrs["activations"]] * dirs,
    }
    if layer.attrs["clip"] > 0:
        attrs["clip"] = layer.attrs["clip"]
    if family is _GRU:
        attrs["linear_before_reset"] = int(layer.attrs["linear_before_reset"])
    return attrs


def _emit(
    ctx: ConversionContext,
    layer: Layer,
    family: _Family,
    *,
    x: str,
    states: list[str],
    lengths: str | None,
    w: str,
    r: str,
    b: str,
    peepholes: str | None,
    direction: str,
    outputs: list[str],
) -> None:
    """The ONNX op on time-major inputs; ``outputs`` are names for Y, Y_h (, Y_c) in ONNX
    layout (empty string: not needed)."""
    hidden = layer.attrs["hidden_size"]
    dirs = 2 if direction == "bidirectional" else 1
    order = _gate_order(family)
    kind = _compute_type(ctx, x)
    bias = _as(ctx, _onnx_bias(ctx, layer, family, b, dirs, hidden), kind)
    operands = [
        _as(ctx, x, kind),
        _as(ctx, _reorder(ctx, w, 1, order, hidden), kind),
        _as(ctx, _reorder(ctx, r, 1, order, hidden), kind),
        bias,
        "" if lengths is None else _as(ctx, lengths, TensorProto.INT32),
        *(_as(ctx, s, kind) for s in states),
    ]
    if peepholes is not None:
        operands.append(_as(ctx, peepholes, kind))
    while operands and operands[-1] == "":
        operands.pop()
    ctx.node(family.onnx_op, operands, outputs, **_onnx_attrs(layer, family, direction))


def _check_weights(ctx: ConversionContext, layer: Layer, family: _Family, w: str, r: str) -> None:
    """The stacked weights must hold one block of hidden_size rows per gate."""
    rows = family.gates * layer.attrs["hidden_size"]
    for tensor, what in ((w, "W"), (r, "R")):
        shape = ctx.shape(tensor)
        if shape is not None and len(shape) >= 2 and shape[-2] not in (None, rows):
            raise B2SError(
                f"{layer.where()}: {what} has {shape[-2]} rows but hidden_size="
                f"{layer.attrs['hidden_size']} needs {family.gates} x hidden_size = {rows}"
            )


def _restore(ctx: ConversionContext, tensor: str, output: str, kind: int, **attrs) -> None:
    """Transposes or squeezes an ONNX output into the layer's output, casting back."""
    op = "Transpose" if "perm" in attrs else "Squeeze"
    inputs = [tensor] if op == "Transpose" else [tensor, ctx.const("axes", np.asarray([0]))]
    if ctx.types.get(output, kind) == kind:
        ctx.one(op, inputs, output, **attrs)
    else:
        ctx.one("Cast", [ctx.one(op, inputs, **attrs)], output, to=ctx.types[output])


def _sequence(ctx: ConversionContext, layer: Layer, inputs: list[str], family: _Family) -> None:
    states = inputs[1 : 1 + family.states]
    lengths, w, r, b = inputs[1 + family.states : 5 + family.states]
    peepholes = inputs[5 + family.states] if len(inputs) > 5 + family.states else None
    direction = layer.attrs["direction"]
    _check_weights(ctx, layer, family, w, r)
    time_major = ctx.one("Transpose", [inputs[0]], perm=[1, 0, 2])
    state_inputs = [ctx.one("Transpose", [s], perm=[1, 0, 2]) for s in states]
    results = [ctx.tmp("y"), *(ctx.tmp("state") for _ in states)]
    kind = _compute_type(ctx, inputs[0])
    _emit(
        ctx,
        layer,
        family,
        x=time_major,
        states=state_inputs,
        lengths=lengths,
        w=w,
        r=r,
        b=b,
        peepholes=peepholes,
        direction=direction,
        outputs=results,
    )
    _restore(ctx, results[0], ctx.out(layer, 0), kind, perm=[2, 1, 0, 3])
    for index, state in enumerate(results[1:], start=1):
        _restore(ctx, state, ctx.out(layer, index), kind, perm=[1, 0, 2])


def _cell(ctx: ConversionContext, layer: Layer, inputs: list[str], family: _Family) -> None:
    axis0 = ctx.const("axes", np.asarray([0], np.int64))

    def batch_of_one(tensor: str) -> str:
        value = ctx.value(tensor)
        if value is not None:
            return ctx.const("unsqueezed", value[np.newaxis])
        return ctx.one("Unsqueeze", [tensor, axis0])

    states = inputs[1 : 1 + family.states]
    w, r, b = inputs[1 + family.states : 4 + family.states]
    peepholes = inputs[4 + family.states] if len(inputs) > 4 + family.states else None
    _check_weights(ctx, layer, family, w, r)
    results = ["", *(ctx.tmp("state") for _ in states)]
    kind = _compute_type(ctx, inputs[0])
    _emit(
        ctx,
        layer,
        family,
        x=batch_of_one(inputs[0]),
        states=[batch_of_one(s) for s in states],
        lengths=None,
        w=batch_of_one(w),
        r=batch_of_one(r),
        b=batch_of_one(b),
        peepholes=None if peepholes is None else batch_of_one(peepholes),
        direction="forward",
        outputs=results,
    )
    for index, state in enumerate(results[1:]):
        _restore(ctx, state, ctx.out(layer, index), kind)


#: Cell layer types by the family they belong to.
FAMILIES = {"LSTMCell": _LSTM, "GRUCell": _GRU, "RNNCell": _RNN}


def emit_sequence(
    ctx: ConversionContext,
    cell: Layer,
    *,
    x: str,
    time_axis: int,
    states: list[str],
    weights: list[np.ndarray],
    direction: str,
    outputs: list[str],
) -> int:
    """The ONNX sequence op running ``cell`` (an LSTM/GRU/RNN cell layer, attributes
    checked) over ``x`` (batch and features in that order, time at ``time_axis``) from
    initial ``states`` ``[N, H]``, with the cell's constant weights, recurrence weights,
    biases (and peepholes); ``outputs`` as in ONNX (empty strings: not needed). Returns the
    element type the outputs are computed in (f16 inputs are computed in f32)."""
    family = FAMILIES[cell.type]
    kind = _compute_type(ctx, x)
    x = _as(ctx, x, kind)
    if time_axis:
        others = [axis for axis in range(3) if axis != time_axis]
        x = ctx.one("Transpose", [x], perm=[time_axis, *others])
    ctx.types[x] = kind
    axis0 = ctx.const("axes", np.asarray([0], np.int64))
    initial = []
    for state in states:
        initial.append(ctx.one("Unsqueeze", [_as(ctx, state, kind), axis0]))
        ctx.types[initial[-1]] = kind
    # One direction axis in front, as ONNX's weights have.
    w, r, b, *rest = (
        ctx.const(part, value[np.newaxis]) for part, value in zip("wrbp", weights, strict=False)
    )
    _check_weights(ctx, cell, family, w, r)
    _emit(
        ctx,
        cell,
        family,
        x=x,
        states=initial,
        lengths=None,
        w=w,
        r=r,
        b=b,
        peepholes=rest[0] if rest else None,
        direction=direction,
        outputs=outputs,
    )
    return kind


#: Version-1 LSTM layers also carry these. OpenVINO's CPU plugin ignores both (measured:
#: ``input_forget="true"`` and ``weights_format="icof"`` give the same outputs as the
#: defaults), so they are validated and, like there, have no effect; peepholes (input 6,
#: ``[dirs,] 3H`` in ONNX's i, o, f order) do.
_LSTM_V0 = {
    "input_forget": Bool(default=False),
    "weights_format": Choice(allowed=("fico", "icof", "ifco", "ifoc", "iofc"), default="fico"),
}


@converts("LSTMCell", (1,), inputs=(6, 7), attrs={**_schema(_LSTM, False), **_LSTM_V0})
def lstm_cell_v1(ctx, layer, inputs):
    _cell(ctx, layer, inputs, _LSTM)


@converts("LSTMCell", (4,), inputs=(6, 6), attrs=_schema(_LSTM, False))
def lstm_cell(ctx, layer, inputs):
    _cell(ctx, layer, inputs, _LSTM)


@converts("GRUCell", (3,), inputs=(5, 5), attrs=_schema(_GRU, False))
def gru_cell(ctx, layer, inputs):
    _cell(ctx, layer, inputs, _GRU)


@converts("RNNCell", (1, 3), inputs=(5, 5), attrs=_schema(_RNN, False))
def rnn_cell(ctx, layer, inputs):
    _cell(ctx, layer, inputs, _RNN)


@converts("LSTMSequence", (1,), inputs=(7, 8), attrs={**_schema(_LSTM, True), **_LSTM_V0})
def lstm_sequence_v1(ctx, layer, inputs):
    _sequence(ctx, layer, inputs, _LSTM)


@converts("LSTMSequence", (5,), inputs=(7, 7), attrs=_schema(_LSTM, True))
def lstm_sequence(ctx, layer, inputs):
    _sequence(ctx, layer, inputs, _LSTM)


@converts("GRUSequence", (5,), inputs=(6, 6), attrs=_schema(_GRU, True))
def gru_sequence(ctx, layer, inputs):
    _sequence(ctx, layer, inputs, _GRU)


@converts("RNNSequence", (5,), inputs=(6, 6), attrs=_schema(_RNN, True))
def rnn_sequence(ctx, layer, inputs):
    _sequence(ctx, layer, inputs, _RNN)
