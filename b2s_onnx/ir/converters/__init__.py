"""Layer converters, one module per op family; importing this package registers them all."""

from b2s_onnx.ir.converters import (  # noqa: F401 - imported to register converters
    activation,
    color,
    convolution,
    data_movement,
    detection,
    detection_output,
    elementwise,
    linear_algebra,
    normalization,
    reduce,
    resize,
    shape_ops,
)

# isort: split
# Imported after the modules above: these replace their registrations of the same layers
# (Convert, ConvertLike and Round from elementwise, Interpolate from resize, Pad from
# shape_ops, MaxPool and AvgPool from convolution, TopK from reduce).
from b2s_onnx.ir.converters import (  # noqa: F401
    arithmetic,
    conversion,
    interpolate,
    padding,
    pooling,
    topk,
)
from b2s_onnx.ir.converters.registry import CONVERTERS, find, supported_ops

__all__ = ["CONVERTERS", "find", "supported_ops"]
