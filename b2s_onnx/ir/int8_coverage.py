"""How much of a quantized IR onnxruntime actually runs on integer kernels.

onnxruntime turns QDQ node groups into integer kernels only for the patterns its QDQ
transformer knows, so the only trustworthy count is the optimized graph itself
(``SessionOptions.optimized_model_filepath``), compared with the IR's layers that
OpenVINO runs in INT8: Convolution, GroupConvolution and MatMul fed by a FakeQuantize.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime as ort

from b2s_onnx.ir.reader import read_ir_xml
from b2s_onnx.rewrites.channel_scale_as_depthwise_conv import SCALE
from b2s_onnx.rewrites.conv_on_branches import BRANCH
from b2s_onnx.rewrites.sibling_conv_integers import STACKED

#: Kernels of onnxruntime's optimized graph that compute on 8-bit integers.
INTEGER_KERNELS = frozenset(
    {
        "QLinearConv",
        "QLinearMatMul",
        "QGemm",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "ConvInteger",
        "MatMulInteger",
    }
)
#: Float kernels that an INT8 layer may have stayed as.
FLOAT_KERNELS = frozenset(
    {"Conv", "FusedConv", "MatMul", "Gemm", "FusedMatMul", "NchwcConv", "ConvTranspose"}
)
#: IR layers OpenVINO's CPU plugin runs in INT8 when their data input is quantized; a
#: ConvolutionBackpropData too (its runtime precision reads i8 there).
INT8_LAYERS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul")


@dataclass(frozen=True)
class Coverage:
    #: IR layers of INT8_LAYERS whose data input is quantized (``int8_layers``).
    int8_layers: int
    #: Layers that integer kernels of onnxruntime's optimized graph compute, by kernel op
    #: type (a kernel computing several stacked layers counts once for each).
    integer_kernels: Counter
    #: Float convolution/matmul kernels left in the optimized graph.
    float_kernels: Counter

    @property
    def integer(self) -> int:
        return sum(self.integer_kernels.values())


#: Layers that keep their input's precision in OpenVINO's low-precision transformations:
#: a FakeQuantize before them quantizes the layer after them too.
PRECISION_PRESERVING = frozenset(
    {
        "MaxPool",
        "Pad",
        "Concat",
        "Split",
        "VariadicSplit",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "StridedSlice",
        "Slice",
        "DepthToSpace",
        "SpaceToDepth",
        "ShuffleChannels",
    }
)


def int8_layers(xml: str | os.PathLike) -> int:
    """IR layers of INT8_LAYERS whose data input is quantized: a FakeQuantize on it, or
    on every branch reaching it through precision-preserving layers (a MaxPool, Pad, Split
    or Concat of FakeQuantize outputs, or a nearest Interpolate)."""
    ir = read_ir_xml(Path(xml))
    memo: dict[int, bool] = {}

    def quantized(layer_id: int) -> bool:
        if layer_id not in memo:
            memo[layer_id] = False  # a cycle (none in a valid IR) counts as float
            layer = ir.layers[layer_id]
            preserving = layer.type in PRECISION_PRESERVING or (
                layer.type == "Interpolate" and layer.data.get("mode") == "nearest"
            )
            if layer.type == "FakeQuantize":
                memo[layer_id] = True
            elif preserving and layer.inputs:
                data = layer.inputs if layer.type == "Concat" else layer.inputs[:1]
                memo[layer_id] = all(quantized(ir.sources[(layer.id, port.id)][0]) for port in data)
        return memo[layer_id]

    count = 0
    for layer in ir.layers.values():
        data = layer.inputs[:1]
        if layer.type in INT8_LAYERS and data and quantized(ir.sources[(layer.id, data[0].id)][0]):
            count += 1
    return count


def optimized_graph(model: onnx.ModelProto, threads: int = 1) -> onnx.GraphProto:
    """onnxruntime's optimized graph (extended optimizations, as a session runs them, but
    without the hardware-specific layout pass)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "optimized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(path)
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(path), load_external_data=False).graph


def optimized_op_counts(model: onnx.ModelProto, threads: int = 1) -> Counter:
    """Op types of onnxruntime's optimized graph."""
    return Counter(node.op_type for node in optimized_graph(model, threads).node)


#: Per-element ops that may stand between a kernel's sums and the Split of stacked layers.
_ELEMENTWISE = frozenset({"DequantizeLinear", "Add", "Mul"})


def layers_computed(readers: Mapping[str, list[onnx.NodeProto]], node: onnx.NodeProto) -> int:
    """How many layers ``node`` computes: for a ConvInteger the rewrite
    ``sibling-conv-integers`` stacked (known by its name), the outputs of the Split its result
    reaches through per-element ops; for the per-branch ConvIntegers of ``conv-on-branches``
    one for the first branch and none for the others (they compute one layer together);
    none for the depthwise QLinearConv of ``channel-scale-as-depthwise-conv`` (a scale, not
    an IR layer); else 1. ``readers`` maps each tensor to its readers."""
    if re.search(re.escape(BRANCH) + r"[1-9][0-9]*$", node.name) or node.name.endswith(SCALE):
        return 0
    if node.op_type != "ConvInteger" or not node.name.endswith(STACKED):
        return 1
    current = node
    while True:
        following = readers.get(current.output[0], [])
        if len(following) != 1:
            return 1
        current = following[0]
        if current.op_type == "Split":
            return len(current.output)
        if current.op_type not in _ELEMENTWISE:
            return 1


def coverage(xml: str | os.PathLike, model: onnx.ModelProto) -> Coverage:
    graph = optimized_graph(model)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    integer: Counter = Counter()
    floats: Counter = Counter()
    for node in graph.node:
        if node.op_type in INTEGER_KERNELS:
            integer[node.op_type] += layers_computed(readers, node)
        elif node.op_type in FLOAT_KERNELS:
            floats[node.op_type] += 1
    return Coverage(int8_layers(xml), integer, floats)
