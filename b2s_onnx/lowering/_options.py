"""Choices a caller may make about *how* a node is lowered (never *what* it computes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoweringOptions:
    #: Use ONNX's own DepthToSpace/SpaceToDepth for 4-D nodes: True where exact (mode and
    #: element type permitting), False never, None when the planner estimates it cheaper.
    native_depth_to_space: bool | None = None
    #: How permutations are run: "auto" (the planner's cheapest estimate), "direct" (one
    #: Transpose), or "staged" (single-axis moves). All three compute the same bits.
    strategy: str = "auto"
    #: Intra-op threads the lowered model will run with (None: several, onnxruntime's
    #: default). Only the planner's choice depends on it, never the result.
    threads: int | None = None
    #: Run the graph rewrites around the lowering (atrous-convolution fusion before it,
    #: Transpose cleanup after it; see ``b2s_onnx.rewrites``). Off: lower node by node.
    fuse: bool = True
