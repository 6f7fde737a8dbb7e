"""Reads one custom node into the facts a lowering rule works from.

Structural problems (input count, attribute types, unknown rank) are reported here, in
the same one-line form as the ops' value rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.graph.types import INTEGER_TYPES, TensorInfo
from b2s_onnx.ops._common import IndexInput, NodeRef

#: Element types for which onnxruntime's CPU kernel of an op exists *and* moves every bit
#: unchanged (measured on 1.31). float16 is left out on purpose: Pad, DepthToSpace and
#: SpaceToDepth compute it through float32 and rewrite NaN payloads (0x7fbf -> 0x7e00).
PAD_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.INT8,
        onnx.TensorProto.INT32,
        onnx.TensorProto.INT64,
        onnx.TensorProto.UINT8,
        onnx.TensorProto.UINT32,
        onnx.TensorProto.UINT64,
        onnx.TensorProto.BOOL,
    }
)
NATIVE_DEPTH_SPACE_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.INT8,
        onnx.TensorProto.UINT8,
    }
)


@dataclass
class NodeFacts:
    node: onnx.NodeProto
    ref: NodeRef
    data: str
    data_info: TensorInfo
    index: dict[str, IndexInput] = field(default_factory=dict)
    index_tensors: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, object] = field(default_factory=dict)
    #: Set by the rule from the op's shape rule: lets a chain of custom nodes lower in one
    #: pass without re-running ONNX shape inference between them.
    out_shape: list[int | None] | None = None

    @property
    def shape(self) -> tuple[int | None, ...]:
        assert self.data_info.shape is not None
        return self.data_info.shape

    @property
    def output(self) -> str:
        return self.node.output[0]

    @property
    def itemsize(self) -> int:
        """Bytes per element of the data (for the planner's cost model)."""
        return int(helper.tensor_dtype_to_np_dtype(self.data_info.elem_type).itemsize)


def node_ref(node: onnx.NodeProto, position: int) -> NodeRef:
    return NodeRef(node.op_type, node.name or f"{node.op_type}_{position}")


def check_arity(ref: NodeRef, node: onnx.NodeProto, input_roles: tuple[str, ...]) -> None:
    if len(node.input) != len(input_roles):
        ref.fail(
            "inputs",
            f"expects {len(input_roles)} inputs ({', '.join(input_roles)}), got {len(node.input)}",
        )
    for role, name in zip(input_roles, node.input, strict=True):
        if not name:
            ref.fail(role, f"input '{role}' is required but empty")
    if len(node.output) != 1 or not node.output[0]:
        ref.fail("outputs", f"expects 1 output, got {len([o for o in node.output if o])}")


def read_attributes(
    ref: NodeRef, node: onnx.NodeProto, expected: dict[str, int]
) -> dict[str, object]:
    """Attribute values by name; refuses unknown names and wrong types (``expected``: type)."""
    values: dict[str, object] = {}
    for attr in node.attribute:
        if attr.name not in expected:
            allowed = ", ".join(expected) or "none"
            ref.fail(attr.name, f"unknown attribute '{attr.name}' (allowed: {allowed})")
        if attr.type != expected[attr.name]:
            kind = onnx.AttributeProto.AttributeType.Name
            ref.fail(
                attr.name,
                f"attribute '{attr.name}' must be {kind(expected[attr.name]).lower()}, "
                f"got {kind(attr.type).lower()}",
            )
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                ref.fail(attr.name, f"attribute '{attr.name}' is not valid UTF-8")
        values[attr.name] = value
    return values


def index_input(
    role: str, tensor: str, info: TensorInfo | None, constants: dict[str, np.ndarray]
) -> IndexInput:
    value = constants.get(tensor)
    if value is not None:
        return IndexInput.constant(role, value)
    info = info or TensorInfo()
    return IndexInput(
        role=role,
        shape=info.shape,
        dtype_name=info.type_name if info.elem_type else None,
        is_integer=None if not info.elem_type else info.elem_type in INTEGER_TYPES,
    )
