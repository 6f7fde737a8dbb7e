"""Parity: the original model under reference semantics vs the lowered model in onnxruntime."""

from b2s_onnx.parity.check import CheckResult, OutputReport, check

__all__ = ["CheckResult", "OutputReport", "check"]
