"""A TensorIterator that runs one recurrent cell over time, as one ONNX LSTM/GRU/RNN.

OpenVINO's TensorFlow and Keras frontends write a recurrent layer as a TensorIterator
whose body slices one time step, squeezes it, runs an LSTMCell/GRUCell/RNNCell with the
states on back edges, and stacks the new hidden state. Converted literally that is an
ONNX Loop, and onnxruntime pays its per-iteration overhead on every step: 1.9-4.9x
OpenVINO's latency at 50-100 steps, 1 thread. The same recurrence as one ONNX sequence op
runs all steps in one kernel (the input projections of every step in one GEMM).

The body must be exactly that pattern, or the TensorIterator stays a Loop:
- one sliced input, one step per iteration over the whole axis (forwards or backwards),
  whose Parameter only feeds a Squeeze (or an equivalent Reshape) into the cell's input;
- the cell's state inputs are Parameters carried by back edges from its own outputs;
- weights, recurrence weights, biases (and version-1 peepholes) are constants, possibly
  computed from constants inside the body (an FP16 IR's Convert);
- every output of the TensorIterator is either the new hidden state stacked by an
  Unsqueeze (or an equivalent Reshape) and concatenated in the input's direction, or the
  last value of a state.
Anything else in the body (another op on the states, a second cell, an output sliced the
other way) keeps the literal Loop, which computes every body.

The sequence op computes the same recurrence; onnxruntime accumulates the input
projections in another order, so values move by float rounding only (the Loop's single
steps run the same kernels).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from b2s_onnx.ir.body import Body, PortLink, PortMap
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.recurrent import FAMILIES, emit_sequence
from b2s_onnx.ir.converters.registry import canonical_type, prepare
from b2s_onnx.ir.reader import IRModel, Layer, topological_order


class _Network:
    """Who reads what in a body network."""

    def __init__(self, network: IRModel) -> None:
        self.network = network
        self.readers: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
        for (to_layer, to_port), source in network.sources.items():
            self.readers[source].append((to_layer, to_port))

    def layer(self, layer_id: str) -> Layer:
        return self.network.layers[layer_id]

    def source(self, layer: Layer, index: int) -> Layer | None:
        """The layer feeding input ``index`` (None: the layer has no such input)."""
        if index >= len(layer.inputs):
            return None
        return self.layer(self.network.sources[(layer.id, layer.inputs[index].id)][0])

    def source_port(self, layer: Layer, index: int) -> int | None:
        if index >= len(layer.inputs):
            return None
        return self.network.sources[(layer.id, layer.inputs[index].id)][1]

    def readers_of(self, layer: Layer, index: int = 0) -> list[Layer]:
        if index >= len(layer.outputs):
            return []
        port = layer.outputs[index].id
        return [self.layer(to) for to, _ in self.readers.get((layer.id, port), [])]

    @staticmethod
    def dims(layer: Layer, index: int = 0) -> tuple[int | None, ...] | None:
        return layer.outputs[index].dims if index < len(layer.outputs) else None


@dataclass
class _Match:
    body: _Network
    cell: Layer
    sliced: PortLink
    #: Body Parameter ids carrying the states, in the cell's input order.
    states: list[str]
    #: Body layers computing the constant inputs (weights, axes), in topological order.
    cone: list[Layer]
    #: The Unsqueeze/Reshape stacking the hidden state, and the axes it may insert (with a
    #: batch of one, inserting before or after the batch gives the same tensor).
    stack: Layer | None
    stack_axes: tuple[int, ...]


def _removes_axis(before, after, axis: int) -> bool:
    """Whether a tensor of dims ``before`` reshaped to ``after`` only drops ``axis`` (of
    size 1): the dims must say so, with at most one unknown left."""
    if before is None or after is None or len(before) != len(after) + 1:
        return False
    if before[axis] != 1:
        return False
    kept = tuple(d for i, d in enumerate(before) if i != axis)
    return kept == tuple(after) and sum(d is None for d in after) <= 1


def _constant_cone(body: _Network, roots: list[Layer], allowed: set[str]) -> list[Layer] | None:
    """The layers computing ``roots`` from Consts and invariant Parameters (``allowed``),
    or None when one of them reads anything else."""
    seen: dict[str, Layer] = {}
    stack = list(roots)
    while stack:
        layer = stack.pop()
        if layer.id in seen:
            continue
        if layer.type == "Parameter":
            if layer.id not in allowed:
                return None
            continue
        if layer.type in ("Result", *FAMILIES):
            return None
        seen[layer.id] = layer
        stack.extend(body.source(layer, i) for i in range(len(layer.inputs)))
    return list(seen.values())


def _match(layer: Layer, links: PortMap) -> _Match | None:
    """The pattern's parts in ``layer``'s body, or None where the body is anything else."""
    network = layer.bodies.get("body")
    if network is None or any(link.purpose for link in links.inputs + links.outputs):
        return None
    body = _Network(network)
    for item in network.layers.values():
        item.type = canonical_type(item.type)
    cells = [item for item in network.layers.values() if item.type in FAMILIES]
    sliced = [link for link in links.inputs if link.axis is not None]
    if len(cells) != 1 or len(sliced) != 1:
        return None
    cell, link = cells[0], sliced[0]
    family = FAMILIES[cell.type]
    # Its inputs, outputs and attributes checked as the Loop's conversion would check them.
    prepare(cell, network.path)
    if link.part_size != 1 or abs(link.stride) != 1:
        return None
    if (link.start, link.end) not in ((0, -1), (-1, 0)) or (link.start == 0) != (link.stride > 0):
        return None
    # The step: sliced Parameter -> Squeeze/Reshape -> the cell's input 0.
    step = body.source(cell, 0)
    if step is None or step.type not in ("Squeeze", "Reshape"):
        return None
    if getattr(body.source(step, 0), "id", None) != link.body_layer:
        return None
    parameter = body.layer(link.body_layer)
    dims = body.dims(parameter)
    if dims is None or len(dims) != 3:
        return None
    axis = link.axis % 3
    if not _removes_axis(dims, body.dims(step), axis):
        return None
    if [r.id for r in body.readers_of(parameter)] != [step.id]:
        return None
    if [r.id for r in body.readers_of(step)] != [cell.id]:
        return None
    # The states: Parameters carried from the cell's own outputs, read by the cell alone.
    states = []
    for index in range(family.states):
        state = body.source(cell, 1 + index)
        result = links.back_edges.get(state.id) if state is not None else None
        if state is None or state.type != "Parameter" or result is None:
            return None
        fed = body.layer(result)
        if getattr(body.source(fed, 0), "id", None) != cell.id:
            return None
        if body.source_port(fed, 0) != cell.outputs[index].id:
            return None
        if [r.id for r in body.readers_of(state)] != [cell.id]:
            return None
        states.append(state.id)
    if set(links.back_edges) != set(states):
        return None  # another value is carried: the Loop computes it
    # The weights: computed from constants and invariant inputs only.
    invariant = {
        lk.body_layer
        for lk in links.inputs
        if lk.axis is None and lk.body_layer not in links.back_edges
    }
    weight_roots = [body.source(cell, i) for i in range(1 + family.states, len(cell.inputs))]
    cone = _constant_cone(body, weight_roots, invariant)
    if cone is None:
        return None
    # What reads the cell: back-edge Results, last-value Results, one stacking op.
    stack, stack_axes = None, ()
    for index in range(len(cell.outputs)):
        for reader in body.readers_of(cell, index):
            if reader.type == "Result":
                continue
            if index != 0 or stack is not None or reader.type not in ("Unsqueeze", "Reshape"):
                return None
            stack = reader
    if stack is not None:
        before, after = body.dims(stack), body.dims(cell)
        found = [a for a in range(3) if _removes_axis(before, after, a)] if before else []
        readers = body.readers_of(stack)
        if not found or not readers or any(r.type != "Result" for r in readers):
            return None
        stack_axes = tuple(found)
        cone_inputs = [body.source(stack, i) for i in range(1, len(stack.inputs))]
        extra = _constant_cone(body, cone_inputs, invariant)
        if extra is None:
            return None
        cone += [c for c in extra if c not in cone]
    step_inputs = [body.source(step, i) for i in range(1, len(step.inputs))]
    extra = _constant_cone(body, step_inputs, invariant)
    if extra is None:
        return None
    cone += [c for c in extra if c not in cone]
    # Nothing else may live in the body.
    known = {cell.id, step.id, *(c.id for c in cone)} | ({stack.id} if stack else set())
    for item in network.layers.values():
        if item.type not in ("Parameter", "Result") and item.id not in known:
            return None
    order = [item for item in topological_order(network) if item.id in {c.id for c in cone}]
    return _Match(body, cell, link, states, order, stack, stack_axes)


def _output_plan(layer: Layer, links: PortMap, match: _Match):
    """For each TensorIterator output port: ("sequence", axis) or ("state", index); None
    when an output is anything else."""
    body = match.body
    plan = {}
    for link in links.outputs:
        result = body.layer(link.body_layer)
        source, port = body.source(result, 0), body.source_port(result, 0)
        if source is None:
            return None
        if link.axis is None and source.id == match.cell.id:
            index = [p.id for p in match.cell.outputs].index(port)
            plan[link.external] = ("state", index)
        elif (
            link.axis is not None
            and match.stack is not None
            and source.id == match.stack.id
            and link.axis % 3 in match.stack_axes
            and link.part_size == 1
            and link.stride == match.sliced.stride
            and (link.start, link.end) == (match.sliced.start, match.sliced.end)
        ):
            plan[link.external] = ("sequence", link.axis % 3)
        else:
            return None
    if any(port.id not in plan for port in layer.outputs):
        return None
    return plan


def convert_cell_over_time(
    ctx: ConversionContext, layer: Layer, inputs: list[str], links: PortMap
) -> bool:
    """Writes ``layer`` as one ONNX sequence op when its body is a cell over time (see the
    module doc); returns False, having written no node, when it is not (constants folded
    on the way stay unused, and the model leaves unused initializers out)."""
    match = _match(layer, links)
    if match is None:
        return False
    network = layer.bodies["body"]
    plan = _output_plan(layer, links, match)
    if plan is None:
        return False
    ids = [p.id for p in layer.inputs]
    body = Body(ctx, layer, "body")
    for link in links.inputs:
        if link.axis is None and link.body_layer not in links.back_edges:
            body.bind(link.body_layer, inputs[ids.index(link.external)])
    for item in match.cone:
        body.ctx.assign_output_names(item)
        prepare(item, network.path)
    from b2s_onnx.ir.convert import convert_layers  # the driver imports the converters

    convert_layers(body.ctx, match.cone)
    body.ctx.begin(match.cell)
    weights = []
    for index in range(1 + len(match.states), len(match.cell.inputs)):
        source, port = network.sources[(match.cell.id, match.cell.inputs[index].id)]
        value = ctx.value(body.ctx.tensors.get((source, port), ""))
        if value is None:
            return False  # a weight only known at run time: the Loop computes it
        weights.append(value)
    ctx.begin(layer)
    _emit(ctx, layer, inputs, links, match, weights, plan)
    return True


def _emit(ctx, layer, inputs, links, match: _Match, weights, plan) -> None:
    ids = [p.id for p in layer.inputs]
    initial = {
        lk.body_layer: inputs[ids.index(lk.external)]
        for lk in links.inputs
        if lk.body_layer in links.back_edges
    }
    wanted = set(plan.values())
    results = [ctx.tmp("y") if any(kind == "sequence" for kind, _ in wanted) else ""]
    results += [
        ctx.tmp("state") if ("state", i) in wanted else "" for i in range(len(match.states))
    ]
    kind = emit_sequence(
        ctx,
        match.cell,
        x=inputs[ids.index(match.sliced.external)],
        time_axis=match.sliced.axis % 3,
        states=[initial[s] for s in match.states],
        weights=weights,
        direction="forward" if match.sliced.stride > 0 else "reverse",
        outputs=results,
    )
    by_port = {port.id: index for index, port in enumerate(layer.outputs)}
    for port, (what, index) in plan.items():
        output = ctx.out(layer, by_port[port])
        cast = ctx.types.get(output, kind) != kind
        if what == "state":  # [1, N, H] -> [N, H]
            axes = ctx.const("axes", np.asarray([0], np.int64))
            value = ctx.one("Squeeze", [results[1 + index], axes], None if cast else output)
        else:  # [T, 1, N, H] -> [T, N, H], time moved to where the stack put it
            axes = ctx.const("axes", np.asarray([1], np.int64))
            last = cast or index != 0
            value = ctx.one("Squeeze", [results[0], axes], None if last else output)
            if index != 0:
                perm = [1, 2]
                perm.insert(index, 0)
                value = ctx.one("Transpose", [value], None if cast else output, perm=perm)
        if cast:
            ctx.one("Cast", [value], output, to=ctx.types[output])
