"""The ``Max(t, -inf)`` guards around a per-axis QuantizeLinear/DequantizeLinear pair,
dropped where nothing could fuse across them.

The converter writes per-channel FakeQuantize as a per-axis QuantizeLinear/DequantizeLinear
pair between two ``Max(t, -inf)`` guards (see ``ir.converters.quantize``): onnxruntime
1.31 fuses a per-axis QuantizeLinear after a DQ -> Conv (or MatMul, Gemm, Add ...) group,
and a per-axis DequantizeLinear before a Conv -> QuantizeLinear, into integer kernels that
refuse to run. Each guard costs a pass over the tensor, so it stays only where such a group
could form:

- before the QuantizeLinear (``per-axis-quantize-guard``), where ``x`` comes, through
  Relu/Clip/Min/Max, from a layer or element-wise op whose every data input is dequantized
  (the transformer's groups all start at a DequantizeLinear on every data input). Arithmetic
  with a constant operand (a bias after ConvInteger -> DequantizeLinear) or with a float
  operand (MobileNetV3's HSwish, ``x * HardSigmoid(x)``) starts no group;
- after the DequantizeLinear (``per-axis-dequantize-guard``), where a reader is anything
  but a Conv whose output reaches no QuantizeLinear (through Relu/Clip, which onnxruntime
  folds into one): a depthwise layer read in float by its HSwish forms no group.

``Max(x, -inf)`` is ``x``, so both are exact.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._fusion_guard import is_guard
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Fired, RewriteReport

STANDARD = ("", "ai.onnx")
#: Element-wise ops onnxruntime's QDQ transformer could absorb between a group and its Q.
_PASS_THROUGH = ("Relu", "Clip", "Min", "Max")
#: Layers its QDQ groups are built around, when their data input is dequantized.
_LAYERS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def _unfusable(index: GraphIndex, name: str, depth: int = 4) -> bool:
    """Whether no QDQ group of onnxruntime's could end at ``name``."""
    node = index.producer.get(name)
    if node is None or node.domain not in STANDARD or depth == 0:
        return node is None  # a graph input starts no group
    if node.op_type in _PASS_THROUGH:
        return _unfusable(index, node.input[0], depth - 1)
    if node.op_type in ("Add", "Sub", "Mul", "Div"):
        return any(
            index.constant(i) is not None or index.produced_by(i, "DequantizeLinear") is None
            for i in node.input
        )
    if node.op_type in _LAYERS:
        return index.produced_by(node.input[0], "DequantizeLinear") is None
    return False


def _drop(index: GraphIndex, guard: onnx.NodeProto, report: RewriteReport) -> bool:
    """Removes ``guard``, its readers reading its input instead (False if already taken)."""
    if not index.is_free([guard]):
        return False
    index.claim([guard])
    index.replace([guard], [])
    index.rename_later(guard.output[0], guard.input[0])
    report.absorbed[guard.output[0]] = guard.input[0]
    return True


class PerAxisQuantizeGuard:
    name = "per-axis-quantize-guard"
    exact = True
    anchors = ("QuantizeLinear",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        scale = index.constant(node.input[1])
        if scale is None or scale.size < 2:
            return None
        guard = index.producer.get(node.input[0])
        if guard is None or not is_guard(index, guard):
            return None
        if index.only_consumer(guard.output[0]) is None or not index.can_rename(guard.output[0]):
            return None
        if not _unfusable(index, guard.input[0]) or not _drop(index, guard, report):
            return None
        return Fired(self.name, node.name, "no fusable group before it")


def _reaches_quantize(index: GraphIndex, name: str, depth: int = 3) -> bool:
    """Whether a QuantizeLinear reads ``name``, directly or through Relu/Clip (which
    onnxruntime's optimizer folds into it), or ``name`` is a graph output (kept: unknown)."""
    if name in index.graph_outputs or depth == 0:
        return True
    for reader in index.consumers.get(name, []):
        if reader.domain not in STANDARD or reader.op_type == "QuantizeLinear":
            return True
        if reader.op_type in ("Relu", "Clip") and _reaches_quantize(
            index, reader.output[0], depth - 1
        ):
            return True
    return False


class PerAxisDequantizeGuard:
    name = "per-axis-dequantize-guard"
    exact = True
    anchors = ("DequantizeLinear",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | None:
        scale = index.constant(node.input[1])
        if scale is None or scale.size < 2:
            return None
        guard = index.only_consumer(node.output[0])
        if guard is None or not is_guard(index, guard) or not index.can_rename(guard.output[0]):
            return None
        readers = index.consumers.get(guard.output[0], [])
        if not readers or guard.output[0] in index.graph_outputs:
            return None
        for reader in readers:
            if reader.op_type != "Conv" or reader.domain not in STANDARD:
                return None
            if reader.input[0] != guard.output[0] or _reaches_quantize(index, reader.output[0]):
                return None
        if not _drop(index, guard, report):
            return None
        return Fired(self.name, node.name, "its Conv readers are read in float")
