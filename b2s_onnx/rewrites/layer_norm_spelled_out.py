"""A layer norm spelled out in element-wise ops (Keras/TensorFlow's moments + batchnorm
arrangement) -> one ONNX LayerNormalization, constant gamma and beta as its scale and bias.

TensorFlow has no layer-norm op, so OpenVINO converts a Keras LayerNormalization as the
arithmetic Keras writes: ``mean = ReduceMean(x)``, ``var = ReduceMean((x - mean)^2)`` (a
SquaredDifference, which the converter writes as Sub and Mul), ``inv = (var + eps)^-0.5 *
gamma`` and ``y = x * inv + (-mean * inv + beta)``; tf.nn.batch_normalization writes
``beta - mean * inv``, hand-written norms ``(x - mean) / sqrt(var + eps) * gamma + beta``.
onnxruntime fuses none of these and runs about ten kernels. OpenVINO also sinks Keras's
NHWC <-> NCHW Transposes, so in a converted ConvNeXt every norm is over the channel axis of
an NCHW map, where each pass reduces with a stride: there a Transpose first moves the
normalised axes last, and the Transpose after the formula that moved them there anyway is
dropped (onnxruntime folds the remaining ones into its NCHWc reorders).

Measured 1 thread, medians of 300 interleaved runs, against the same conversion without
this rewrite: one norm over the last axis, [1,2,2,768] 10.1 -> 5.7 us (0.56x),
[1,16,16,96] 35.5 -> 15.4 us (0.43x), [1,128,768] 105 -> 50 us (0.48x); over the channels
of an NCHW map (ConvNeXt's), [1,768,2,2] 41.5 -> 6.7 us (0.16x) and [1,96,16,16]
64.8 -> 22.0 us (0.34x) where a Transpose to channels-last follows, 40.4 -> 7.3 us and
58.6 -> 25.2 us (0.18x, 0.43x) between two Transposes. ConvNeXt-Tiny from
keras.applications (input [1,64,64,3], 23 norms, its time mostly in MatMul) 13.4 -> 12.7
ms (0.94-0.95x over three runs); a MultiHeadAttention + LayerNormalization block on
[1,10,16] 20.2 -> 17.1 us (0.84x). Rows of fewer than 32 normalised elements that would
need Transposes stay: with 4-8 channels on 32x32-64x64 maps the Transposes cost more than
the passes they save (1.1-2.7x the time), while over trailing axes even 4-element rows
gain (0.56-0.63x).

The formula is matched as algebra, not as one tree: each tensor computed from the
statistics, ``x`` and constants is a sum of constant-coefficient terms over ``1, x, m, r,
x r, m r`` (``m`` the mean, ``r = (var + eps)^-0.5``); the layer norm is the last tensor
equal to ``g x r - g m r + b`` whose parts nothing else reads, with ``g`` and ``b`` one
row over the normalised axes. Declines carry the reason: opset below 17, epsilon outside
the square root, a scale or shift that is not a constant or varies along another axis, a
part read elsewhere, a short row that would need Transposes.

Float rounding only. Against the unrewritten conversion the outputs moved by at most
1.6e-6 on the single norms above (unit-variance inputs) and 7.5e-8 on ConvNeXt's softmax;
against OpenVINO's CPU plugin (f32) the rewritten ConvNeXt is within 7.5e-8 (unrewritten
1.2e-7). The kernel is the more accurate of the two: Keras's ``x * inv - mean * inv``
cancels digits, and against float64 on [4,64,768] centred at 100 its error was 5.5e-5,
the kernel's 5.9e-6.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.mvn_as_normalization import reduce_mean_axes

STANDARD = ("", "ai.onnx")
#: LayerNormalization entered the default domain at opset 17.
MIN_OPSET = 17
#: Fewest normalised elements per row for which the Transposes around the kernel pay off:
#: with 4-8 they cost more than the passes saved, with 16 it varied, from 32 on they gained.
MIN_TRANSPOSED_ROW = 32
#: Most element-wise nodes the formula after the statistics may take (Keras writes 4-6);
#: bounds the search through a large graph.
MAX_FORMULA_NODES = 32

#: A symbolic value: monomial -> constant coefficient (float64, broadcastable to x).
#: Monomials: "1", "x", "m" (the mean), "r" (1/sqrt(var + eps)), "s" (sqrt(var + eps),
#: only ever divided by), "xr" and "mr".
Poly = dict[str, np.ndarray]

_PRODUCTS = {
    ("1", "1"): "1",
    ("1", "x"): "x",
    ("1", "m"): "m",
    ("1", "r"): "r",
    ("1", "s"): "s",
    ("1", "xr"): "xr",
    ("1", "mr"): "mr",
    ("x", "r"): "xr",
    ("m", "r"): "mr",
}


def _product(a: Poly, b: Poly) -> Poly | None:
    """``a * b``, or None when a term falls outside the monomials (``x * x``, ``r * r``)."""
    result: Poly = {}
    for ka, ca in a.items():
        for kb, cb in b.items():
            key = _PRODUCTS.get((ka, kb)) or _PRODUCTS.get((kb, ka))
            if key is None:
                return None
            term = ca * cb
            result[key] = result[key] + term if key in result else term
    return result


def _sum(a: Poly, b: Poly, sign: float = 1.0) -> Poly:
    result = dict(a)
    for key, coefficient in b.items():
        result[key] = result[key] + sign * coefficient if key in result else sign * coefficient
    return result


def _quotient(a: Poly, b: Poly) -> Poly | None:
    """``a / b`` for a constant ``b`` or a multiple of ``sqrt(var + eps)``."""
    if len(b) != 1 or np.any(next(iter(b.values())) == 0):
        return None
    if "1" in b:
        return _product(a, {"1": 1.0 / b["1"]})
    if "s" in b:
        return _product(a, {"r": 1.0 / b["s"]})
    return None


@dataclass
class _Statistics:
    """The mean/variance/root part of one spelled layer norm."""

    data: str
    axes: list[int]
    epsilon: float
    #: mean, x - mean, its square, the variance, [+ eps], the root.
    nodes: list[onnx.NodeProto]
    #: The tensors the formula after the statistics starts from, with their values.
    seeds: dict[str, Poly]


def _scalar(index: GraphIndex, name: str) -> float | None:
    value = index.constant(name)
    if value is None or value.size != 1 or value.dtype.kind != "f":
        return None
    return float(value.reshape(-1)[0])


def _readers(index: GraphIndex, name: str) -> list[onnx.NodeProto]:
    """The distinct nodes reading ``name`` (``Mul(d, d)`` once)."""
    seen: dict[int, onnx.NodeProto] = {}
    for reader in index.consumers.get(name, []):
        seen.setdefault(id(reader), reader)
    return list(seen.values())


def _first(nodes: list[onnx.NodeProto], found: list[bool]) -> onnx.NodeProto | None:
    """The first of ``nodes`` whose entry in ``found`` is true. Other readers are not ruled
    out here: the whole match is checked for outside readers at the end, where a decline
    can name them."""
    return next((node for node, ok in zip(nodes, found, strict=True) if ok), None)


def _constant_operand(index: GraphIndex, node: onnx.NodeProto, name: str) -> float | None:
    """The scalar constant a standard binary ``node`` combines ``name`` with, if any."""
    if node.domain not in STANDARD or len(node.input) != 2 or name not in node.input:
        return None
    return _scalar(index, node.input[1] if node.input[0] == name else node.input[0])


def _adds_constant(index: GraphIndex, node: onnx.NodeProto, name: str) -> bool:
    return node.op_type == "Add" and _constant_operand(index, node, name) is not None


def _squares(index: GraphIndex, node: onnx.NodeProto, name: str) -> bool:
    """``name * name`` (the converter's SquaredDifference) or ``name ^ 2``."""
    if node.domain not in STANDARD or not node.input or node.input[0] != name:
        return False
    if node.op_type == "Mul":
        return list(node.input) == [name, name]
    return node.op_type == "Pow" and _constant_operand(index, node, name) == 2.0


def _root_kind(index: GraphIndex, node: onnx.NodeProto, base: str) -> str | None:
    """Which root of ``base`` ``node`` takes: "r" for ``base^-0.5``, "s" for ``sqrt(base)``
    (or ``base^0.5``), None for neither."""
    if node.domain not in STANDARD or not node.input or node.input[0] != base:
        return None
    if node.op_type == "Sqrt":
        return "s"
    exponent = _scalar(index, node.input[1]) if node.op_type == "Pow" else None
    return {-0.5: "r", 0.5: "s"}.get(exponent) if exponent is not None else None


def _statistics(index: GraphIndex, mean: onnx.NodeProto, rank: int) -> _Statistics | str | None:
    """The statistics starting at ``mean``: ``x - mean``, its square, their mean over the
    same axes, ``+ eps`` and a root. A reason when they are a layer norm's that the kernel
    cannot take; None when ``mean`` starts no such statistics."""
    axes = reduce_mean_axes(index, mean)
    if axes is None:
        return None
    axes = sorted({a % rank for a in axes})
    data = mean.input[0]
    for sub in _readers(index, mean.output[0]):
        if sub.op_type != "Sub" or sub.domain not in STANDARD:
            continue
        if sorted(sub.input) != sorted([data, mean.output[0]]):
            continue
        readers = _readers(index, sub.output[0])
        square = _first(readers, [_squares(index, n, sub.output[0]) for n in readers])
        if square is None:
            continue
        readers = _readers(index, square.output[0])
        reduced = [reduce_mean_axes(index, n) for n in readers]
        same = [r is not None and sorted({a % rank for a in r}) == axes for r in reduced]
        variance = _first(readers, same)
        if variance is not None:
            return _root(index, data, axes, [mean, sub, square, variance])
    return None


def _root(
    index: GraphIndex, data: str, axes: list[int], nodes: list[onnx.NodeProto]
) -> _Statistics | str | None:
    """Adds the epsilon and the root after the variance (the last of ``nodes``)."""
    mean, sub, variance = nodes[0], nodes[1], nodes[-1]
    base = variance.output[0]
    readers = _readers(index, base)
    shift = _first(readers, [_adds_constant(index, n, base) for n in readers])
    epsilon = 0.0
    if shift is not None:
        epsilon = float(_constant_operand(index, shift, base) or 0.0)
        base = shift.output[0]
        nodes.append(shift)
    readers = _readers(index, base)
    root = _first(readers, [_root_kind(index, n, base) is not None for n in readers])
    if root is None:
        return None
    kind = _root_kind(index, root, base)
    nodes.append(root)
    readers = _readers(index, root.output[0])
    if (
        kind == "s"
        and shift is None
        and any(_adds_constant(index, n, root.output[0]) for n in readers)
    ):
        return "the epsilon is added outside the square root; the kernel adds it inside"
    one = np.ones((), np.float64)
    sign = one if sub.input[0] == data else -one  # x - mean, or mean - x
    seeds = {
        mean.output[0]: {"m": one},
        sub.output[0]: {"x": sign, "m": -sign},
        root.output[0]: {kind: one},
    }
    return _Statistics(data, axes, epsilon, nodes, seeds)


def _evaluate(
    index: GraphIndex, node: onnx.NodeProto, values: dict[str, Poly], data: str, limit: int
) -> Poly | None:
    """The value of an element-wise ``node`` over ``values``, ``x`` and small float32
    constants; None when it is no such node or its value leaves the monomials."""
    if node.domain not in STANDARD or len(node.output) != 1:
        return None
    operands: list[Poly] = []
    for name in node.input:
        if name in values:
            operands.append(values[name])
        elif name == data:
            operands.append({"x": np.ones((), np.float64)})
        else:
            value = index.weight(name)
            if value is None or value.dtype != np.float32 or value.size > limit:
                return None
            operands.append({"1": value.astype(np.float64)})
    op = node.op_type
    if op == "Neg" and len(operands) == 1:
        return _product(operands[0], {"1": -np.ones((), np.float64)})
    if op == "Reciprocal" and len(operands) == 1:
        return _quotient({"1": np.ones((), np.float64)}, operands[0])
    if len(operands) != 2:
        return None
    a, b = operands
    if op == "Add":
        return _sum(a, b)
    if op == "Sub":
        return _sum(a, b, -1.0)
    if op == "Mul":
        return _product(a, b)
    if op == "Div":
        return _quotient(a, b)
    return None


def _formula(
    index: GraphIndex, stats: _Statistics, limit: int
) -> tuple[list[onnx.NodeProto], dict[str, Poly]]:
    """The element-wise nodes computable from the statistics, ``x`` and constants, in
    graph order, with the value of each tensor."""
    inside = {id(n) for n in stats.nodes}
    values = dict(stats.seeds)
    heap: list[tuple[int, int]] = []
    pending: dict[int, onnx.NodeProto] = {}

    def push(name: str) -> None:
        for reader in _readers(index, name):
            if id(reader) not in inside and id(reader) not in pending:
                pending[id(reader)] = reader
                heapq.heappush(heap, (index.position(reader), id(reader)))

    for name in stats.seeds:
        push(name)
    region: list[onnx.NodeProto] = []
    while heap and len(region) < MAX_FORMULA_NODES:
        node = pending[heapq.heappop(heap)[1]]
        value = _evaluate(index, node, values, stats.data, limit)
        if value is None:
            continue
        values[node.output[0]] = value
        region.append(node)
        inside.add(id(node))
        push(node.output[0])
    return region, values


def _fits(coefficient: np.ndarray, shape: tuple) -> bool:
    """Whether ``coefficient`` broadcasts to ``shape`` without enlarging it."""
    if coefficient.ndim > len(shape):
        return False
    dims = shape[len(shape) - coefficient.ndim :]
    return all(size == 1 or size == dim for size, dim in zip(coefficient.shape, dims, strict=True))


def _layer_norm_terms(value: Poly, shape: tuple) -> tuple[np.ndarray, np.ndarray] | None:
    """(gamma, beta) when ``value`` is ``g x r - g m r + b`` of ``x``'s ``shape``."""
    if "xr" not in value or "mr" not in value or "s" in value:
        return None
    if not all(_fits(c, shape) for c in value.values()):
        return None
    if any(np.any(value[k] != 0) for k in ("x", "m", "r") if k in value):
        return None
    gamma, minus = np.broadcast_arrays(value["xr"], -value["mr"])
    if not np.allclose(gamma, minus, rtol=1e-6, atol=0.0):
        return None
    return value["xr"], value.get("1", np.zeros((), np.float64))


def _ancestors(
    index: GraphIndex, output: onnx.NodeProto, region: list[onnx.NodeProto]
) -> list[onnx.NodeProto]:
    """The nodes of ``region`` that ``output`` is computed from, with it, in graph order."""
    members = {id(n) for n in region}
    wanted = {id(output)}
    stack = [output]
    while stack:
        for name in stack.pop().input:
            producer = index.producer.get(name)
            if producer is not None and id(producer) in members and id(producer) not in wanted:
                wanted.add(id(producer))
                stack.append(producer)
    return [n for n in region if id(n) in wanted]


def _escape(index: GraphIndex, nodes: list[onnx.NodeProto], output: onnx.NodeProto) -> str | None:
    """Why ``nodes`` cannot be replaced as a whole: a tensor other than ``output``'s read
    outside them (None when nothing is)."""
    members = {id(n) for n in nodes}
    for node in nodes:
        if node is output:
            continue
        name = node.output[0]
        if name in index.graph_outputs:
            return f"'{name}' is a graph output"
        for reader in _readers(index, name):
            if id(reader) not in members:
                return _outside_reason(index, name, reader, nodes)
    return None


def _outside_reason(
    index: GraphIndex, name: str, reader: onnx.NodeProto, formula: list[onnx.NodeProto]
) -> str:
    """Why ``reader`` does not belong to the ``formula`` that computes ``name``: it brings
    in a tensor that is not a constant (a scale or shift from elsewhere), or it is some
    other reader."""
    if reader.op_type in ("Mul", "Add", "Sub", "Div") and len(reader.input) == 2:
        other = reader.input[1] if reader.input[0] == name else reader.input[0]
        # The formula's own tensors, and x (what its first node, the mean, reads).
        ours = {n.output[0] for n in formula} | {formula[0].input[0]}
        if other not in ours and index.weight(other) is None:
            return f"'{name}' is combined with '{other}', which is not a constant"
    return f"'{name}' is also read by {reader.op_type} '{reader.name}'"


def _row_constant(coefficient: np.ndarray, shape: tuple, axes: list[int]) -> np.ndarray | str:
    """``coefficient`` (which fits ``shape``) as one row over the normalised dims; a reason
    when it varies along another axis."""
    rank = len(shape)
    padded = coefficient.reshape((1,) * (rank - coefficient.ndim) + coefficient.shape)
    for axis, size in enumerate(padded.shape):
        if size != 1 and axis not in axes:
            return f"the scale or shift varies along axis {axis}, which is not normalised"
    row = tuple(shape[a] for a in axes)
    return np.broadcast_to(padded.reshape([padded.shape[a] for a in axes]), row)


def _pick(
    index: GraphIndex,
    stats: _Statistics,
    region: list[onnx.NodeProto],
    values: dict[str, Poly],
    shape: tuple,
) -> tuple[onnx.NodeProto, list[onnx.NodeProto], tuple[np.ndarray, np.ndarray]] | str:
    """(output node, every node it replaces, (gamma, beta)) of the last tensor that is the
    layer norm and whose intermediates only it reads; else the reason."""
    reason = None
    for candidate in reversed(region):
        terms = _layer_norm_terms(values[candidate.output[0]], shape)
        if terms is None:
            continue
        nodes = stats.nodes + _ancestors(index, candidate, region)
        escaped = _escape(index, nodes, candidate)
        if escaped is None:
            return candidate, nodes, terms
        reason = reason or escaped
    if reason is not None:
        return reason
    # No tensor is the layer norm: say what reads the statistics' results instead.
    formula = stats.nodes + region
    members = {id(n) for n in formula}
    for node in formula:
        for reader in _readers(index, node.output[0]):
            if id(reader) not in members:
                found = _outside_reason(index, node.output[0], reader, formula)
                return f"{found}; no tensor is x * g / sqrt(var + eps) + b"
    return "no tensor is x * g / sqrt(var + eps) + b"


@dataclass
class _Match:
    """One spelled layer norm, ready to be replaced."""

    stats: _Statistics
    rank: int
    #: The node writing the layer norm, and every node the kernel replaces.
    output: onnx.NodeProto
    nodes: list[onnx.NodeProto]
    scale: np.ndarray
    bias: np.ndarray


class LayerNormSpelledOut:
    name = "layer-norm-spelled-out"
    exact = False
    anchors = ("ReduceMean",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        found = self._match(index, node)
        if found is None:
            return None
        if isinstance(found, str):
            return Declined(self.name, node.name, found)
        return self._replace(index, node, report, found)

    def _match(self, index: GraphIndex, mean: onnx.NodeProto) -> _Match | str | None:
        if reduce_mean_axes(index, mean) is None or not any(
            r.op_type == "Sub" for r in _readers(index, mean.output[0])
        ):
            return None  # before shape inference: most ReduceMeans start no layer norm
        info = index.info(mean.input[0])
        if not info.shape:
            return None
        shape = tuple(info.shape)
        rank = len(shape)
        stats = _statistics(index, mean, rank)
        if stats is None or isinstance(stats, str):
            return stats
        if info.elem_type != onnx.TensorProto.FLOAT:
            return "only float32 layer norms are rewritten"
        axes = stats.axes
        if any(shape[a] is None for a in axes):
            return "the normalised dims are not static"
        row_size = int(np.prod([shape[a] for a in axes]))
        region, values = _formula(index, stats, row_size)
        picked = _pick(index, stats, region, values, shape)
        if isinstance(picked, str):
            return picked
        output, nodes, (gamma, beta) = picked
        scale = _row_constant(gamma, shape, axes)
        bias = _row_constant(beta, shape, axes)
        for row in (scale, bias):
            if isinstance(row, str):
                return row
        if axes != list(range(axes[0], rank)) and row_size < MIN_TRANSPOSED_ROW:
            return (
                f"axes {axes} are not the trailing ones and a row of {row_size} is too "
                f"short for the Transposes to pay off (at least {MIN_TRANSPOSED_ROW})"
            )
        if index.opset() < MIN_OPSET:
            return f"LayerNormalization needs opset {MIN_OPSET} (the model has {index.opset()})"
        return _Match(stats, rank, output, nodes, scale, bias)

    def _replace(
        self, index: GraphIndex, anchor: onnx.NodeProto, report: RewriteReport, match: _Match
    ) -> Fired | None:
        axes, rank = match.stats.axes, match.rank
        data = match.stats.data
        result = match.output.output[0]
        base = match.output.name or result
        trailing = axes == list(range(axes[0], rank))
        # Trailing axes: the kernel reads x and writes the formula's output. Otherwise the
        # normalised axes go last (in order) and come back after, unless the only reader is
        # a Transpose making the same move: the kernel then writes that Transpose's output.
        perm = [a for a in range(rank) if a not in axes] + axes
        reader = None if trailing else index.only_consumer(result)
        if reader is not None and (
            reader.op_type != "Transpose"
            or reader.domain not in STANDARD
            or list(index.attribute(reader, "perm", []) or []) != perm
        ):
            reader = None
        matched = match.nodes + ([reader] if reader is not None else [])
        if not index.is_free(matched):
            return None
        index.claim(matched)
        made: list[onnx.NodeProto] = []
        detail = f"LayerNormalization over axes {axes}"
        source, target, axis = data, result, axes[0]
        if not trailing:
            axis = rank - len(axes)
            source = index.names.fresh(f"{data}/normalised_last")
            made.append(
                helper.make_node(
                    "Transpose",
                    [data],
                    [source],
                    name=index.names.fresh(f"{base}/to_last"),
                    perm=perm,
                )
            )
            if reader is not None:
                target = reader.output[0]
                detail += " after a Transpose (the next one cancelled)"
            else:
                target = index.names.fresh(f"{result}/normalised_last")
                detail += " between Transposes"
        scale = index.add_initializer(f"{base}/scale", np.ascontiguousarray(match.scale, "f4"))
        bias = index.add_initializer(f"{base}/bias", np.ascontiguousarray(match.bias, "f4"))
        made.append(
            helper.make_node(
                "LayerNormalization",
                [source, scale, bias],
                [target],
                name=base,
                axis=axis,
                epsilon=match.stats.epsilon,
            )
        )
        if not trailing and reader is None:
            made.append(
                helper.make_node(
                    "Transpose",
                    [target],
                    [result],
                    name=index.names.fresh(f"{base}/back"),
                    perm=[int(i) for i in np.argsort(perm)],
                )
            )
        index.replace(matched, made)
        # What survives is the formula's output, or the cancelled Transpose's (the same
        # values, channels last); the rest is computed inside the kernel.
        final = target if reader is not None else result
        for node in matched:
            if node.output[0] != final:
                report.absorbed[node.output[0]] = base
        return Fired(self.name, anchor.name, detail)
