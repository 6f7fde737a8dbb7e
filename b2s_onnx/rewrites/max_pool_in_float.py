"""MaxPool on 8-bit integers that feed ConvIntegers -> the pool in float, quantized after.

A FakeQuantize before a MaxPool (NNCF puts one after every activation: a YOLO-style
``Conv -> LeakyReLU -> FakeQuantize -> MaxPool``) becomes a MaxPool on uint8
(`dequantize-after-movement`) so that the next layer reads integers. onnxruntime runs an
8-bit MaxPool fast only in NHWC, where its NHWC transformer carries it between QLinearConvs;
next to a ConvInteger (a layer whose output is read in float) its 8-bit kernel is a plain
loop: 0.92 ms on [1,16,128,128] (2x2, stride 2) against 0.10 ms for the float pool, and
0.48 ms on [1,128,32,32], 1 thread. Quantization is non-decreasing, so the largest of the
quantized values is the quantized largest value: ``MaxPool(Q(z)) = Q(MaxPool(z))`` and
``MaxPool(q) = Q(MaxPool(DQ(q)))``, bit for bit.

So where every reader of the pool is a per-tensor DequantizeLinear whose readers are Convs
that no QuantizeLinear reads (each becomes a ConvInteger, `conv-integer`), or moves its
bytes on to such readers (the next pool of a chain, a Concat: YOLOv5's SPPF, three 5x5
pools in a row, 0.5-1.2 ms each on [1,128,13,13] as 8-bit loops), the pool runs in
float: on ``z`` when a QuantizeLinear of ``z`` is its input (the QuantizeLinear then runs
on the pooled tensor, a quarter of the size) unless that QuantizeLinear completes an
integer group (a QLinearAdd of ResNet-50 v2's residual sum: NNCF's model 0.95x the time),
else on its input dequantized. A ``Max`` with
minus infinity before the new QuantizeLinear (and after a new DequantizeLinear) keeps
onnxruntime's QDQ propagation from moving them back around the pool. NNCF's
YOLOv4-tiny-like network (``models/int8/yolo_tiny``): 0.80x the time (3.67 -> 2.94 ms, 1
thread). Pools next to QLinearConvs are left to onnxruntime's NHWC kernels (replacing them
took person-attributes-recognition to 1.04x the time at 2 threads: five more Transposes).

A float pool on a DequantizeLinear whose output is read in float, by no integer layer or
op a QuantizeLinear reads (BlazePalm's ``MaxPool -> channel Pad -> residual Add``), is
where onnxruntime's QDQ propagation moves the DequantizeLinear after the pool and runs the
same slow 8-bit loop (0.60 ms on [1,32,64,64] in an NNCF-quantized palm detector); a guard
between the two keeps the pool in float.

Bit-exact but for NaN, which QuantizeLinear maps to an implementation-defined level.
"""

from __future__ import annotations

import onnx
from onnx import helper

from b2s_onnx.rewrites._fusion_guard import guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport
from b2s_onnx.rewrites.conv_integer import quantized_again

STANDARD = ("", "ai.onnx")
INTEGERS = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)


class MaxPoolInFloat:
    """See the module doc: ``attempt`` moves an 8-bit pool to float, ``_keep_float`` keeps
    a float one there."""

    name = "max-pool-in-float"
    exact = True
    anchors = ("MaxPool",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if index.info(node.input[0]).elem_type not in INTEGERS:
            return self._keep_float(index, node)
        if len(node.output) > 1 and node.output[1]:
            return Declined(self.name, node.name, "the MaxPool has an indices output")
        readers = index.consumers.get(node.output[0], [])
        if not readers or node.output[0] in index.graph_outputs:
            return None
        # Readers that move the bytes on (the next pool of a chain, a Concat) keep them;
        # the rest must dequantize them.
        movers = [r for r in readers if r.op_type in _BYTE_MOVERS and r.domain in STANDARD]
        dequantizing = [r for r in readers if r not in movers]
        dequantizations = [_per_tensor(index, r) for r in dequantizing]
        if any(d is None for d in dequantizations):
            return Declined(self.name, node.name, "a reader is not a per-tensor dequantization")
        origin = _origin(index, node.input[0])
        if dequantizations:
            parameters_of = dequantizing[0]
        elif origin is not None:
            parameters_of = origin
        else:
            return Declined(self.name, node.name, "no per-tensor quantization of its bytes")
        scale, zero = _parameters(index, parameters_of)
        if any(s != scale or z != zero for s, z in dequantizations) or not scale > 0:
            return Declined(self.name, node.name, "its readers dequantize it differently")
        later = [r for r in movers if r.op_type == "Concat"]
        if not all(_read_in_float(index, dq) for dq in dequantizing) or not all(
            _concat_read_in_float(index, concat) for concat in later
        ):
            return Declined(
                self.name, node.name, "a QLinearConv reads it (onnxruntime pools it in NHWC)"
            )
        quantize = index.produced_by(node.input[0], "QuantizeLinear")
        if quantize is not None and not _same(index, quantize, scale, zero):
            quantize = None
        if quantize is not None and _ends_a_group(index, quantize):
            quantize = None  # it stays where it is, completing an integer kernel's group
        # The QuantizeLinear goes too when the pool was its only reader.
        matched = [node]
        if quantize is not None and index.only_consumer(quantize.output[0]) is node:
            matched.insert(0, quantize)
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        fresh = index.names.fresh
        scale_name = parameters_of.input[1]
        zero_name = parameters_of.input[2]
        nodes = []
        if quantize is not None:
            source = quantize.input[0]
            dtype = helper.tensor_dtype_to_np_dtype(index.info(source).elem_type or 1)
            detail = "pooled before its quantization"
        else:
            # DequantizeLinear -> MaxPool is a pattern onnxruntime turns back into the
            # 8-bit pool, so a guard stands between them too.
            dequantized = fresh(f"{node.input[0]}/dequantized")
            source = fresh(f"{node.input[0]}/dequantized_kept")
            dtype = index.constant(scale_name).dtype
            nodes += [
                helper.make_node(
                    "DequantizeLinear",
                    [node.input[0], scale_name, zero_name],
                    [dequantized],
                    name=dequantized,
                ),
                guard(index, dequantized, source, f"{base}/input", dtype),
            ]
            detail = "pooled on its dequantized input"
        pooled = onnx.NodeProto()
        pooled.CopyFrom(node)
        pooled.input[0] = source
        pooled.output[0] = fresh(f"{node.output[0]}/float")
        kept = fresh(f"{node.output[0]}/kept_in_float")
        nodes += [
            pooled,
            guard(index, pooled.output[0], kept, base, dtype),
            helper.make_node(
                "QuantizeLinear",
                [kept, scale_name, zero_name],
                [node.output[0]],
                name=fresh(f"{base}/quantize"),
            ),
        ]
        index.replace(matched, nodes)
        return Fired(self.name, node.name, detail)

    def _keep_float(self, index: GraphIndex, node: onnx.NodeProto) -> Fired | None:
        """A float pool on a per-tensor DequantizeLinear of run-time bytes, read in float:
        onnxruntime's QDQ propagation would move the DequantizeLinear after it and run the
        slow 8-bit pool; a guard between them keeps the pool in float."""
        dequantize = index.produced_by(node.input[0], "DequantizeLinear")
        if dequantize is None or _per_tensor(index, dequantize) is None:
            return None
        if index.constant(dequantize.input[0]) is not None:
            return None
        if len(node.output) > 1 and node.output[1]:
            return None
        readers = index.consumers.get(node.output[0], [])
        if any(_groups_with_a_dequantization(index, r) for r in readers):
            return None  # the moved DequantizeLinear joins an integer kernel's group
        if not index.is_free([node]):
            return None
        index.claim([node])
        dtype = index.constant(dequantize.input[1]).dtype
        kept = index.names.fresh(f"{node.input[0]}/kept_in_float")
        pooled = onnx.NodeProto()
        pooled.CopyFrom(node)
        pooled.input[0] = kept
        base = node.name or node.output[0]
        index.replace([node], [guard(index, node.input[0], kept, f"{base}/input", dtype), pooled])
        return Fired(self.name, node.name, "its dequantized input kept in float")


#: Ops onnxruntime's QDQ transformer fuses with the DequantizeLinears before them and the
#: QuantizeLinear after them into an integer kernel (QLinearAdd, QLinearConv, ...).
_GROUPED = frozenset({"Add", "Mul", "Conv", "MatMul", "Gemm", "Concat"})


def _ends_a_group(index: GraphIndex, quantize: onnx.NodeProto) -> bool:
    """Whether ``quantize`` completes such a group: its input comes from a grouped op whose
    every run-time input is dequantized (ResNet-50 v2's residual sum before its stride-2
    shortcut pool). Pooling before it would leave that op in float."""
    producer = index.producer.get(quantize.input[0])
    if producer is None or producer.op_type not in _GROUPED or producer.domain not in STANDARD:
        return False
    operands = [name for name in producer.input if name and index.constant(name) is None]
    return bool(operands) and all(
        index.produced_by(name, "DequantizeLinear") is not None for name in operands
    )


#: Readers of a pool that move its bytes on rather than dequantize them.
_BYTE_MOVERS = frozenset({"MaxPool", "Concat"})


def _origin(index: GraphIndex, name: str) -> onnx.NodeProto | None:
    """The per-tensor QuantizeLinear that made the bytes ``name``, seen through 8-bit
    MaxPools (a chain of pools), or None."""
    node = index.producer.get(name)
    while node is not None and node.op_type == "MaxPool" and node.domain in STANDARD:
        node = index.producer.get(node.input[0])
    if node is None or node.op_type != "QuantizeLinear" or node.domain not in STANDARD:
        return None
    return node if _parameters(index, node) is not None else None


def _concat_read_in_float(index: GraphIndex, concat: onnx.NodeProto) -> bool:
    """Whether every reader of a Concat of bytes dequantizes them for float readers or
    future ConvIntegers (see ``_read_in_float``)."""
    readers = index.consumers.get(concat.output[0], [])
    return bool(readers) and all(
        _per_tensor(index, r) is not None and _read_in_float(index, r) for r in readers
    )


#: Layers onnxruntime runs on integer kernels after a DequantizeLinear, requantized or not
#: (MatMulIntegerToFloat, and ConvInteger after ``conv-integer``).
_INTEGER_LAYERS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def _groups_with_a_dequantization(index: GraphIndex, reader: onnx.NodeProto) -> bool:
    """Whether ``reader`` of a pool would join the DequantizeLinear that onnxruntime moves
    after the pool in a QDQ group: a QuantizeLinear (an 8-bit pool between quantizations,
    onnxruntime's own), an integer layer, or an op a QuantizeLinear reads."""
    if reader.op_type == "QuantizeLinear" or reader.op_type in _INTEGER_LAYERS:
        return True
    return any(
        r.op_type == "QuantizeLinear"
        for output in reader.output
        for r in index.consumers.get(output, [])
    )


def _per_tensor(index: GraphIndex, node: onnx.NodeProto) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor DequantizeLinear with constant parameters."""
    if node.op_type != "DequantizeLinear" or node.domain not in STANDARD:
        return None
    return _parameters(index, node)


def _parameters(index: GraphIndex, node: onnx.NodeProto) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor Quantize/DequantizeLinear's constant inputs."""
    if len(node.input) < 3:
        return None
    scale, zero = index.constant(node.input[1]), index.constant(node.input[2])
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    return float(scale.reshape(())), int(zero.reshape(()))


def _read_in_float(index: GraphIndex, dequantize: onnx.NodeProto) -> bool:
    """Whether everything reading ``dequantize`` reads it in float, next to which
    onnxruntime has no fast 8-bit pool: Convs no QuantizeLinear reads (each becomes a
    ConvInteger), or ops whose outputs no QuantizeLinear reads (BlazePalm's channel Pad
    before a float residual Add). A QLinearConv or another QDQ group would put the pool in
    onnxruntime's NHWC region, where its 8-bit kernel is the fast one."""
    readers = index.consumers.get(dequantize.output[0], [])
    if not readers or dequantize.output[0] in index.graph_outputs:
        return False
    for reader in readers:
        if reader.op_type == "Conv" and reader.domain in STANDARD:
            if reader.input[0] != dequantize.output[0] or quantized_again(index, reader):
                return False
        elif _groups_with_a_dequantization(index, reader):
            return False
    return True


def _same(index: GraphIndex, quantize: onnx.NodeProto, scale: float, zero: int) -> bool:
    """Whether ``quantize`` is per tensor with ``scale`` and ``zero``."""
    return _parameters(index, quantize) == (scale, zero)
