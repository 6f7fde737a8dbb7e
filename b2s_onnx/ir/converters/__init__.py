"""Layer converters, one module per op family; importing this package registers them all."""

from b2s_onnx.ir.converters import (  # noqa: F401 - imported to register converters
    convolution,
    ctc,
    data_movement,
    deformable,
    detection,
    detection_output,
    elementwise,
    experimental,
    generate_proposals,
    matrix_nms,
    multiclass_nms,
    nms,
    nms_rotated,
    nonzero,
    proposal,
    psroi_pooling,
    reduce,
    resize,
    roi_align,
    roi_pooling,
    sampling,
    shape_ops,
    yolo,
)
from b2s_onnx.ir.converters.registry import CONVERTERS, find, supported_ops

__all__ = ["CONVERTERS", "find", "supported_ops"]
