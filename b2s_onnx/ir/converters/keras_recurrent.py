"""A TensorFlow while-loop that runs a Keras LSTM/GRU/SimpleRNN cell, as one ONNX
LSTM/GRU/RNN.

OpenVINO's TensorFlow frontend writes a Keras 3 recurrent layer as a Loop-5 over the
time-major input: counters for the iteration and the time step, a condition
``counter + 1 < T and time + 1 < T``, ``Gather(X, time)`` for the step, the cell spelled
out in MatMuls and element-wise ops with its states on back edges, and a TensorList
(``ScatterUpdate`` into a zero tensor) that collects the hidden state at ``time`` (whole
sequence) or at 0 (last output only). Converted literally that is an ONNX Loop of about
forty nodes per step: 0.9-1.1x OpenVINO's latency at 20 steps, 1 thread, where one
sequence op runs every step in one kernel.

The cell is recognised by what it computes, not by op names alone:
- LSTM: ``c' = sigmoid(f) * c + sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')``;
- GRU: ``z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)``,
  ``h' = z * h + (1 - z) * tanh(x_h + r * h_h)`` (Keras ``reset_after=True``) or
  ``tanh(x_h + (r * h) R_h)`` (``reset_after=False``);
- SimpleRNN: ``h' = act(x W + h R + b)`` with act tanh, relu or sigmoid;
where the gate pre-activations are slices (Split, VariadicSplit or StridedSlice along the
last axis) of ``x_t W [+ b]`` and ``h R [+ b]`` with constant weights. The gates' roles
come from where each slice is used, so the weights are reordered into OpenVINO's cell
layout and then ONNX's as for an LSTMCell. Anything else in the body (another op on a
state, a computed bound, peepholes, masks, an output the loop concatenates) keeps the
literal Loop, which computes every body. Values move by float rounding only.
"""

from __future__ import annotations

import numpy as np

from b2s_onnx.ir.body import Body, PortMap
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.cell_over_time import _Network
from b2s_onnx.ir.converters.recurrent import emit_sequence
from b2s_onnx.ir.converters.registry import canonical_type, prepare
from b2s_onnx.ir.reader import Layer, topological_order

Source = tuple[str, int]  # (layer id, output port id)
_ACTIVATIONS = {"Tanh": "tanh", "ReLU": "relu", "Sigmoid": "sigmoid"}
#: Layers that only reshape a shape computation (the TensorList's zero tensor).
_SHAPE_OPS = {"ShapeOf", "Slice", "StridedSlice", "Concat", "Broadcast", "Gather", "Convert"}


class _NoMatchError(Exception):
    """The body is not the pattern: the Loop is converted literally."""


class _Matcher:
    """Walks a Loop body backwards from the values it carries, recording what it used."""

    def __init__(self, network, constants) -> None:
        self.body = _Network(network)
        self.network = network
        self.constants = constants
        self.used: set[str] = set()

    def layer(self, source: Source) -> Layer:
        return self.body.layer(source[0])

    def source(self, layer: Layer, index: int) -> Source:
        if index >= len(layer.inputs):
            raise _NoMatchError
        return self.network.sources[(layer.id, layer.inputs[index].id)]

    def expect(self, source: Source, *types: str) -> Layer:
        layer = self.layer(source)
        if layer.type not in types:
            raise _NoMatchError
        self.used.add(layer.id)
        return layer

    def constant(self, source: Source) -> np.ndarray:
        value = self.constants(source)
        if value is None:
            raise _NoMatchError
        return value

    def scalar(self, source: Source) -> float:
        value = self.constant(source)
        if value.size != 1:
            raise _NoMatchError
        return float(value.reshape(-1)[0])

    def pair(self, layer: Layer, first, second):
        """``first`` and ``second`` applied to a commutative layer's two inputs, in the
        order that matches (each raises _NoMatchError when its input does not fit)."""
        if len(layer.inputs) != 2:
            raise _NoMatchError
        a, b = self.source(layer, 0), self.source(layer, 1)
        for x, y in ((a, b), (b, a)):
            saved = set(self.used)
            try:
                return first(x), second(y)
            except _NoMatchError:
                self.used = saved
        raise _NoMatchError

    def unary(self, source: Source, op: str) -> Source:
        return self.source(self.expect(source, op), 0)

    # -- gate pre-activations -----------------------------------------------------------

    def slice_of(self, source: Source, hidden: int) -> tuple[Source, int]:
        """(the sliced tensor, which ``hidden``-wide block) for a slice along the last axis."""
        layer = self.expect(source, "Split", "VariadicSplit", "StridedSlice")
        base = self.source(layer, 0)
        dims = self.layer(base).output_port(base[1]).dims
        if not dims or dims[-1] is None or dims[-1] % hidden:
            raise _NoMatchError
        rank = len(dims)
        if layer.type in ("Split", "VariadicSplit"):
            if int(self.scalar(self.source(layer, 1))) % rank != rank - 1:
                raise _NoMatchError
            if layer.type == "VariadicSplit":
                lengths = self.constant(self.source(layer, 2)).reshape(-1)
                if np.any(lengths != hidden):
                    raise _NoMatchError
            elif layer.attrs.get("num_splits") != dims[-1] // hidden:
                raise _NoMatchError
            return base, [p.id for p in layer.outputs].index(source[1])
        # StridedSlice: only the last axis cut, unit strides, no special masks.
        out = layer.outputs[0].dims
        if out is None or list(out[:-1]) != list(dims[:-1]) or out[-1] != hidden:
            raise _NoMatchError
        for key in ("new_axis_mask", "shrink_axis_mask", "ellipsis_mask"):
            if any(layer.attrs.get(key) or []):
                raise _NoMatchError
        if len(layer.inputs) > 3 and np.any(self.constant(self.source(layer, 3)) != 1):
            raise _NoMatchError
        begin = self.constant(self.source(layer, 1)).reshape(-1)
        masks = list(layer.attrs.get("begin_mask") or [])
        last = len(begin) - 1
        if len(begin) != rank:
            raise _NoMatchError
        start = 0 if (last < len(masks) and masks[last]) else int(begin[last]) % dims[-1]
        if start % hidden:
            raise _NoMatchError
        return base, start // hidden

    def projection(self, source: Source, data: Source) -> tuple[np.ndarray, np.ndarray | None]:
        """``data @ W [+ b]`` spelled as MatMul (and Adds of constants): (W as
        ``[features, width]``, b or None)."""
        found, weights, bias = self.projected(source)
        if found != data:
            raise _NoMatchError
        return weights, bias

    def projected(self, source: Source) -> tuple[Source, np.ndarray, np.ndarray | None]:
        """``? @ W [+ b]``: (the projected tensor, W as ``[features, width]``, b or None)."""
        bias = None
        layer = self.layer(source)
        if layer.type == "Add":
            matmul, bias = self.pair(
                layer, lambda s: self.expect(s, "MatMul"), lambda s: self.constant(s)
            )
            self.used.add(layer.id)
        else:
            matmul = self.expect(source, "MatMul")
        if matmul.attrs.get("transpose_a"):
            raise _NoMatchError
        weights = self.constant(self.source(matmul, 1))
        if weights.ndim != 2:
            raise _NoMatchError
        if matmul.attrs.get("transpose_b"):
            weights = weights.T
        return self.source(matmul, 0), weights, None if bias is None else bias.reshape(-1)


def _is(expected: Source):
    """A matcher for an operand that must be ``expected`` itself."""

    def match(source: Source) -> Source:
        if source != expected:
            raise _NoMatchError
        return source

    return match


def _blocks(matrix: np.ndarray, order: list[int], hidden: int) -> np.ndarray:
    """Column blocks of ``hidden`` in ``order``, as OpenVINO's ``[gates * H, features]``."""
    return np.concatenate([matrix[..., k * hidden : (k + 1) * hidden] for k in order], -1).T


def _lstm(m: _Matcher, x_t: Source, h: Source, c: Source, h_new: Source, c_new: Source):
    """OpenVINO LSTMCell weights (gates f, i, c, o) for the spelled-out Keras LSTM."""
    hidden = m.layer(h).output_port(h[1]).dims[-1]
    if hidden is None:
        raise _NoMatchError
    gates: dict[str, Source] = {}

    def gate(name: str, op: str):
        def match(source: Source):
            gates[name] = m.unary(source, op)
            return source

        return match

    def tanh_of_c(source: Source):
        if m.unary(source, "Tanh") != c_new:
            raise _NoMatchError

    m.pair(m.expect(h_new, "Multiply"), gate("o", "Sigmoid"), tanh_of_c)
    m.pair(
        m.expect(c_new, "Add"),
        lambda s: m.pair(m.expect(s, "Multiply"), gate("f", "Sigmoid"), _is(c)),
        lambda s: m.pair(m.expect(s, "Multiply"), gate("i", "Sigmoid"), gate("g", "Tanh")),
    )
    blocks, base = {}, None
    for name in "ifgo":
        found, blocks[name] = m.slice_of(gates[name], hidden)
        if base not in (None, found):
            raise _NoMatchError
        base = found
    if sorted(blocks.values()) != [0, 1, 2, 3]:
        raise _NoMatchError
    terms = _sum_terms(m, base)
    w, r, b = _split_terms(m, terms, x_t, h, 4 * hidden)
    order = [blocks[g] for g in "ifgo"]
    order = [order[1], order[0], order[2], order[3]]  # OpenVINO's f, i, c, o
    return (
        "LSTMCell",
        hidden,
        ["sigmoid", "tanh", "tanh"],
        [
            _blocks(w, order, hidden),
            _blocks(r, order, hidden),
            _blocks(b[np.newaxis], order, hidden).reshape(-1),
        ],
    )


def _sum_terms(m: _Matcher, source: Source) -> list[Source]:
    """The operands of a tree of two-input Adds."""
    layer = m.layer(source)
    if layer.type != "Add" or len(layer.inputs) != 2:
        return [source]
    m.used.add(layer.id)
    return _sum_terms(m, m.source(layer, 0)) + _sum_terms(m, m.source(layer, 1))


def _split_terms(m: _Matcher, terms: list[Source], x_t: Source, h: Source, width: int):
    """(W, R, b) from the terms ``x_t @ W``, ``h @ R`` and constants of one sum."""
    w = r = None
    bias = np.zeros(width, np.float64)
    for term in terms:
        layer = m.layer(term)
        if layer.type == "MatMul":
            data = m.source(layer, 0)
            weights, _ = m.projection(term, data)
            if data == x_t and w is None:
                w = weights
            elif data == h and r is None:
                r = weights
            else:
                raise _NoMatchError
        else:
            value = m.constant(term).reshape(-1)
            if value.size not in (1, width):
                raise _NoMatchError
            bias = bias + value
    if w is None or r is None or w.shape[1] != width or r.shape != (r.shape[0], width):
        raise _NoMatchError
    return w, r, bias.astype(w.dtype)


def _simple_rnn(m: _Matcher, x_t: Source, h: Source, h_new: Source):
    layer = m.layer(h_new)
    activation = _ACTIVATIONS.get(layer.type)
    if activation is None:
        raise _NoMatchError
    m.used.add(layer.id)
    hidden = m.layer(h).output_port(h[1]).dims[-1]
    if hidden is None:
        raise _NoMatchError
    w, r, b = _split_terms(m, _sum_terms(m, m.source(layer, 0)), x_t, h, hidden)
    return "RNNCell", hidden, [activation], [w.T, r.T, b]


def _gru(m: _Matcher, x_t: Source, h: Source, h_new: Source):
    """OpenVINO GRUCell weights (z, r, h) for a Keras GRU: ``reset_after=True`` (the reset
    gate scales ``h R_h + b_h``: ``linear_before_reset``, a 4H bias) or ``reset_after=False``
    (it scales ``h`` before its own ``R_h`` MatMul: ONNX's default GRU, a 3H bias)."""
    hidden = m.layer(h).output_port(h[1]).dims[-1]
    if hidden is None:
        raise _NoMatchError
    parts: dict[str, Source] = {}
    before: list[tuple[np.ndarray, np.ndarray | None]] = []

    def keep(name: str, op: str | None = None):
        def match(source: Source):
            parts[name] = m.unary(source, op) if op else source
            return source

        return match

    def one_minus_z(source: Source):
        sub = m.expect(source, "Subtract")
        if m.scalar(m.source(sub, 0)) != 1.0 or m.source(sub, 1) != parts["z"]:
            raise _NoMatchError

    def recurrence(source: Source):
        before.clear()
        if m.layer(source).type == "Multiply":  # reset_after: r * (h R_h + b_h)
            m.pair(m.expect(source, "Multiply"), keep("r", "Sigmoid"), keep("h_h"))
            return
        data, r_h, b_h = m.projected(source)  # reset_after=False: (r * h) R_h [+ b_h]
        m.pair(m.expect(data, "Multiply"), keep("r", "Sigmoid"), _is(h))
        before.append((r_h, b_h))

    def candidate(source: Source):
        m.pair(m.expect(m.unary(source, "Tanh"), "Add"), keep("x_h"), recurrence)

    def z_gate(source: Source):
        parts["z"] = source
        parts["z_in"] = m.unary(source, "Sigmoid")
        return source

    m.pair(
        m.expect(h_new, "Add"),
        lambda s: m.pair(m.expect(s, "Multiply"), z_gate, _is(h)),
        lambda s: m.pair(m.expect(s, "Multiply"), one_minus_z, candidate),
    )

    x_base, x_block = m.slice_of(parts["x_h"], hidden)
    h_base, h_block = m.slice_of(parts["h_h"], hidden) if not before else (None, None)
    blocks = {"h": (x_block, h_block)}
    for gate, pre in (("z", parts["z_in"]), ("r", parts["r"])):
        add = m.expect(pre, "Add")
        a, b = m.source(add, 0), m.source(add, 1)
        first, second = m.slice_of(a, hidden), m.slice_of(b, hidden)
        if first[0] != x_base:
            first, second = second, first
        h_base = second[0] if h_base is None else h_base
        if first[0] != x_base or second[0] != h_base:
            raise _NoMatchError
        blocks[gate] = (first[1], second[1])
    recurrent_gates = "zr" if before else "zrh"
    w, b_in = m.projection(x_base, x_t)
    r, b_rec = m.projection(h_base, h)
    if w.shape[1] != 3 * hidden or r.shape[1] != len(recurrent_gates) * hidden:
        raise _NoMatchError
    x_order = [blocks[g][0] for g in "zrh"]
    h_order = [blocks[g][1] for g in recurrent_gates]
    if sorted(x_order) != [0, 1, 2] or sorted(h_order) != list(range(len(recurrent_gates))):
        raise _NoMatchError
    b_in = np.zeros(3 * hidden, w.dtype) if b_in is None else np.broadcast_to(b_in, (3 * hidden,))
    b_rec = np.zeros(r.shape[1], w.dtype) if b_rec is None else np.broadcast_to(b_rec, r.shape[1:])
    bx = _blocks(b_in[np.newaxis], x_order, hidden).reshape(-1)
    bh = _blocks(b_rec[np.newaxis], h_order, hidden).reshape(-1)
    recurrent = _blocks(r, h_order, hidden)
    if before:
        r_h, b_h = before[0]
        if r_h.shape != (hidden, hidden):
            raise _NoMatchError
        recurrent = np.concatenate([recurrent, r_h.T])
        b_h = np.zeros(hidden, w.dtype) if b_h is None else np.broadcast_to(b_h, (hidden,))
        bias = bx + np.concatenate([bh, b_h])  # every bias outside the reset product
    else:
        bias = np.concatenate(
            [bx[: 2 * hidden] + bh[: 2 * hidden], bx[2 * hidden :], bh[2 * hidden :]]
        )
    weights = [_blocks(w, x_order, hidden), recurrent, bias.astype(w.dtype)]
    return "GRUCell", hidden, ["sigmoid", "tanh"], weights


def _counter_bound(m: _Matcher, source: Source, counters: dict[str, Source]) -> int:
    """The iterations a condition allows: ``Less(p + 1, K)`` terms, joined by LogicalAnd,
    of Parameters ``p`` counting up from 0 (``counters``: id -> its ``p + 1``)."""
    layer = m.layer(source)
    if layer.type == "LogicalAnd":
        m.used.add(layer.id)
        return min(_counter_bound(m, m.source(layer, i), counters) for i in range(2))
    less = m.expect(source, "Less")
    step = m.source(less, 0)
    if step not in counters.values():
        raise _NoMatchError
    bound = m.scalar(m.source(less, 1))
    if bound != int(bound) or bound < 1:
        raise _NoMatchError
    return int(bound)


def _counters(m: _Matcher, links: PortMap, initial) -> dict[str, Source]:
    """Carried Parameters that start at 0 and take ``p + 1`` each iteration."""
    found = {}
    for parameter, result in links.back_edges.items():
        if initial(parameter) != 0:
            continue
        fed = m.source(m.body.layer(result), 0)
        add = m.layer(fed)
        if add.type != "Add" or len(add.inputs) != 2:
            continue
        operands = [m.source(add, 0), m.source(add, 1)]
        if parameter not in (operands[0][0], operands[1][0]):
            continue
        other = operands[1] if operands[0][0] == parameter else operands[0]
        value = m.constants(other)
        if value is None or value.size != 1 or float(value.reshape(-1)[0]) != 1.0:
            continue
        found[parameter] = fed
        m.used.add(add.id)
    return found


def _tensor_list(m: _Matcher, scatter: Layer, list_parameter: str, h_new: Source, time: str):
    """``"sequence"`` when the ScatterUpdate writes ``h'`` at ``time`` into a ``[T, ...]``
    list, ``"last"`` when it writes it at 0 into a list of one."""
    if m.scalar(m.source(scatter, 3)) != 0:
        raise _NoMatchError
    update = m.expect(m.source(scatter, 2), "Unsqueeze", "Reshape")
    if m.source(update, 0) != h_new:
        raise _NoMatchError
    new_dims = update.outputs[0].dims
    h_dims = m.layer(h_new).output_port(h_new[1]).dims
    if new_dims is None or h_dims is None or tuple(new_dims) != (1, *h_dims):
        raise _NoMatchError
    # The list: the carried Parameter broadcast to its shape, nothing else read.
    stack = [m.source(scatter, 0)]
    while stack:
        source = stack.pop()
        layer = m.layer(source)
        if layer.id in (list_parameter, h_new[0]) or layer.type == "Const":
            continue
        if layer.type not in _SHAPE_OPS or layer.id in m.used:
            raise _NoMatchError
        m.used.add(layer.id)
        stack.extend(m.source(layer, i) for i in range(len(layer.inputs)))
    index = m.source(scatter, 1)
    length = scatter.outputs[0].dims[0] if scatter.outputs[0].dims else None
    value = m.constants(index)
    if value is not None:
        if value.size != 1 or int(value.reshape(-1)[0]) != 0 or length != 1:
            raise _NoMatchError
        return "last"
    if m.layer(index).type in ("Reshape", "Unsqueeze"):
        m.used.add(index[0])
        index = m.source(m.layer(index), 0)
    if index[0] != time:
        raise _NoMatchError
    return "sequence"


def convert_keras_loop(
    ctx: ConversionContext, layer: Layer, inputs: list[str], links: PortMap
) -> bool:
    """Writes the Loop ``layer`` as one ONNX sequence op when its body runs a Keras
    recurrent cell over time (see the module doc); returns False, having written no node,
    when it does not."""
    network = layer.bodies.get("body")
    if network is None or len(inputs) < 2:
        return False
    trip = ctx.value(inputs[0])
    go = ctx.value(inputs[1])
    if trip is None or go is None or not bool(np.asarray(go).reshape(-1)[0]):
        return False
    if any(link.purpose == "current_iteration" for link in links.inputs):
        return False
    if any(link.axis is not None for link in links.inputs + links.outputs):
        return False
    if not any(link.purpose == "execution_condition" for link in links.outputs):
        return False
    for item in network.layers.values():
        item.type = canonical_type(item.type)
    kinds = {item.type for item in network.layers.values()}
    if not {"MatMul", "Gather"} <= kinds:
        return False  # no cell over a gathered step: nothing to fold constants for
    order = topological_order(network)
    constant_ids: set[str] = set()
    sources = network.sources
    for item in order:
        if item.type in ("Parameter", "Result"):
            continue
        feeds = [sources[(item.id, port.id)][0] for port in item.inputs]
        if all(f in constant_ids for f in feeds):
            constant_ids.add(item.id)
    cone = [item for item in order if item.id in constant_ids]
    body = Body(ctx, layer, "body")
    for item in cone:
        body.ctx.assign_output_names(item)
        prepare(item, network.path)
    from b2s_onnx.ir.convert import convert_layers  # the driver imports the converters

    convert_layers(body.ctx, cone)

    def constants(source: Source) -> np.ndarray | None:
        tensor = body.ctx.tensors.get(source)
        return None if tensor is None else ctx.value(tensor)

    ids = [port.id for port in layer.inputs]
    outer = {link.body_layer: inputs[ids.index(link.external)] for link in links.inputs}

    def initial(parameter: str):
        value = ctx.value(outer[parameter])
        return None if value is None or value.size != 1 else float(value.reshape(-1)[0])

    m = _Matcher(network, constants)
    try:
        for item in network.layers.values():
            if item.type not in ("Parameter", "Result") and item.id not in constant_ids:
                prepare(item, network.path)
        plan = _match(m, layer, links, outer, initial, int(np.asarray(trip).reshape(-1)[0]))
    except _NoMatchError:
        return False
    leftover = [
        item.id
        for item in network.layers.values()
        if item.type not in ("Parameter", "Result")
        and item.id not in constant_ids
        and item.id not in m.used
    ]
    if leftover:
        return False
    ctx.begin(layer)
    _emit(ctx, layer, plan)
    return True


def _match(m: _Matcher, layer: Layer, links: PortMap, outer, initial, trip: int) -> dict:
    counters = _counters(m, links, initial)
    condition = next((o for o in links.outputs if o.purpose == "execution_condition"), None)
    if condition is None or not counters:
        raise _NoMatchError
    steps = _counter_bound(m, m.source(m.body.layer(condition.body_layer), 0), counters)
    if trip >= 0:
        steps = min(steps, trip)
    # The step: Gather(X, time, axis 0) of an invariant [T, N, I] input, T == steps.
    invariant = [
        lk.body_layer
        for lk in links.inputs
        if lk.body_layer not in links.back_edges and lk.purpose is None
    ]
    found = []
    for parameter in invariant:
        readers = m.body.readers_of(m.body.layer(parameter))
        if len(readers) == 1 and readers[0].type == "Gather":
            found.append((parameter, readers[0]))
    if len(found) != 1:
        raise _NoMatchError
    data, gather = found[0]
    dims = m.body.dims(m.body.layer(data))
    time = m.source(gather, 1)
    if time[0] not in counters or m.scalar(m.source(gather, 2)) != 0:
        raise _NoMatchError
    if gather.attrs.get("batch_dims", 0) or dims is None or len(dims) != 3 or dims[0] != steps:
        raise _NoMatchError
    m.used.add(gather.id)
    x_t = (gather.id, gather.outputs[0].id)
    carried = [p for p in links.back_edges if p not in counters]

    def new_value(parameter: str) -> Source:
        return m.source(m.body.layer(links.back_edges[parameter]), 0)

    lists = [p for p in carried if m.layer(new_value(p)).type == "ScatterUpdate"]
    states = [p for p in carried if p not in lists]
    if len(lists) > 1:
        raise _NoMatchError
    cell = None
    attempts = []
    if len(states) == 2:
        for h, c in (states, states[::-1]):
            attempts.append(
                ([h, c], lambda h=h, c=c: _lstm(m, x_t, (h, 0), (c, 0), new_value(h), new_value(c)))
            )
    elif len(states) == 1:
        (h,) = states
        attempts.append(([h], lambda: _gru(m, x_t, (h, 0), new_value(h))))
        attempts.append(([h], lambda: _simple_rnn(m, x_t, (h, 0), new_value(h))))
    for order, attempt in attempts:
        saved = set(m.used)
        try:
            cell = (order, *attempt())
            break
        except _NoMatchError:
            m.used = saved
    if cell is None:
        raise _NoMatchError
    order, kind, hidden, activations, weights = cell
    h_new = new_value(order[0])
    list_kind = None
    if lists:
        scatter = m.expect(new_value(lists[0]), "ScatterUpdate")
        list_kind = _tensor_list(m, scatter, lists[0], h_new, time[0])
        if list_kind == "sequence" and scatter.outputs[0].dims[0] != steps:
            raise _NoMatchError
    plan = []
    by_port = {port.id: index for index, port in enumerate(layer.outputs)}
    finals = [new_value(s) for s in order]
    for link in links.outputs:
        if link.purpose is not None:
            continue
        value = m.source(m.body.layer(link.body_layer), 0)
        if lists and value == new_value(lists[0]):
            plan.append((by_port[link.external], list_kind))
        elif value in finals:
            plan.append(
                (by_port[link.external], ("state", [new_value(s) for s in order].index(value)))
            )
        else:
            raise _NoMatchError
    cell_layer = Layer(
        id=layer.id,
        name=layer.name,
        type=kind,
        version="opset4",
        data={},
        attrs={
            "hidden_size": hidden,
            "activations": activations,
            "activations_alpha": [],
            "activations_beta": [],
            "clip": 0.0,
            # A 4H GRU bias is reset_after's: b_h stays inside the reset product.
            "linear_before_reset": kind == "GRUCell" and weights[2].size == 4 * hidden,
        },
    )
    return {
        "cell": cell_layer,
        "x": outer[data],
        "states": [outer[s] for s in order],
        "weights": weights,
        "outputs": plan,
    }


def _emit(ctx: ConversionContext, layer: Layer, plan: dict) -> None:
    wanted = [what for _, what in plan["outputs"]]
    count = len(plan["states"])
    results = [ctx.tmp("y") if "sequence" in wanted else ""]
    results += [
        ctx.tmp("state") if ("state", i) in wanted or (i == 0 and "last" in wanted) else ""
        for i in range(count)
    ]
    kind = emit_sequence(
        ctx,
        plan["cell"],
        x=plan["x"],
        time_axis=0,
        states=plan["states"],
        weights=plan["weights"],
        direction="forward",
        outputs=results,
    )
    for index, what in plan["outputs"]:
        output = ctx.out(layer, index)
        cast = ctx.types.get(output, kind) != kind
        target = None if cast else output
        if what == "sequence":  # [T, 1, N, H] -> [T, N, H]
            axes = ctx.const("axes", np.asarray([1], np.int64))
            value = ctx.one("Squeeze", [results[0], axes], target)
        elif what == "last":  # [1, N, H]: the list of one the loop wrote
            value = ctx.one("Identity", [results[1]], target)
        else:  # [1, N, H] -> [N, H]
            axes = ctx.const("axes", np.asarray([0], np.int64))
            value = ctx.one("Squeeze", [results[1 + what[1]], axes], target)
        if cast:
            ctx.one("Cast", [value], output, to=ctx.types[output])
