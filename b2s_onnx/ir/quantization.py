"""INT8 IRs as QDQ: where compressed integer weights came from, and where they go.

NNCF/POT write INT8 weights as ``i8/u8 Const -> Convert -> [Subtract zp] -> Multiply
scale``; the converter folds that chain into a float constant like any other. With
``int8="qdq"`` the integer values must survive, because onnxruntime runs a Conv or MatMul
on its integer kernels only when its weights arrive through DequantizeLinear from an
integer initializer. So while converting, :func:`note_layer` records for each folded
step what integers, zero point and scale produced its value; at the end,
:func:`dequantize_weights` puts ``DequantizeLinear(int8 initializer)`` in front of every
Conv/ConvTranspose/MatMul/Gemm whose weights are such a value, after checking that it
reproduces the float weights bit for bit.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: Which input of each op holds the weights, and their output-channel axis.
WEIGHT_INPUTS = {"Conv": (1, 0), "ConvTranspose": (1, 1), "MatMul": (1, -1), "Gemm": (1, -1)}
INT_TYPES = (np.int8, np.uint8)
#: A weight zero point this close to an integer is that integer (what f16 storage leaves).
ZERO_POINT_STORAGE_SLACK = 1e-3
#: Inexact provenance (snapped zero points, FakeQuantize'd float weights) is used only when
#: every weight is within this fraction of a quantization step of the float constant.
WEIGHT_SLACK = 1e-3


@dataclass(frozen=True)
class Dequantized:
    """``value == (q - zero_point) * scale`` in float32, broadcasting as numpy does; bit for
    bit when ``exact`` (a decompression chain), else to float rounding (a FakeQuantize on
    float weights computes the same levels by another formula)."""

    q: np.ndarray
    zero_point: np.ndarray
    scale: np.ndarray
    exact: bool = True

    def value(self) -> np.ndarray:
        shifted = self.q.astype(np.int32) - self.zero_point.astype(np.int32)
        return (shifted.astype(np.float32) * self.scale.astype(np.float32)).astype(np.float32)


def _fingerprint(array: np.ndarray) -> tuple:
    data = np.ascontiguousarray(array)
    return (data.dtype.str, data.size, hashlib.blake2b(data.tobytes(), digest_size=16).digest())


class DequantizedConstants:
    """Integer provenance of folded constants, by tensor name while converting and by
    value at the end (a converter may reshape weights into a new constant)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Dequantized] = {}
        self.by_value: dict[tuple, Dequantized] = {}

    def record(self, name: str, found: Dequantized, value: np.ndarray | None) -> None:
        self.by_name[name] = found
        if value is not None and value.dtype == np.float32:
            self.by_value[_fingerprint(value)] = found

    def lookup(self, value: np.ndarray) -> Dequantized | None:
        return self.by_value.get(_fingerprint(value))


def note_layer(ctx, layer, inputs: list[str]) -> None:
    """After ``layer`` was converted (and folded): records the integer provenance of its
    output if it is one step of a weight decompression chain."""
    table: DequantizedConstants = ctx.dequantized
    output = ctx.out(layer)
    value = ctx.value(output)
    if value is None:
        return
    kind = layer.type
    if kind == "FakeQuantize":
        _note_quantized_weights(ctx, layer, inputs, value)
        return
    if kind == "Transpose" and len(inputs) == 2:
        perm = ctx.value(inputs[1])
        if perm is not None and perm.size == value.ndim:
            note_transposed(ctx, inputs[0], output, [int(p) for p in perm.reshape(-1)])
        return
    if kind == "Convert":
        source = ctx.value(inputs[0])
        if source is not None and source.dtype in INT_TYPES:
            zero = np.zeros((), source.dtype)
            table.record(output, Dequantized(source, zero, np.ones((), np.float32)), None)
        return
    if kind not in ("Subtract", "Multiply") or len(inputs) != 2:
        return
    for ours, other in (inputs, inputs[::-1]):
        found = table.by_name.get(ours)
        constant = ctx.value(other)
        if found is None or constant is None:
            continue
        if kind == "Subtract" and ours == inputs[0] and np.all(found.scale == 1):
            zp = np.asarray(constant, np.float64)
            info = np.iinfo(found.q.dtype)
            snapped = np.round(zp)
            # f16-stored zero points of 0 arrive as +-7.6e-6: integers up to storage error.
            if np.all(np.abs(zp - snapped) <= ZERO_POINT_STORAGE_SLACK) and (
                snapped.min() >= info.min and snapped.max() <= info.max
            ):
                exact = bool(np.all(zp == snapped))
                shifted = Dequantized(found.q, snapped.astype(found.q.dtype), found.scale, exact)
                table.record(output, shifted, value)
            return
        if kind == "Multiply" and np.all(found.scale == 1):
            scaled = Dequantized(
                found.q, found.zero_point, np.asarray(constant, np.float32), found.exact
            )
            table.record(output, scaled, value)
            return


def note_transposed(ctx, source: str, target: str, perm: list[int]) -> None:
    """``target`` is the constant ``source`` transposed by ``perm`` (MatMul's
    ``transpose_b`` on weights, a Transpose layer on them): it inherits ``source``'s
    integer provenance, transposed, so its MatMul still gets integer weights. Transposing
    moves values without changing them, so the provenance stays exact."""
    table: DequantizedConstants = ctx.dequantized
    value = ctx.value(source)
    found = table.by_name.get(source) or (None if value is None else table.lookup(value))
    if found is None or value is None or found.q.size != value.size:
        return

    def moved(array: np.ndarray) -> np.ndarray:
        array = np.asarray(array)
        if found.q.shape != value.shape:
            # Reshaped on the way (a converter's reshape): the parameters in full.
            array = np.broadcast_to(array, found.q.shape).reshape(value.shape)
        elif array.ndim < value.ndim:
            array = array.reshape((1,) * (value.ndim - array.ndim) + array.shape)
        return np.transpose(array, perm)

    transposed = Dequantized(
        np.ascontiguousarray(moved(found.q)),
        moved(found.zero_point),
        moved(found.scale),
        found.exact,
    )
    table.record(target, transposed, ctx.value(target))


def _note_quantized_weights(ctx, layer, inputs: list[str], value: np.ndarray) -> None:
    """Float weights through a FakeQuantize with constant ranges (older POT IRs): the
    integers it snaps them to, when zero is one of its levels on every channel."""
    x, *ranges = (ctx.value(name) for name in inputs)
    levels = int(layer.attrs["levels"])
    if x is None or any(r is None for r in ranges) or not 2 <= levels <= 256:
        return
    il, ih, ol, oh = (np.broadcast_to(np.asarray(r, np.float64), x.shape) for r in ranges)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale_in, scale_out = (ih - il) / (levels - 1), (oh - ol) / (levels - 1)
        k_in, k_out = -il / scale_in, -ol / scale_out
    k = np.round(k_in)
    if (
        not (np.all(scale_in > 0) and np.all(scale_out > 0))
        or np.any(np.abs(k_in - k) > 1e-3)
        or np.any(np.abs(k_out - k) > 1e-3)
    ):
        return
    q = np.clip(
        np.round((np.clip(x, np.minimum(il, ih), np.maximum(il, ih)) - il) / scale_in),
        0,
        levels - 1,
    )
    symmetric = np.all(k == k.reshape(-1)[0]) and int(k.reshape(-1)[0]) in (127, 128)
    if symmetric:
        offset = int(k.reshape(-1)[0])
        stored, zero = (q - offset).astype(np.int8), np.zeros((), np.int8)
    elif k.min() >= 0 and (k + levels - 1).max() <= 255:
        stored, zero = q.astype(np.uint8), k.astype(np.uint8)
    else:
        return
    found = Dequantized(stored, zero, scale_out.astype(np.float32), exact=False)
    ctx.dequantized.record(ctx.out(layer), found, value)


def _per_axis(full: np.ndarray, axis: int) -> tuple[np.ndarray, int | None] | None:
    """``full`` as a scalar (constant everywhere) or a 1-D vector along ``axis``."""
    flat = full.reshape(-1)
    if np.all(flat == flat[0]):
        return np.asarray(flat[0], full.dtype), None
    moved = np.moveaxis(full, axis, 0).reshape(full.shape[axis], -1)
    if np.all(moved == moved[:, :1]):
        return np.ascontiguousarray(moved[:, 0]), axis
    return None


def dequantize_weights(ctx) -> list[str]:
    """Rewires weight inputs that are dequantized integers through DequantizeLinear; returns
    the names of the nodes rewired. ``ctx.initializers`` gains the integer tensors; the
    float ones are left for the caller's unused-initializer sweep."""
    nodes: list[onnx.NodeProto] = ctx.nodes
    initializers = ctx.initializers
    table: DequantizedConstants = ctx.dequantized
    rewired: list[str] = []
    added: list[onnx.NodeProto] = []
    done: dict[str, str] = {}
    for node in nodes:
        if node.op_type not in WEIGHT_INPUTS or node.domain not in ("", "ai.onnx"):
            continue
        position, axis = WEIGHT_INPUTS[node.op_type]
        if len(node.input) <= position or node.input[position] not in ctx.constants:
            continue
        if node.input[position] in done:
            node.input[position] = done[node.input[position]]
            rewired.append(node.name)
            continue
        weights = np.asarray(ctx.constants[node.input[position]])
        found = table.lookup(weights)
        if found is None or found.q.size != weights.size:
            continue
        origin = found.q.shape
        q = found.q.reshape(weights.shape)
        axis = axis % weights.ndim
        scale = _per_axis(np.broadcast_to(found.scale, origin).reshape(weights.shape), axis)
        zero = _per_axis(np.broadcast_to(found.zero_point, origin).reshape(weights.shape), axis)
        if (
            scale is None
            or zero is None
            or (scale[1] is not None and zero[1] is not None and scale[1] != zero[1])
        ):
            continue
        axis_used = scale[1] if scale[1] is not None else zero[1]
        scale_v, zero_v = scale[0], zero[0]
        if axis_used is not None:
            count = weights.shape[axis_used]
            scale_v = np.broadcast_to(scale_v, (count,)).astype(np.float32)
            zero_v = np.broadcast_to(zero_v, (count,)).astype(q.dtype)
        candidate = Dequantized(
            q, zero_v.reshape(_axis_shape(q, axis_used)), scale_v.reshape(_axis_shape(q, axis_used))
        )
        if found.exact:
            if candidate.value().tobytes() != np.ascontiguousarray(weights).tobytes():
                continue
        else:
            step = np.abs(np.broadcast_to(found.scale, origin).reshape(weights.shape))
            if not np.all(np.abs(candidate.value() - weights) <= WEIGHT_SLACK * step):
                continue
        base = node.input[position]
        names = [
            ctx.names.fresh(f"{base}/{part}")
            for part in ("q", "scale", "zero_point", "dequantized")
        ]
        for name, array in zip(
            names[:3], (q, scale_v.astype(np.float32), zero_v.astype(q.dtype)), strict=True
        ):
            initializers[name] = numpy_helper.from_array(np.ascontiguousarray(array), name)
        attrs = {} if axis_used is None else {"axis": int(axis_used)}
        added.append(
            helper.make_node("DequantizeLinear", names[:3], [names[3]], name=names[3], **attrs)
        )
        node.input[position] = names[3]
        done[base] = names[3]
        rewired.append(node.name)
    nodes[:0] = added
    return rewired


def _axis_shape(q: np.ndarray, axis: int | None) -> tuple[int, ...]:
    if axis is None:
        return ()
    shape = [1] * q.ndim
    shape[axis] = q.shape[axis]
    return tuple(shape)
