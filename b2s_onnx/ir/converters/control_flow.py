"""TensorIterator and Loop as ONNX Loop, If as ONNX If; bodies convert recursively.

Port maps become Loop plumbing:
- a back edge (merged input) is a loop-carried value;
- a sliced input is sliced inside the body from the outer tensor by the iteration number;
- an invariant input is the outer tensor itself (subgraphs read outer scope by name);
- a concatenated output is an ONNX scan output (stacked on a new axis 0), then reversed
  for a negative stride and merged into ``axis``;
- a last-value output is the carried value when a back edge carries it, else the last
  slice of a scan output.
OpenVINO slices ``part_size`` elements per iteration with ``|stride| == part_size`` in
practice; other strides and partial ``start``/``end`` ranges are refused by name.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.body import Body, PortLink, PortMap, port_map
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import axis_size
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.cell_over_time import convert_cell_over_time
from b2s_onnx.ir.converters.keras_recurrent import convert_keras_loop
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer
from b2s_onnx.ir.weights import element_type, onnx_type


def _check_range(layer: Layer, link: PortLink) -> None:
    forward = (link.start, link.end) == (0, -1) and link.stride == link.part_size
    backward = (link.start, link.end) == (-1, 0) and link.stride == -link.part_size
    if link.part_size < 1 or not (forward or backward):
        raise B2SError(
            f"{layer.where()}: port map axis={link.axis} start={link.start} end={link.end} "
            f"stride={link.stride} part_size={link.part_size}: only whole-axis slicing with "
            "|stride| == part_size is supported"
        )


def _axis(ctx: ConversionContext, layer: Layer, tensor: str, axis: int) -> int:
    return axis + ctx.rank(layer, tensor) if axis < 0 else axis


def _trip_count(ctx: ConversionContext, layer: Layer, inputs: list[str], links: PortMap) -> str:
    """Iterations of a TensorIterator: the sliced axis length over the part size."""
    for link in links.inputs:
        if link.axis is not None:
            tensor = inputs[_input_index(layer, link)]
            axis = _axis(ctx, layer, tensor, link.axis)
            count = ctx.one(
                "Div", [axis_size(ctx, tensor, axis), _i64(ctx, "part", [link.part_size])]
            )
            return ctx.one("Reshape", [count, _i64(ctx, "scalar", [])], hint="trip_count")
    raise B2SError(f"{layer.where()}: a TensorIterator needs at least one sliced input")


def _input_index(layer: Layer, link: PortLink) -> int:
    return [p.id for p in layer.inputs].index(link.external)


def _slice_in_body(body: Body, layer: Layer, outer: str, link, iteration: str) -> None:
    """Binds a sliced input's Parameter to its slice for ``iteration``."""
    _check_range(layer, link)
    ctx = body.ctx
    axis = _axis(ctx, layer, outer, link.axis)
    size = link.part_size
    begin = ctx.one("Mul", [iteration, _i64(ctx, "part", size)])
    if link.stride < 0:
        end_of_axis = ctx.one("Reshape", [axis_size(ctx, outer, axis), _i64(ctx, "scalar", [])])
        begin = ctx.one("Sub", [end_of_axis, ctx.one("Add", [begin, _i64(ctx, "part", size)])])
    begin = ctx.one("Reshape", [begin, _i64(ctx, "one", [1])])
    end = ctx.one("Add", [begin, _i64(ctx, "part", [size])])
    sliced = ctx.one("Slice", [outer, begin, end, _i64(ctx, "axes", [axis])], hint="slice")
    ctx.shapes[sliced] = body.parameter(link.body_layer).outputs[0].dims
    ctx.types[sliced] = ctx.type_of(outer)
    body.bind(link.body_layer, sliced)


def _merge_scan(ctx: ConversionContext, layer: Layer, stacked: str, link, output: str) -> None:
    """A scan output ``[iters, *S]`` concatenated along ``axis`` of S, as OpenVINO does."""
    _check_range(layer, link)
    dims = layer.output_port(link.external).dims
    if dims is None:
        raise B2SError(f"{layer.where()}: the rank of output {link.external} is unknown")
    rank = len(dims)
    axis = link.axis + rank if link.axis < 0 else link.axis
    if link.stride < 0:
        stacked = ctx.one(
            "Slice",
            [
                stacked,
                _i64(ctx, "start", [-1]),
                _i64(ctx, "end", [np.iinfo(np.int64).min]),
                _i64(ctx, "axes", [0]),
                _i64(ctx, "steps", [-1]),
            ],
            hint="reversed",
        )
    perm = [*range(1, axis + 1), 0, *range(axis + 1, rank + 1)]
    moved = ctx.one("Transpose", [stacked], perm=perm) if axis > 0 else stacked
    shape = ctx.one("Shape", [moved])
    pieces = [
        ctx.one("Slice", [shape, _i64(ctx, "s", [0]), _i64(ctx, "e", [axis]), _i64(ctx, "a", [0])]),
        _i64(ctx, "merged", [-1]),
        ctx.one(
            "Slice",
            [shape, _i64(ctx, "s", [axis + 2]), _i64(ctx, "e", [rank + 1]), _i64(ctx, "a", [0])],
        ),
    ]
    ctx.one("Reshape", [moved, ctx.one("Concat", pieces, axis=0)], output)


def _bind_iteration(body: Body, link: PortLink, iteration: str) -> None:
    """Loop's current-iteration Parameter: ONNX's iteration number, in the declared type."""
    parameter = body.parameter(link.body_layer)
    kind = onnx_type(element_type(parameter.data.get("element_type", "i64"), parameter.where()))
    if kind != TensorProto.INT64:
        iteration = body.ctx.one("Cast", [iteration], to=kind)
        body.ctx.types[iteration] = kind
    dims = parameter.outputs[0].dims
    if dims:
        iteration = body.ctx.one("Reshape", [iteration, _i64(body.ctx, "shape", list(dims))])
        body.ctx.types[iteration] = kind
    body.bind(link.body_layer, iteration)


def _loop(
    ctx: ConversionContext,
    layer: Layer,
    inputs: list[str],
    links: PortMap,
    trip_count: str,
    condition: str,
) -> None:
    body = Body(ctx, layer, "body")
    iteration = body.graph_input(None, "iteration", TensorProto.INT64)
    condition_in = body.graph_input(None, "condition", TensorProto.BOOL)
    carried = []
    for link in links.inputs:
        if link.purpose == "current_iteration":
            _bind_iteration(body, link, iteration)
            continue
        outer = inputs[_input_index(layer, link)]
        if link.body_layer in links.back_edges:
            body.graph_input(link.body_layer, "carried")
            carried.append((link, outer))
        elif link.axis is not None:
            _slice_in_body(body, layer, outer, link, iteration)
        else:
            body.bind(link.body_layer, outer)
    tensors = body.convert()
    condition_link = next((o for o in links.outputs if o.purpose == "execution_condition"), None)
    condition_out = condition_in
    if condition_link is not None:
        condition_out = body.ctx.one(
            "Reshape", [tensors[condition_link.body_layer], _i64(body.ctx, "scalar", [])]
        )
        if ctx.type_of(tensors[condition_link.body_layer]) != TensorProto.BOOL:
            condition_out = body.ctx.one("Cast", [condition_out], to=TensorProto.BOOL)
        body.ctx.types[condition_out] = TensorProto.BOOL
    body_outputs = [condition_out] + [tensors[links.back_edges[lk.body_layer]] for lk, _ in carried]
    finals = [ctx.tmp("final") for _ in carried]
    carried_final = {
        links.back_edges[lk.body_layer]: f for (lk, _), f in zip(carried, finals, strict=True)
    }
    scans: list[tuple[PortLink, str]] = []
    for link in links.outputs:
        if link.purpose is not None:
            continue
        if link.axis is None and link.body_layer in carried_final:
            continue
        body_outputs.append(tensors[link.body_layer])
        scans.append((link, ctx.tmp("scan")))
    graph = body.graph(body_outputs, f"{layer.name}/body")
    ctx.node(
        "Loop",
        [trip_count, condition, *(outer for _, outer in carried)],
        finals + [s for _, s in scans],
        body=graph,
    )
    outputs = {port.id: index for index, port in enumerate(layer.outputs)}
    for link in links.outputs:
        if link.purpose is not None:
            continue
        output = ctx.out(layer, outputs[link.external])
        if link.axis is None and link.body_layer in carried_final:
            ctx.one("Identity", [carried_final[link.body_layer]], output)
            continue
        stacked = next(s for lk, s in scans if lk is link)
        if link.axis is None:
            ctx.one("Gather", [stacked, _i64(ctx, "last", -1)], output, axis=0)
        else:
            _merge_scan(ctx, layer, stacked, link, output)


@converts("TensorIterator", (1,), inputs=(0, 1 << 16), attrs={})
def tensor_iterator(ctx, layer, inputs):
    links = port_map(layer)
    if ctx.fuse and convert_cell_over_time(ctx, layer, inputs, links):
        return
    trip_count = _trip_count(ctx, layer, inputs, links)
    _loop(ctx, layer, inputs, links, trip_count, ctx.const("true", np.asarray(True)))


@converts("Loop", (5,), inputs=(2, 1 << 16), attrs={})
def loop(ctx, layer, inputs):
    links = port_map(layer)
    if ctx.fuse and convert_keras_loop(ctx, layer, inputs, links):
        return
    trip = ctx.value(inputs[0])
    if trip is not None and int(np.asarray(trip).reshape(-1)[0]) < 0:
        trip_count = ""  # OpenVINO's -1: as many iterations as the condition allows
    else:
        trip_count = ctx.one("Reshape", [ctx.int64(inputs[0]), _i64(ctx, "scalar", [])])
        if trip is None:
            unbounded = ctx.one("Less", [trip_count, _i64(ctx, "zero", 0)])
            trip_count = ctx.one(
                "Where", [unbounded, _i64(ctx, "unbounded", np.iinfo(np.int64).max), trip_count]
            )
    condition = inputs[1]
    if ctx.type_of(condition) != TensorProto.BOOL:
        condition = ctx.one("Cast", [condition], to=TensorProto.BOOL)
    condition = ctx.one("Reshape", [condition, _i64(ctx, "scalar", [])])
    _loop(ctx, layer, inputs, links, trip_count, condition)


@converts("If", (8,), inputs=(1, 1 << 16), attrs={})
def if_op(ctx, layer, inputs):
    ids = [p.id for p in layer.inputs]
    branches = []
    for side in ("then", "else"):
        links = port_map(layer, f"{side}_port_map", f"{side}_body")
        body = Body(ctx, layer, f"{side}_body")
        for link in links.inputs:
            body.bind(link.body_layer, inputs[ids.index(link.external)])
        tensors = body.convert()
        by_port = {link.external: tensors[link.body_layer] for link in links.outputs}
        missing = [p.id for p in layer.outputs if p.id not in by_port]
        if missing:
            raise B2SError(
                f"{layer.where()}: <{side}_port_map> gives no value for output port(s) {missing}"
            )
        branches.append(body.graph([by_port[p.id] for p in layer.outputs], f"{layer.name}/{side}"))
    condition = inputs[0]
    if ctx.type_of(condition) != TensorProto.BOOL:
        condition = ctx.one("Cast", [condition], to=TensorProto.BOOL)
    ctx.node(
        "If",
        [condition],
        [ctx.out(layer, i) for i in range(len(layer.outputs))],
        then_branch=branches[0],
        else_branch=branches[1],
    )
