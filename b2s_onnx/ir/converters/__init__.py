"""Layer converters, one module per op family; importing this package registers them all."""

from b2s_onnx.ir.converters import (  # noqa: F401 - imported to register converters
    attention,
    beam_search,
    bitwise,
    color,
    control_flow,
    conversion,
    convolution,
    ctc_loss,
    data_movement,
    deformable,
    detection,
    detection_output,
    elementwise,
    embedding,
    fake_convert,
    float_checks,
    fourier,
    generation,
    indexing,
    linalg,
    patches,
    quantize,
    recurrent,
    reduce,
    resize,
    scatter,
    search,
    segments,
    sequence,
    shape_ops,
)
from b2s_onnx.ir.converters.registry import CONVERTERS, find, supported_ops

__all__ = ["CONVERTERS", "find", "supported_ops"]
