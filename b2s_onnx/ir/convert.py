"""``convert_ir``: an OpenVINO IR (v10/v11) as an ONNX model onnxruntime runs.

Layers are converted in topological order by the registry in ``converters``; a layer
whose inputs are all constants is evaluated at once (onnx's reference evaluator on the
nodes just emitted) and becomes a constant, which folds weight decompression, ShapeOf
chains and prior boxes. The four data-movement ops are emitted as custom-domain nodes
and lowered by the same rule registry as ``b2s_onnx.lower``. Every converted shape is
checked against the shapes the IR declares on its ports, and those shapes are written as
value_info, so ranks the IR states survive where ONNX inference cannot see them.

Inputs and outputs are the ones OpenVINO's reader exposes (see ``interface``). Large
weights stay views of the ``.bin`` until the model is read or saved, so a conversion
copies each weight about once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.errors import B2SError
from b2s_onnx.graph.dead_code import drop_dead_nodes
from b2s_onnx.graph.types import infer_infos
from b2s_onnx.graph.walk import all_nodes, subgraphs, used_names
from b2s_onnx.io import DEFAULT_EXTERNAL_THRESHOLD, save_model
from b2s_onnx.ir.consistency import (  # noqa: F401 - ConversionMismatchError is public here
    ConversionMismatchError,
    check_declared_shapes,
    computed_infos,
    shape_disagreement,
)
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters import find
from b2s_onnx.ir.converters.registry import prepare, registration
from b2s_onnx.ir.converters.schema import declared_only
from b2s_onnx.ir.interface import input_type, output_type, symbolic_shape
from b2s_onnx.ir.port_map import PortMap, build_port_map
from b2s_onnx.ir.quantization import dequantize_weights, note_layer
from b2s_onnx.ir.reader import IRModel, Layer, parse_shape, read_ir_xml, topological_order
from b2s_onnx.ir.weights import Weights, element_type, onnx_type, raw_bytes
from b2s_onnx.ir.writer import PROTOBUF_LIMIT, save_with_late_tensors, stream_size
from b2s_onnx.lowering import LoweredNode, LoweringOptions, lower_model
from b2s_onnx.rewrites import (
    LOADING_REWRITES,
    RewriteReport,
    apply_rewrites,
    converted_model_rewrites,
)
from b2s_onnx.validation import conversion_blame, prove

DEFAULT_OPSET = 18
#: How quantized layers are written: onnxruntime's integer-kernel form, or float arithmetic.
INT8_FORMS = ("qdq", "float")
#: Domain of layers written as-is with ``keep_unsupported``.
UNSUPPORTED_DOMAIN = "org.openvinotoolkit.ir"
#: Constants larger than this are not produced by folding (they would bloat the model).
FOLD_LIMIT = 1 << 24
_STRUCTURAL = ("Const", "Parameter", "Result")


@dataclass
class _Deferred:
    """A model whose large initializers are attached only when it is first asked for."""

    stub: onnx.ModelProto
    late: dict[str, np.ndarray]

    def build(self) -> onnx.ModelProto:
        _attach(self.stub, self.late)
        return self.stub


@dataclass
class ConversionResult:
    """What ``convert_ir_model`` produced. The large weights join ``model`` when it is
    first read; :meth:`save` can write them without ever copying them into it."""

    _model: onnx.ModelProto
    lowered: list[LoweredNode] = field(default_factory=list)
    kept_unsupported: list[str] = field(default_factory=list)
    _unlowered: onnx.ModelProto | _Deferred | None = field(default=None, repr=False)
    _late: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    #: What the graph rewrites for onnxruntime's speed did (empty with ``fuse=False``).
    rewrites: RewriteReport = field(default_factory=RewriteReport)
    #: Layers written in another form than asked for, with the reason (e.g. a FakeQuantize
    #: kept as float arithmetic).
    notes: list[str] = field(default_factory=list)
    #: Every IR layer output port -> the tensor of ``model`` that carries it (see port_map).
    ports: PortMap = field(default_factory=PortMap)

    @property
    def model(self) -> onnx.ModelProto:
        """The converted, lowered ONNX model."""
        if self._late:
            _attach(self._model, self._late)
            self._late = {}
        return self._model

    @property
    def unlowered(self) -> onnx.ModelProto | None:
        """The converted graph before lowering (data-movement ops still custom nodes).

        Built on first use: it holds a second copy of every weight, which plain
        conversions never need.
        """
        if isinstance(self._unlowered, _Deferred):
            self._unlowered = self._unlowered.build()
        return self._unlowered

    def save(
        self,
        path: str | os.PathLike,
        *,
        external_data: bool | None = None,
        size_threshold: int = DEFAULT_EXTERNAL_THRESHOLD,
    ) -> list[Path]:
        """Writes the model as :func:`b2s_onnx.io.save_model` does; a model that fits in one
        file and was not read yet is written straight from the IR's weights."""
        if (
            self._late
            and not external_data
            and stream_size(self._model, self._late) < PROTOBUF_LIMIT
        ):
            return [save_with_late_tensors(self._model, self._late, path)]
        return save_model(
            self.model, path, external_data=external_data, size_threshold=size_threshold
        )


def _subgraph_nodes(node: onnx.NodeProto) -> Iterator[onnx.NodeProto]:
    for sub in subgraphs(node):
        yield from all_nodes(sub)


def _assemble(
    ctx: ConversionContext,
    name: str,
    graph_inputs: list[onnx.ValueInfoProto],
    graph_outputs: list[onnx.ValueInfoProto],
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The converted model with large float weights as typed stubs (returned by name):
    lowering and shape inference never read their bytes, so they join the graph last."""
    model = onnx.ModelProto(ir_version=onnx.IR_VERSION, producer_name="b2s-onnx")
    imports = [helper.make_opsetid("", ctx.opset)]
    # Kept custom layers may sit inside TensorIterator/Loop/If bodies too.
    node_domains = {n.domain for top in ctx.nodes for n in (top, *_subgraph_nodes(top))}
    imports += [helper.make_opsetid(d, 1) for d in sorted(node_domains - {""})]
    model.opset_import.extend(imports)
    graph = model.graph
    graph.name = name or "converted"  # ONNX requires a graph name; an IR may have none
    graph.node.extend(ctx.nodes)
    graph.input.extend(graph_inputs)
    graph.output.extend(graph_outputs)
    used = {n for node in ctx.nodes for n in node.input} | {o.name for o in graph_outputs}
    used |= {n for node in ctx.nodes for sub in subgraphs(node) for n in used_names(sub)}
    late: dict[str, np.ndarray] = {}
    for tensor_name in dict.fromkeys([*ctx.initializers, *ctx.late_initializers]):
        if tensor_name not in used:
            continue
        if tensor_name in ctx.initializers:
            graph.initializer.append(ctx.initializers[tensor_name])
            continue
        array = ctx.constants[tensor_name]
        graph.initializer.add(
            name=tensor_name,
            data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
            dims=array.shape,
        )
        late[tensor_name] = array
    return model, late


def _with_zero_stubs(model: onnx.ModelProto, late: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose weight stubs hold zeros of their size: what the proof of
    validity needs (types, shapes, bytes present), without copying the IR's weights."""
    if not late:
        return model
    proof = onnx.ModelProto()
    proof.CopyFrom(model)
    for tensor in proof.graph.initializer:
        array = late.get(tensor.name)
        if array is not None and not tensor.raw_data:
            tensor.raw_data = bytes(array.nbytes)
    return proof


def _attach(model: onnx.ModelProto, late: dict[str, np.ndarray]) -> None:
    """Fills the stubs :func:`_assemble` left with the weights' bytes (one copy each)."""
    for tensor in model.graph.initializer:
        array = late.get(tensor.name)
        if array is not None and not tensor.raw_data:
            tensor.raw_data = raw_bytes(array)


def _with_bodies(layers: Iterable[Layer]) -> Iterator[Layer]:
    """The layers and, depth first, those of their TensorIterator/Loop/If bodies."""
    for layer in layers:
        yield layer
        for body in layer.bodies.values():
            yield from _with_bodies(body.layers.values())


def _unsupported(order: list[Layer]) -> list[Layer]:
    return [
        layer
        for layer in _with_bodies(order)
        if layer.type not in _STRUCTURAL and find(layer) is None
    ]


def _declare_inputs(ctx: ConversionContext, order: list[Layer]) -> list[onnx.ValueInfoProto]:
    """Graph inputs as OpenVINO exposes the Parameters; a Cast into the compute type where
    the two differ (the converters then read the cast tensor)."""
    infos = []
    for layer in order:
        if layer.type != "Parameter":
            continue
        name = ctx.out(layer)
        ir_type = element_type(
            layer.data.get("element_type", layer.outputs[0].precision or ""), layer.where()
        )
        if "shape" in layer.data:
            dims = parse_shape(layer.data["shape"], ctx.model.path, layer.where())
        else:
            dims = layer.outputs[0].dims
        exposed, computed = input_type(ctx.model.version, ir_type), onnx_type(ir_type)
        ctx.types[name] = exposed
        ctx.shapes[name] = dims
        if exposed != computed:
            internal = ctx.names.fresh(f"{name}/{_type_name(computed)}")
            ctx.tensors[(layer.id, layer.outputs[0].id)] = internal
            ctx.types[internal] = computed
            ctx.shapes[internal] = dims
            ctx.begin(layer)
            ctx.node("Cast", [name], internal, hint="input_type", to=computed)
        infos.append(helper.make_tensor_value_info(name, exposed, symbolic_shape(name, dims)))
    return infos


def _type_name(onnx_elem_type: int) -> str:
    return TensorProto.DataType.Name(onnx_elem_type).lower()


def _result_ir_type(ctx: ConversionContext, layer: Layer) -> str | None:
    """The element type the IR states for a Result (its input port, else its producer's)."""
    precision = layer.inputs[0].precision if layer.inputs else None
    if not precision and layer.inputs:
        source_layer, source_port = ctx.model.sources[(layer.id, layer.inputs[0].id)]
        precision = ctx.model.layers[source_layer].output_port(source_port).precision
    return element_type(precision, layer.where()) if precision else None


def _reserve_result_tensors(ctx: ConversionContext, order: list[Layer]) -> dict[str, str]:
    """Gives a Result's producer an internal name when the output needs a Cast, so that the
    Cast can write the name OpenVINO shows. Returns internal name -> exposed name."""
    renamed: dict[str, str] = {}
    for layer in order:
        if layer.type != "Result" or len(layer.inputs) != 1:
            continue
        source = ctx.model.sources[(layer.id, layer.inputs[0].id)]
        if ctx.model.layers[source[0]].type in _STRUCTURAL:
            continue
        tensor = ctx.tensors[source]
        ir_type = _result_ir_type(ctx, layer)
        if tensor in renamed or ir_type is None:
            continue
        computed = ctx.type_of(tensor)
        if output_type(ctx.model.version, ir_type) == computed:
            continue
        internal = ctx.names.fresh(f"{tensor}/{_type_name(computed)}")
        ctx.tensors[source] = internal
        ctx.types[internal] = computed
        ctx.shapes[internal] = ctx.shapes.get(tensor)
        renamed[internal] = tensor
    return renamed


_FLOAT_TYPES = frozenset(
    {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
)


def _is_float(elem_type: int) -> bool:
    return elem_type in _FLOAT_TYPES


#: onnxruntime's Cast from float to float16 keeps NaN payloads in whole vector blocks only:
#: the last (size % block) values go through a scalar path that writes the canonical NaN.
#: A multiple of 64 covers every block width (8 and 16 measured).
_F16_CAST_BLOCK = 64


def _whole_cast_blocks(ctx: ConversionContext, tensor: str) -> bool:
    """Whether ``tensor``'s size is known to be a whole number of cast blocks (then a plain
    Cast keeps every NaN payload, and the large outputs of images pay nothing more)."""
    shape = ctx.shape(tensor)
    if shape is None or any(d is None for d in shape):
        return False
    return int(np.prod(shape, dtype=np.int64)) % _F16_CAST_BLOCK == 0


def _cast_to_f16_keeping_nans(ctx: ConversionContext, tensor: str, output: str) -> None:
    """``tensor`` (f32) cast to f16 at a graph output, bit for bit as the CPU plugin moves
    f16 data (NaN payloads kept): the values are flattened and padded to a whole number of
    onnxruntime's vector blocks so that none takes its scalar tail path, then cut back
    (Reshape's allowzero, for outputs with a zero-sized axis, needs opset 14)."""

    def i64(hint: str, values) -> str:
        return ctx.const(hint, np.asarray(values, dtype=np.int64))

    shape = ctx.one("Shape", [tensor])
    flat = ctx.one("Reshape", [tensor, i64("flat", [-1])])
    count = ctx.one("Shape", [flat])
    block = i64("block", [_F16_CAST_BLOCK])
    spare = ctx.one("Mod", [ctx.one("Sub", [block, ctx.one("Mod", [count, block])]), block])
    padded = ctx.one("Pad", [flat, ctx.one("Concat", [i64("none", [0]), spare], axis=0)])
    half = ctx.one("Cast", [padded], hint="output_type", to=TensorProto.FLOAT16)
    kept = ctx.one("Slice", [half, i64("start", [0]), count])
    ctx.node("Reshape", [kept, shape], output, allowzero=1)


def _declare_outputs(
    ctx: ConversionContext,
    results: list[tuple[Layer, str]],
    input_names: set[str],
    renamed: dict[str, str],
) -> list[onnx.ValueInfoProto]:
    """Graph outputs as OpenVINO exposes the Results: their names, element types and
    partial shapes, with a Cast (or an Identity, for a name already taken) at the edge."""
    outputs = []
    taken = set(input_names)
    for layer, tensor in results:
        ir_type = _result_ir_type(ctx, layer)
        computed = ctx.type_of(tensor)
        exposed = computed if ir_type is None else output_type(ctx.model.version, ir_type)
        if ctx.model.version >= 11 and _is_float(exposed) != _is_float(computed):
            # The port's precision contradicts what its layer computes (a Convert whose
            # destination_type changed): OpenVINO re-derives the type, and so do we.
            exposed = computed
        name = renamed.get(tensor, tensor)
        # A constant that is already an initializer can be the output itself, keeping the
        # name OpenVINO exposes; other constants need a node to produce them.
        folded = tensor in ctx.constants and not ctx.is_initializer(tensor)
        needs_node = name == tensor and (folded or exposed != computed)
        if name in taken or needs_node:
            name = ctx.names.fresh(layer.name)
        taken.add(name)
        if name != tensor:
            ctx.begin(layer)
            to_half = exposed == TensorProto.FLOAT16 and computed == TensorProto.FLOAT
            if to_half and ctx.opset >= 14 and not _whole_cast_blocks(ctx, tensor):
                _cast_to_f16_keeping_nans(ctx, tensor, name)
            elif exposed != computed:
                ctx.node("Cast", [tensor], name, hint="output_type", to=exposed)
            else:
                ctx.node("Identity", [tensor], name, hint="result")
        dims = layer.inputs[0].dims
        outputs.append(helper.make_tensor_value_info(name, exposed, symbolic_shape(name, dims)))
    return outputs


def _fold(ctx: ConversionContext, layer: Layer, inputs: list[str], start: int) -> None:
    """Replaces the nodes just emitted for ``layer`` by constants when its inputs are."""
    emitted = ctx.nodes[start:]
    if not emitted or not all(name in ctx.constants for name in inputs):
        return
    if any(node.domain not in ("", "ai.onnx") for node in emitted):
        return
    outputs = [ctx.out(layer, i) for i in range(len(layer.outputs))]
    # Evaluate only what the IR declares small: absurd shapes must not be allocated here.
    declared = 0
    for port in layer.outputs:
        if port.dims is None or any(d is None for d in port.dims):
            return
        count = 1
        for dim in port.dims:
            count *= dim
        declared += count
    if declared > FOLD_LIMIT:
        return
    produced = {o for node in emitted for o in node.output}
    if not all(o in produced for o in outputs):
        return
    if _fold_float_cast(ctx, emitted, start):
        return
    graph = helper.make_graph(
        emitted,
        "fold",
        [],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(ctx.constants[i], i) for i in dict.fromkeys(inputs)]
        + [
            ctx.tensor_proto(n)
            for node in emitted
            for n in node.input
            if ctx.is_initializer(n) and n not in inputs
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ctx.opset)])
    try:
        values = ReferenceEvaluator(model).run(None, {})
    except Exception:  # leave it to run time; the converted nodes are still correct
        return
    del ctx.nodes[start:]
    for name, value in zip(outputs, values, strict=True):
        ctx.add_constant(name, np.asarray(value))


def _fold_float_cast(ctx: ConversionContext, emitted: list[onnx.NodeProto], start: int) -> bool:
    """Folds a lone float-to-float Cast (weight decompression in FP16 IRs) with numpy, which
    rounds exactly as ONNX Cast does, instead of building a model for the reference
    evaluator around a copy of every weight."""
    if len(emitted) != 1 or emitted[0].op_type != "Cast":
        return False
    node = emitted[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if set(attributes) != {"to"}:
        return False
    value = ctx.constants[node.input[0]]
    target = helper.tensor_dtype_to_np_dtype(attributes["to"])
    if value.dtype.kind != "f" or target.kind != "f":
        return False
    del ctx.nodes[start:]
    ctx.add_constant(node.output[0], value if value.dtype == target else value.astype(target))
    return True


def _keep_as_custom(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    outputs = [ctx.out(layer, i) for i in range(len(layer.outputs))]
    attrs = dict(layer.data)
    ctx.node(
        layer.type,
        inputs,
        outputs,
        domain=UNSUPPORTED_DOMAIN,
        hint=layer.type,
        ir_version=layer.version,
        **attrs,
    )


def _declare_shapes(
    model: onnx.ModelProto, ctx: ConversionContext, order: list[Layer], bin_path: Path | None
) -> None:
    """Checks every converted shape against the IR's ports and writes the IR's shapes as
    value_info, so that a rank the IR states is known downstream even where ONNX shape
    inference cannot derive it (run-time shape arithmetic, custom nodes awaiting lowering).
    """
    symbolic: dict[str, frozenset[int]] = {}
    infos = infer_infos(model, symbolic)
    boundary = {v.name for v in (*model.graph.input, *model.graph.output)}
    declared_infos = []
    for layer in order:
        if layer.type in _STRUCTURAL:
            continue
        for index, port in enumerate(layer.outputs):
            name = ctx.out(layer, index)
            declared = port.dims
            found = infos.get(name)
            found_shape = found.shape if found is not None else None
            _check_declared_shape(ctx, layer, index, declared, found_shape, bin_path)
            if declared is None or name in boundary or name in ctx.constants:
                continue
            if found_shape is not None and len(found_shape) == len(declared):
                # A size the IR states where inference carries a dynamic input's symbol is
                # unverifiable (OpenVINO derives it dynamic and ignores the statement);
                # as value_info it would steer onnxruntime's memory planning: a mutated IR
                # declaring a batch of 1000 there made onnxruntime reserve 24 GB. Such
                # sizes stay symbolic; sizes inference lost track of keep the IR's word.
                carried = symbolic.get(name, frozenset())
                declared = tuple(
                    f if d is None or axis in carried else d
                    for axis, (d, f) in enumerate(zip(declared, found_shape, strict=True))
                )
            elem_type = found.elem_type if found is not None and found.elem_type else 0
            declared_infos.append(
                helper.make_tensor_value_info(name, elem_type or ctx.type_of(name), declared)
            )
    model.graph.value_info.extend(declared_infos)


def _check_declared_shape(
    ctx: ConversionContext, layer: Layer, index: int, declared, found, bin_path: Path | None
) -> None:
    """A converted shape that differs from the declared one is bad input when the IR
    contradicts itself or OpenVINO (exit 2), else our bug (exit 3): see ``consistency``."""
    if declared is None or found is None:
        return
    if any(d is None for d in declared) or any(d is None for d in found):
        return
    if tuple(found) != tuple(declared):
        raise shape_disagreement(ctx.model, layer, index, found, declared, bin_path)


def _check_shapes(
    model: onnx.ModelProto,
    ctx: ConversionContext,
    order: list[Layer],
    bin_path: Path | None,
    rewritten: Iterable[str],
) -> None:
    """The same check after lowering, where shape inference sees through the lowered
    data-movement ops; tensors a rewrite changed (``rewritten``) no longer hold the layer's
    value and are skipped."""
    infos = computed_infos(model)
    skipped = set(rewritten)
    for layer in order:
        if layer.type in _STRUCTURAL:
            continue
        for index, port in enumerate(layer.outputs):
            name = ctx.out(layer, index)
            found = infos.get(name)
            if name in skipped or found is None:
                continue
            _check_declared_shape(ctx, layer, index, port.dims, found.shape, bin_path)


def convert_layers(
    ctx: ConversionContext, order: list[Layer], progress: Callable[[], object] | None = None
) -> list[tuple[Layer, str]]:
    """Converts one network's layers (checked, in topological order) into ``ctx.nodes``,
    folding constant layers; returns each Result with the tensor it reads. Bodies of
    TensorIterator/Loop/If come through here too, each with its own context."""
    results: list[tuple[Layer, str]] = []
    for layer in order:
        if progress is not None:
            progress()
        ctx.begin(layer)
        if layer.type == "Const":
            ctx.add_constant(ctx.out(layer), ctx.weights.const(layer))
            continue
        if layer.type == "Parameter":
            continue
        inputs = ctx.inputs(layer)
        if layer.type == "Result":
            if len(inputs) != 1:
                raise B2SError(f"{layer.where()}: a Result takes exactly one input")
            results.append((layer, inputs[0]))
            continue
        start = len(ctx.nodes)
        found = registration(layer)
        if found is None:
            _keep_as_custom(ctx, layer, inputs)
            continue
        with declared_only(layer, found.attrs):
            found.converter(ctx, layer, inputs)
        _fold(ctx, layer, inputs, start)
        if ctx.int8 == "qdq":
            note_layer(ctx, layer, inputs)
    return results


def convert_ir_model(
    xml_path: str | os.PathLike,
    bin_path: str | os.PathLike | None = None,
    *,
    opset: int = DEFAULT_OPSET,
    keep_unsupported: bool = False,
    domains: Iterable[str] = (),
    options: LoweringOptions | None = None,
    progress: Callable[[], object] | None = None,
    fuse: bool = True,
    int8: str = "qdq",
) -> ConversionResult:
    """Converts the IR; ``progress`` (if given) is called once per layer converted;
    ``fuse=False`` skips the rewrites that put the graph in onnxruntime's fastest forms;
    ``int8`` chooses how quantized layers are written ("qdq" or "float")."""
    if int8 not in INT8_FORMS:
        raise B2SError(f"int8='{int8}' is not one of {', '.join(INT8_FORMS)}")
    xml = Path(xml_path)
    ir: IRModel = read_ir_xml(xml)
    order = topological_order(ir)
    check_declared_shapes(ir)
    unsupported = _unsupported(order)
    if unsupported and not keep_unsupported:
        listed = "; ".join(f"{layer.type}-{layer.version} '{layer.name}'" for layer in unsupported)
        raise B2SError(
            f"{xml}: {len(unsupported)} unsupported layer(s): {listed} "
            "(--keep-unsupported writes them as custom-domain nodes)"
        )
    needs_weights = any(layer.type == "Const" for layer in _with_bodies(order))
    weights_path = Path(bin_path) if bin_path is not None else xml.with_suffix(".bin")
    weights = Weights(weights_path if needs_weights or bin_path is not None else None)

    ctx = ConversionContext(ir, opset)
    ctx.int8 = int8
    ctx.fuse = fuse
    for layer in order:
        if layer.type == "Parameter":
            ctx.assign_output_names(layer)
    for layer in order:
        if layer.type != "Parameter":
            ctx.assign_output_names(layer)
    if not any(layer.type == "Result" for layer in order):
        raise B2SError(f"{xml}: the IR has no Result layer: a model without outputs")
    graph_inputs = _declare_inputs(ctx, order)
    renamed = _reserve_result_tensors(ctx, order)

    for layer in order:
        prepare(layer, ir.path)
    ctx.weights = weights
    results = convert_layers(ctx, order, progress)
    if ctx.int8 == "qdq":
        dequantize_weights(ctx)
    graph_outputs = _declare_outputs(ctx, results, {i.name for i in graph_inputs}, renamed)

    model, late = _assemble(ctx, ir.name, graph_inputs, graph_outputs)
    model.doc_string = f"Converted from OpenVINO IR v{ir.version} '{xml.name}'"
    _declare_shapes(model, ctx, order, weights.path)
    unlowered = onnx.ModelProto()
    unlowered.CopyFrom(model)  # cheap: the large weights are not in it yet
    lowered = lower_model(
        model,
        opset=opset,
        domains=(DEFAULT_DOMAIN, *domains),
        options=replace(options or LoweringOptions(), fuse=fuse),
        in_place=True,
        proven=False,
    )
    rewrites = lowered.rewrites
    _check_shapes(lowered.model, ctx, order, weights.path, rewrites.absorbed)
    if fuse:
        chosen = options or LoweringOptions()
        planned = converted_model_rewrites(chosen.strategy, chosen.threads)
        rewrites.extend(apply_rewrites(lowered.model, planned, late=late))
    # Not a choice of form: onnxruntime's default session refuses some Resizes with axes.
    rewrites.extend(apply_rewrites(lowered.model, LOADING_REWRITES, late=late))
    # Layers no Result reads (dangling in the IR, or left unread by a rewrite): OpenVINO
    # never computes them, onnxruntime would on every run.
    unread = drop_dead_nodes(lowered.model.graph)
    # Nothing invalid is returned or written: the final model must pass the checker and
    # load in onnxruntime.
    prove(_with_zero_stubs(lowered.model, late), conversion_blame(order, xml, weights.path))
    kept = [f"{layer.type}-{layer.version} '{layer.name}'" for layer in unsupported]
    ports = build_port_map(ir, order, ctx.tensors, ctx.constants)
    # A widened tensor's leading channels are still the layer's output.
    for tensor, (wide, channels) in rewrites.widened.items():
        ports.widen(tensor, wide, channels)
    # A rewritten tensor is gone, or (atrous fusion) keeps its name for another value: no
    # longer the layer's output either way.
    for tensor, into in rewrites.absorbed.items():
        ports.fuse(tensor, into=into)
    ports.unread = unread
    ports.sync(lowered.model)
    return ConversionResult(
        lowered.model,
        lowered.lowered,
        kept,
        _Deferred(unlowered, late),
        dict(late),
        rewrites=rewrites,
        notes=ctx.notes,
        ports=ports,
    )
