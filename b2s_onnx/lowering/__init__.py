"""Lowering rules (one module per op family) and the driver that applies them."""

from b2s_onnx.lowering._options import LoweringOptions
from b2s_onnx.lowering.driver import LoweredNode, LoweringResult, lower_model
from b2s_onnx.lowering.registry import DEFAULT_DOMAINS, RULES

__all__ = [
    "DEFAULT_DOMAINS",
    "RULES",
    "LoweredNode",
    "LoweringOptions",
    "LoweringResult",
    "lower_model",
]
