"""DepthToSpace and SpaceToDepth (N-D, both modes).

4-D nodes may become ONNX's own DepthToSpace (DCR = blocks_first, CRD = depth_first) or
SpaceToDepth (blocks_first only) where onnxruntime's kernel is exact for the element
type and the planner estimates it cheaper; every other case is the spec's
Reshape -> Transpose -> Reshape, simplified and planned.
"""

from __future__ import annotations

import onnx

from b2s_onnx.lowering import _checks as checks
from b2s_onnx.lowering._emit import Emitter
from b2s_onnx.lowering._movement import Movement, emit_movement, simplify
from b2s_onnx.lowering._node import NATIVE_DEPTH_SPACE_TYPES, NodeFacts
from b2s_onnx.lowering._options import LoweringOptions
from b2s_onnx.lowering._planner import NATIVE_DEPTH_SPACE_COST, choose_plan, plan_cost
from b2s_onnx.lowering._rule import LoweringRule
from b2s_onnx.lowering._sizes import Size
from b2s_onnx.ops import depth_to_space, space_to_depth

ATTRIBUTES = {"block_size": onnx.AttributeProto.INT, "mode": onnx.AttributeProto.STRING}
_ONNX_MODE = {"blocks_first": "DCR", "depth_first": "CRD"}


def _attributes(facts: NodeFacts) -> tuple[int, str]:
    if "mode" not in facts.attributes:
        facts.ref.fail("mode", "attribute 'mode' is required (blocks_first or depth_first)")
    return int(facts.attributes.get("block_size", 1)), str(facts.attributes["mode"])


def _native(
    facts: NodeFacts, options: LoweringOptions, block_size: int, movement: Movement
) -> bool:
    """ONNX's own op where it is exact; with ``native_depth_to_space=None`` only when the
    planner estimates it cheaper than the best Reshape/Transpose plan."""
    allowed = (
        options.native_depth_to_space is not False
        and len(facts.shape) == 4
        and block_size > 1
        and facts.data_info.elem_type in NATIVE_DEPTH_SPACE_TYPES
    )
    if not allowed or options.native_depth_to_space:
        return allowed
    factors, perm = simplify(movement.factors, movement.perm)
    generic = plan_cost(
        choose_plan(factors, perm, facts.itemsize, options.strategy, options.threads),
        facts.itemsize,
        options.threads,
    )
    return generic > NATIVE_DEPTH_SPACE_COST


def _finish(
    emit: Emitter, facts: NodeFacts, dims: list[Size], movement: Movement, options: LoweringOptions
) -> None:
    moved = emit_movement(
        emit,
        facts.data,
        dims,
        movement,
        output=facts.output,
        itemsize=facts.itemsize,
        strategy=options.strategy,
        threads=options.threads,
    )
    if moved is None:
        emit.node("Identity", [emit.gate_data(facts.data)], "identity", output=facts.output)


def lower_depth_to_space(facts: NodeFacts, emit: Emitter, options: LoweringOptions) -> None:
    block_size, mode = _attributes(facts)
    facts.out_shape = depth_to_space.infer(facts.ref, facts.shape, block_size, mode)
    shape = facts.shape
    k = len(shape) - 2
    dims = [Size.data_dim(facts.data, i, d) for i, d in enumerate(shape)]
    divisor = block_size**k
    n, channels, spatial = dims[0], dims[1], dims[2:]
    depth = channels // divisor
    blocks = [Size.of(block_size)] * k
    if mode == "blocks_first":
        factors = [n, *blocks, depth, *spatial]
        perm = [0, k + 1] + [axis for i in range(k) for axis in (k + 2 + i, 1 + i)]
    else:
        factors = [n, depth, *blocks, *spatial]
        perm = [0, 1] + [axis for i in range(k) for axis in (k + 2 + i, 2 + i)]
    out_shape = [n, depth] + [d * block_size for d in spatial]
    movement = Movement(factors, perm, out_shape)
    if _native(facts, options, block_size, movement):
        emit.node(
            "DepthToSpace",
            [facts.data],
            "depth_to_space",
            output=facts.output,
            blocksize=block_size,
            mode=_ONNX_MODE[mode],
        )
        return
    if shape[1] is None and divisor > 1:
        checks.divisible(
            emit,
            f"data.shape[1] % block_size^{k} == 0",
            emit.size(dims[1]),
            emit.const("divisor", [divisor]),
        )
    _finish(emit, facts, dims, movement, options)


def lower_space_to_depth(facts: NodeFacts, emit: Emitter, options: LoweringOptions) -> None:
    block_size, mode = _attributes(facts)
    facts.out_shape = space_to_depth.infer(facts.ref, facts.shape, block_size, mode)
    shape = facts.shape
    k = len(shape) - 2
    dims = [Size.data_dim(facts.data, i, d) for i, d in enumerate(shape)]
    n, channels, spatial = dims[0], dims[1], dims[2:]
    factors = [n, channels]
    for d in spatial:
        factors += [d // block_size, Size.of(block_size)]
    block_axes = [3 + 2 * i for i in range(k)]
    space_axes = [2 + 2 * i for i in range(k)]
    if mode == "blocks_first":
        perm = [0, *block_axes, 1, *space_axes]
    else:
        perm = [0, 1, *block_axes, *space_axes]
    out_shape = [n, channels * block_size**k] + [d // block_size for d in spatial]
    movement = Movement(factors, perm, out_shape)
    if mode == "blocks_first" and _native(facts, options, block_size, movement):
        emit.node(
            "SpaceToDepth",
            [facts.data],
            "space_to_depth",
            output=facts.output,
            blocksize=block_size,
        )
        return
    for axis in range(2, len(shape)):
        if shape[axis] is None and block_size > 1:
            checks.divisible(
                emit,
                f"data.shape[{axis}] % block_size == 0",
                emit.size(dims[axis]),
                emit.const("block", [block_size]),
            )
    _finish(emit, facts, dims, movement, options)


DEPTH_TO_SPACE = LoweringRule(
    op_type=depth_to_space.OP_TYPE,
    index_roles=(),
    lower=lower_depth_to_space,
    attributes=ATTRIBUTES,
)
SPACE_TO_DEPTH = LoweringRule(
    op_type=space_to_depth.OP_TYPE,
    index_roles=(),
    lower=lower_space_to_depth,
    attributes=ATTRIBUTES,
)
