"""The shape of a lowering rule: what it matches and the function that replaces it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from b2s_onnx.lowering._emit import Emitter
from b2s_onnx.lowering._node import NodeFacts
from b2s_onnx.lowering._options import LoweringOptions

LowerFn = Callable[[NodeFacts, Emitter, LoweringOptions], None]


@dataclass(frozen=True)
class LoweringRule:
    """Replaces every node of ``op_type`` (in a custom domain) with standard ONNX nodes.

    ``index_roles`` lists the inputs after ``data`` (block_shape, crops, pads) and
    ``attributes`` the allowed attribute names with their ONNX attribute type.
    """

    op_type: str
    index_roles: tuple[str, ...]
    lower: LowerFn
    attributes: dict[str, int] = field(default_factory=dict)
