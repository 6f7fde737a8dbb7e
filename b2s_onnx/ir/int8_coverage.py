"""How much of a quantized IR onnxruntime actually runs on integer kernels.

onnxruntime turns QDQ node groups into integer kernels only for the patterns its QDQ
transformer knows, so the only trustworthy count is the optimized graph itself
(``SessionOptions.optimized_model_filepath``), compared with the IR's layers that
OpenVINO runs in INT8: Convolution, GroupConvolution and MatMul fed by a FakeQuantize.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime as ort

from b2s_onnx.ir.reader import read_ir_xml

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
FLOAT_KERNELS = frozenset({"Conv", "FusedConv", "MatMul", "Gemm", "FusedMatMul", "NchwcConv"})
INT8_LAYERS = ("Convolution", "GroupConvolution", "MatMul")


@dataclass(frozen=True)
class Coverage:
    #: IR layers of INT8_LAYERS with a FakeQuantize on an input.
    int8_layers: int
    #: Integer kernels in onnxruntime's optimized graph, by op type.
    integer_kernels: Counter
    #: Float convolution/matmul kernels left in the optimized graph.
    float_kernels: Counter

    @property
    def integer(self) -> int:
        return sum(self.integer_kernels.values())


def int8_layers(xml: str | os.PathLike) -> int:
    ir = read_ir_xml(Path(xml))
    count = 0
    for layer in ir.layers.values():
        if layer.type not in INT8_LAYERS:
            continue
        sources = [ir.sources[(layer.id, port.id)][0] for port in layer.inputs]
        if any(ir.layers[s].type == "FakeQuantize" for s in sources):
            count += 1
    return count


def optimized_op_counts(model: onnx.ModelProto, threads: int = 1) -> Counter:
    """Op types of onnxruntime's optimized graph (extended optimizations, as a session
    runs them, but without the hardware-specific layout pass)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "optimized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(path)
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(str(path), load_external_data=False)
    return Counter(node.op_type for node in optimized.graph.node)


def coverage(xml: str | os.PathLike, model: onnx.ModelProto) -> Coverage:
    ops = optimized_op_counts(model)
    return Coverage(
        int8_layers(xml),
        Counter({k: v for k, v in ops.items() if k in INTEGER_KERNELS}),
        Counter({k: v for k, v in ops.items() if k in FLOAT_KERNELS}),
    )
