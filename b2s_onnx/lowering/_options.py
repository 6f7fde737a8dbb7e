"""Choices a caller may make about *how* a node is lowered (never *what* it computes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoweringOptions:
    #: Lower 4-D DepthToSpace/SpaceToDepth to ONNX's own op where it is exact and
    #: onnxruntime implements it for the element type; otherwise Reshape/Transpose.
    native_depth_to_space: bool = True
