"""The ops' semantics, each in one module: shape rule, validation, numpy reference.

Lowering, parity checking and (later) IR import all read the rules from here.
"""

from b2s_onnx.ops import batch_to_space, depth_to_space, space_to_batch, space_to_depth
from b2s_onnx.ops._common import IndexInput, NodeRef

OP_MODULES = {
    module.OP_TYPE: module
    for module in (batch_to_space, space_to_batch, depth_to_space, space_to_depth)
}

__all__ = [
    "OP_MODULES",
    "IndexInput",
    "NodeRef",
    "batch_to_space",
    "depth_to_space",
    "space_to_batch",
    "space_to_depth",
]
