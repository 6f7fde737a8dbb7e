"""The one registry of lowering rules: ``lower`` and the IR importer both run it."""

from __future__ import annotations

from b2s_onnx.lowering._batch_space import BATCH_TO_SPACE, SPACE_TO_BATCH
from b2s_onnx.lowering._depth_space import DEPTH_TO_SPACE, SPACE_TO_DEPTH
from b2s_onnx.lowering._rule import LoweringRule

#: Domains whose nodes of a registered op type are lowered unless the caller says otherwise.
DEFAULT_DOMAINS: tuple[str, ...] = ("org.openvinotoolkit", "ai.intel.openvino")

RULES: dict[str, LoweringRule] = {
    rule.op_type: rule for rule in (BATCH_TO_SPACE, SPACE_TO_BATCH, DEPTH_TO_SPACE, SPACE_TO_DEPTH)
}
