"""SpaceToBatch -> Conv -> BatchToSpace (TensorFlow's atrous convolution) -> one dilated Conv.

TensorFlow, Keras and DeepLab write a dilated convolution as a convolution of the ``r x r``
phases of the (padded) input, reassembled by BatchToSpace and cropped. Lowered literally
that costs two large transposes plus a pad and a slice around the convolution; as one Conv
with ``dilations = r * d`` it is a single kernel (6.3x faster for depthwise 3x3, rate 2, on
[1,128,128,128]). Between the three may stand Transposes (NHWC graphs) and element-wise
ops that commute with moving data between batch and space: unary activations and
per-channel constants (bias, scale, folded BatchNorm).

Equivalence, per spatial axis with block ``r``, SpaceToBatch pads ``pb/pe``, inner Conv
pads ``qb/qe`` and dilation ``d``, BatchToSpace crops ``cb/ce``: output element ``o`` of the
pattern is ``sum_k w[k] * x[o + cb - pb - qb * r + k * d * r]`` (zero outside ``x``), which
is a Conv with dilation ``d * r`` and pads ``pb + qb * r - cb`` / ``pe + qe * r - ce``. The
phases' own zero padding lands outside ``x`` as well, so nothing else changes. Stride 1
only; the sum runs over the same terms, in another order (float rounding only).

A MaxPool or AveragePool in the Conv's place (TensorFlow's dilated pooling) matches the
same way; :mod:`b2s_onnx.rewrites.atrous_pooling` says when it fuses and builds it.
"""

from __future__ import annotations

import onnx
from onnx import helper

from b2s_onnx.lowering._emit import Emitter
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites._shape_cone import ShapeCone
from b2s_onnx.rewrites.atrous_pooling import POOLS, fused_pool, pool_declines

#: Element-wise ops with one data input that commute with batch <-> space data movement.
_UNARY = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Elu",
        "Selu",
        "HardSigmoid",
        "HardSwish",
        "Softplus",
        "Softsign",
        "Clip",
        "Abs",
        "Neg",
        "Exp",
        "Log",
        "Sqrt",
        "Erf",
        "Mish",
        "Identity",
        "Cast",
    }
)
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Pow"})


def _ints(index: GraphIndex, name: str) -> list[int] | None:
    """The integers ``name`` always holds, seeing through the Casts a converter puts
    between an int32 constant and an op that takes int64 (the rewrites run before
    constant folding)."""
    value = index.constant(name)
    while value is None:
        node = index.producer.get(name)
        if (
            node is None
            or node.op_type not in ("Cast", "Identity")
            or node.domain not in ("", "ai.onnx")
        ):
            return None
        name = node.input[0]
        value = index.constant(name)
    return [int(v) for v in value.reshape(-1)]


#: How many shape samples a run-time paddings computation is evaluated on.
SAMPLES = 24


def _pads_and_crops(
    index: GraphIndex, space_to_batch: onnx.NodeProto, batch_to_space: onnx.NodeProto, rate: int
):
    """(pads_begin, pads_end, crops_begin, crops_end, guard) as integer lists, or a reason.

    Constant inputs are read; run-time ones (TensorFlow's ``required_space_to_batch_paddings``)
    are evaluated for sample shapes. Only ``pads_begin``, ``crops_begin`` and
    ``pads_end - crops_end`` enter the fused Conv, so those must not vary with the shapes;
    ``guard`` is then (the run-time tensors, the values they must give), else None.
    """
    names = [*space_to_batch.input[2:4], *batch_to_space.input[2:4]]
    static = [_ints(index, name) for name in names]
    runtime = [name for name, value in zip(names, static, strict=True) if value is None]
    if not runtime:
        return (*static, None)
    cone = ShapeCone(index, runtime)
    if cone.reason:
        return f"pads or crops are computed at run time, and {cone.reason}"
    try:
        samples = cone.samples(SAMPLES, rate)
    except Exception as exc:  # the graph may be invalid; lowering will say so
        return f"pads or crops are computed at run time, and could not be evaluated ({exc})"
    seen = set()
    for sample in samples:
        pb, pe, cb, ce = (
            static[i] if static[i] is not None else [int(v) for v in sample[names[i]]]
            for i in range(4)
        )
        if not len(pb) == len(pe) == len(cb) == len(ce):
            return "pads and crops have different lengths"
        seen.add((tuple(pb), tuple(cb), tuple(p - c for p, c in zip(pe, ce, strict=True))))
    if len(seen) != 1:
        return "the run-time pads and crops do not reduce to one dilated convolution"
    ((begin, crop, delta),) = seen
    # The fused Conv sees only pads_end - crops_end: carry it as pads_end with no crop.
    return list(begin), list(delta), list(crop), [0] * len(delta), (names, begin, delta, crop)


def _guarded(
    index: GraphIndex,
    data: str,
    guard,
    space_to_batch: onnx.NodeProto,
    batch_to_space: onnx.NodeProto,
    out: list[onnx.NodeProto],
) -> str:
    """``data`` passed through a run-time check that the pads and crops are what the fused
    Conv assumes; inference fails with the rule as the node's name otherwise."""
    (pads_begin, pads_end, crops_begin, crops_end), begin, delta, crop = guard
    emit = Emitter(index.names, f"{batch_to_space.name}/atrous")

    def as_int64(name: str) -> str:
        return emit.node("Cast", [name], "as_int64", to=onnx.TensorProto.INT64)

    actual = emit.node(
        "Concat",
        [
            as_int64(pads_begin),
            emit.node("Sub", [as_int64(pads_end), as_int64(crops_end)], "pads_minus_crops"),
            as_int64(crops_begin),
        ],
        "actual",
        axis=0,
    )
    expected = emit.const("expected", [*begin, *delta, *crop])
    violated = emit.node("Not", [emit.node("Equal", [actual, expected], "equal")], "differs")
    emit.check(
        f"SpaceToBatch '{space_to_batch.name}' and BatchToSpace '{batch_to_space.name}' "
        "pad and crop as one dilated convolution",
        violated,
    )
    guarded = emit.gate_data(data)
    index.graph.initializer.extend(emit.initializers)
    out.extend(emit.nodes)
    return guarded


class AtrousConvolution:
    name = "atrous-convolution"
    anchors = ("BatchToSpace",)

    def __init__(self, domains: tuple[str, ...]) -> None:
        #: The custom domains whose BatchToSpace/SpaceToBatch nodes are matched.
        self.domains = domains

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        def decline(reason: str) -> Declined:
            return Declined(self.name, node.name, reason)

        # Walk back from BatchToSpace to the convolution, then on to SpaceToBatch.
        after: list[onnx.NodeProto] = []
        current = index.producer.get(node.input[0])
        while current is not None and current.op_type not in ("Conv", *POOLS):
            if current.domain not in ("", "ai.onnx") or (
                current.op_type not in _UNARY | _BINARY | {"Transpose"}
            ):
                return None
            after.append(current)
            current = index.producer.get(current.input[0])
        conv = current
        if conv is None:
            return None
        before: list[onnx.NodeProto] = []
        current = index.producer.get(conv.input[0])
        while current is not None and current.op_type == "Transpose":
            before.append(current)
            current = index.producer.get(current.input[0])
        space_to_batch = current
        if (
            space_to_batch is None
            or space_to_batch.op_type != "SpaceToBatch"
            or space_to_batch.domain not in self.domains
        ):
            return None
        if len(node.input) != 4 or len(space_to_batch.input) != 4:
            return None  # malformed: the lowering refuses it with the op's own message
        if conv.op_type == "Conv" and len(conv.input) < 2:
            return None  # a Conv without weights: onnx's checker names it
        chain = [space_to_batch, *reversed(before), conv, *reversed(after)]
        for produced in chain:
            if index.only_consumer(produced.output[0]) is None:
                return decline(f"'{produced.name}' has other readers")

        blocks = _ints(index, space_to_batch.input[1])
        if blocks is None or _ints(index, node.input[1]) != blocks:
            return decline("the block shapes are computed at run time or differ")
        source = index.info(space_to_batch.input[0]).shape
        if not blocks or (source is not None and len(source) != len(blocks)):
            return None  # malformed block shape: the lowering refuses it by rule
        found = _pads_and_crops(index, space_to_batch, node, max(blocks))
        if isinstance(found, str):
            return decline(found)
        pads_begin, pads_end, crops_begin, crops_end, guard = found
        blocks_out = blocks
        rank = len(blocks)
        if any(len(v) != rank for v in (pads_begin, pads_end, crops_begin, crops_end)):
            return None  # malformed index inputs: the lowering refuses them by rule
        if conv.op_type in POOLS:
            spatial = len(index.attribute(conv, "kernel_shape", []))
        else:
            weights = index.constant(conv.input[1])
            spatial = (weights.ndim if weights is not None else rank) - 2
        if rank != spatial + 2:
            return decline("the convolution's rank differs from the data's")

        # Map conv axes to SpaceToBatch axes (through the Transposes before the conv) and
        # to BatchToSpace axes (through the Transposes after it).
        to_s2b = list(range(rank))
        for transpose in reversed(before):
            perm = list(index.attribute(transpose, "perm", list(range(rank))[::-1]))
            to_s2b = [to_s2b[p] for p in perm]
        to_b2s = list(range(rank))  # b2s axis j holds conv axis to_b2s[j]
        for transpose in reversed(after):
            if transpose.op_type == "Transpose":
                perm = list(index.attribute(transpose, "perm", list(range(rank))[::-1]))
                to_b2s = [to_b2s[p] for p in perm]
        from_b2s = {conv_axis: j for j, conv_axis in enumerate(to_b2s)}
        if to_s2b[0] != 0 or from_b2s[0] != 0:
            return decline("the batch axis moves between the ops")
        for conv_axis in (0, 1):
            s, b = to_s2b[conv_axis], from_b2s[conv_axis]
            if blocks[s] != 1 or pads_begin[s] or pads_end[s]:
                return decline("SpaceToBatch moves the batch or channel axis")
            if blocks_out[b] != 1 or crops_begin[b] or crops_end[b]:
                return decline("BatchToSpace moves the batch or channel axis")

        if any(v != 1 for v in index.attribute(conv, "strides", [1] * spatial)):
            return decline(f"'{conv.name}' is strided")
        auto_pad = index.attribute(conv, "auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad not in ("NOTSET", "VALID"):
            return decline(f"auto_pad {auto_pad} depends on the phase size")
        dilations = list(index.attribute(conv, "dilations", [1] * spatial))
        inner = list(index.attribute(conv, "pads", [0] * (2 * spatial)))
        if auto_pad == "VALID":
            inner = [0] * (2 * spatial)
        if len(dilations) != spatial or len(inner) != 2 * spatial:
            return decline(f"'{conv.name}' has dilations or pads of the wrong length")
        fused_dilations, fused_begin, fused_end = [], [], []
        for k in range(spatial):
            s, b = to_s2b[k + 2], from_b2s[k + 2]
            rate = blocks[s]
            if blocks_out[b] != rate:
                return decline(f"spatial axis {k}: block {rate} in, {blocks_out[b]} out")
            fused_dilations.append(dilations[k] * rate)
            fused_begin.append(pads_begin[s] + inner[k] * rate - crops_begin[b])
            fused_end.append(pads_end[s] + inner[k + spatial] * rate - crops_end[b])
        if min(fused_begin + fused_end) < 0:
            return decline("the crops exceed the padding (the fused form would need a Slice)")
        if self._empty(
            index, conv, space_to_batch, to_s2b, fused_begin, fused_end, fused_dilations
        ):
            return decline("the output is empty (the dilated window is longer than the input)")
        channels = shape = None
        if conv.op_type in POOLS:
            dims = self._float32_dims(index, space_to_batch, to_s2b)
            channels = None if dims is None else dims[1]
            shape = None if dims is None or None in dims else dims
            if reason := pool_declines(index, conv, inner, channels, shape):
                return decline(reason)
        for op in after:
            if op.op_type in _BINARY and not self._per_channel(index, op, rank, to_b2s, after):
                return decline(f"'{op.name}' is not element-wise per channel")

        if not index.is_free([*chain, node]):
            return None
        index.claim([*chain, node])
        replacements = []
        first_input = space_to_batch.input[0]
        if guard is not None:
            first_input = _guarded(index, first_input, guard, space_to_batch, node, replacements)
        for transpose in reversed(before):
            copy = onnx.NodeProto()
            copy.CopyFrom(transpose)
            copy.input[0] = first_input
            first_input = copy.output[0]
            replacements.append(copy)
        exact = False
        if conv.op_type in POOLS:
            nodes, exact = fused_pool(
                index, conv, first_input, fused_dilations, fused_begin, fused_end, channels, shape
            )
            replacements.extend(nodes)
        else:
            replacements.append(
                self._dilated_conv(conv, first_input, fused_dilations, fused_begin + fused_end)
            )
        for op in reversed(after):
            copy = onnx.NodeProto()
            copy.CopyFrom(op)
            replacements.append(copy)
        replacements[-1].output[0] = node.output[0]
        index.replace([*chain, node], replacements)
        # The chain's tensors keep their names but now hold full-resolution values.
        changed = [n.output[0] for n in chain]
        index.forget_shapes(changed)
        for tensor in changed:
            report.absorbed[tensor] = node.output[0]
        rates = "x".join(str(d) for d in fused_dilations)
        guarded = ", pads and crops guarded at run time" if guard is not None else ""
        return Fired(self.name, node.name, f"'{conv.name}' dilated {rates}{guarded}", exact=exact)

    @staticmethod
    def _dilated_conv(conv, data: str, dilations: list[int], pads: list[int]) -> onnx.NodeProto:
        fused = onnx.NodeProto()
        fused.CopyFrom(conv)
        fused.input[0] = data
        kept = [a for a in fused.attribute if a.name not in ("dilations", "pads", "auto_pad")]
        del fused.attribute[:]
        fused.attribute.extend(kept)
        fused.attribute.extend(
            [helper.make_attribute("dilations", dilations), helper.make_attribute("pads", pads)]
        )
        return fused

    @staticmethod
    def _empty(index: GraphIndex, op, space_to_batch, to_s2b, begin, end, dilations) -> bool:
        """Whether a known spatial size leaves no output: onnxruntime refuses a Conv or
        pool whose window is longer than its padded input, where the pattern is empty."""
        source = index.info(space_to_batch.input[0]).shape
        if op.op_type in POOLS:
            kernel = list(index.attribute(op, "kernel_shape", []))
        else:
            weights = index.constant(op.input[1])
            kernel = [] if weights is None else list(weights.shape[2:])
        if source is None or len(kernel) != len(begin):
            return False
        for k, size in enumerate(kernel):
            length = source[to_s2b[k + 2]]
            extent = (size - 1) * dilations[k] + 1
            if length is not None and length + begin[k] + end[k] < extent:
                return True
        return False

    @staticmethod
    def _float32_dims(index: GraphIndex, space_to_batch, to_s2b: list[int]):
        """The dims of SpaceToBatch's input (None where unknown) as the inner op's layout
        orders them, for float32 data only (the stand-in weights and zeros are float32)."""
        source = index.info(space_to_batch.input[0])
        if source.elem_type != onnx.TensorProto.FLOAT or source.shape is None:
            return None
        return [source.shape[axis] for axis in to_s2b]

    @staticmethod
    def _per_channel(
        index: GraphIndex, op: onnx.NodeProto, rank: int, to_b2s: list[int], after
    ) -> bool:
        """The op's other operand is a constant that varies at most along the channel axis
        of the layout the op sees."""
        constants = [index.constant(name) for name in op.input]
        values = [v for v in constants if v is not None]
        if len(values) != 1 or len(op.input) != 2:
            return False
        value = values[0]
        if value.ndim > rank:
            return False
        # The layout at this op: conv axes permuted by the Transposes between conv and op.
        layout = list(range(rank))
        for transpose in reversed(after):
            if transpose is op:
                break
            if transpose.op_type == "Transpose":
                perm = list(index.attribute(transpose, "perm", list(range(rank))[::-1]))
                layout = [layout[p] for p in perm]
        padded = (1,) * (rank - value.ndim) + tuple(value.shape)
        return all(d == 1 for axis, d in enumerate(padded) if layout[axis] != 1)
