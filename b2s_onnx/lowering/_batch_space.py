"""BatchToSpace and SpaceToBatch: split, interleave and crop (or pad) the spatial axes.

BatchToSpace  -> Reshape (split batch) -> Transpose -> Reshape (merge) -> Slice (crops)
SpaceToBatch  -> Pad -> Reshape (split spatial) -> Transpose -> Reshape (merge into batch)

Constant index inputs are checked now and folded into constant shapes; index inputs known
only at run time are cast to int64, computed into the shapes in the graph, and guarded.
"""

from __future__ import annotations

from b2s_onnx.lowering import _checks as checks
from b2s_onnx.lowering._emit import INT64_MAX, Emitter
from b2s_onnx.lowering._movement import Movement, emit_movement
from b2s_onnx.lowering._node import PAD_TYPES, NodeFacts
from b2s_onnx.lowering._options import LoweringOptions
from b2s_onnx.lowering._rule import LoweringRule
from b2s_onnx.lowering._sizes import Size, product
from b2s_onnx.ops import batch_to_space, space_to_batch


class _IndexValues:
    """The index inputs of one node as per-element :class:`Size` values and as vectors."""

    def __init__(self, facts: NodeFacts, emit: Emitter, roles: tuple[str, ...]) -> None:
        self.rank = len(facts.shape)
        self.values = {role: facts.index[role].ints() for role in roles}
        self.runtime: dict[str, str | None] = {}
        for role in roles:
            if self.values[role] is None:
                vec = emit.int64_vector(facts.index_tensors[role], f"{role}_int64")
                if tuple(facts.index[role].shape or ()) != (self.rank,):
                    vec = checks.index_length(emit, role, vec, self.rank)
                self.runtime[role] = vec
            else:
                self.runtime[role] = None
        self._facts = facts
        self._emit = emit

    def sizes(self, role: str) -> list[Size]:
        values = self.values[role]
        return [
            Size.element(self.runtime[role], i, None if values is None else values[i])
            for i in range(self.rank)
        ]

    def vector(self, role: str) -> str:
        return checks.vector(self._emit, self.runtime[role], self.values[role], role)

    def guard_runtime_inputs(self, zero_first: tuple[str, ...]) -> None:
        """Length, range and first-element rules of every index input known only at run time."""
        for role, vec in self.runtime.items():
            if vec is None:
                continue
            minimum = 0 if role in zero_first else 1
            checks.at_least(self._emit, role, vec, minimum)
            checks.first_is(self._emit, role, vec, minimum)


def lower_batch_to_space(facts: NodeFacts, emit: Emitter, options: LoweringOptions) -> None:
    roles = batch_to_space.INDEX_ROLES
    shape = facts.shape
    facts.out_shape = batch_to_space.infer(facts.ref, shape, *(facts.index[r] for r in roles))
    rank = len(shape)
    index = _IndexValues(facts, emit, roles)
    index.guard_runtime_inputs(zero_first=("crops_begin", "crops_end"))
    blocks, begins, ends = (index.sizes(role) for role in roles)
    dims = [Size.data_dim(facts.data, i, d) for i, d in enumerate(shape)]

    block_product = product(blocks[1:])
    if index.runtime["block_shape"] is not None or (shape[0] is None and block_product.static != 1):
        batch = emit.size(dims[0])
        if index.runtime["block_shape"] is not None:
            blocks_vector = index.vector("block_shape")
            checks.product_fits(emit, "prod(block_shape) <= data.shape[0]", blocks_vector, batch)
            prod = emit.node("ReduceProd", [blocks_vector], "product", keepdims=1)
        else:
            prod = emit.const("block_product", [block_product.static])
        checks.divisible(emit, "data.shape[0] % prod(block_shape) == 0", batch, prod)
    crops_unknown = any(index.runtime[r] is not None for r in roles)
    crops_on_unknown_dims = any(
        shape[i] is None and (begins[i].static != 0 or ends[i].static != 0) for i in range(1, rank)
    )
    if crops_unknown or crops_on_unknown_dims:
        total = emit.node("Add", [index.vector("crops_begin"), index.vector("crops_end")], "crops")
        extent = emit.node(
            "Mul", [emit.shape_of(facts.data), index.vector("block_shape")], "extent"
        )
        checks.not_greater(
            emit, "crops_begin + crops_end <= block_shape * data.shape", total, extent
        )

    k = rank - 1
    batch_out = dims[0] // block_product
    factors = [*blocks[1:], batch_out, *dims[1:]]
    perm = [k] + [axis for i in range(k) for axis in (k + 1 + i, i)]
    spread = [batch_out] + [dims[i] * blocks[i] for i in range(1, rank)]
    crop_axes = [i for i in range(1, rank) if begins[i].static != 0 or ends[i].static != 0]

    moved = emit_movement(
        emit,
        facts.data,
        dims,
        Movement(factors, perm, spread),
        output=None if crop_axes else facts.output,
        itemsize=facts.itemsize,
        strategy=options.strategy,
        threads=options.threads,
    )
    if not crop_axes:
        if moved is None:
            emit.node("Identity", [emit.gate_data(facts.data)], "identity", output=facts.output)
        return
    starts = emit.shape_vector([begins[i] for i in crop_axes], "crop_starts", allow_infer=False)
    if emit.has_checks():
        starts = emit.gate(starts)
    stops = emit.shape_vector(
        [_crop_stop(spread[i], ends[i]) for i in crop_axes], "crop_ends", allow_infer=False
    )
    emit.node(
        "Slice",
        [moved or facts.data, starts, stops, emit.const("crop_axes", crop_axes)],
        "crop",
        output=facts.output,
    )


def _crop_stop(extent: Size, crop_end: Size) -> Size:
    """Where a crop stops: counted from the end when the extent is only known at run time."""
    if crop_end.static == 0:
        return Size.of(INT64_MAX)
    if crop_end.static is not None and extent.static is None:
        return Size.of(-crop_end.static)
    return extent - crop_end


def lower_space_to_batch(facts: NodeFacts, emit: Emitter, options: LoweringOptions) -> None:
    roles = space_to_batch.INDEX_ROLES
    shape = facts.shape
    facts.out_shape = space_to_batch.infer(facts.ref, shape, *(facts.index[r] for r in roles))
    rank = len(shape)
    index = _IndexValues(facts, emit, roles)
    index.guard_runtime_inputs(zero_first=("pads_begin", "pads_end"))
    blocks, begins, ends = (index.sizes(role) for role in roles)
    dims = [Size.data_dim(facts.data, i, d) for i, d in enumerate(shape)]
    padded = [dims[i] + begins[i] + ends[i] for i in range(rank)]

    if index.runtime["block_shape"] is not None:
        checks.product_fits(
            emit,
            "data.shape[0] * prod(block_shape) < 2^63",
            index.vector("block_shape"),
            emit.size(dims[0]),
            factor=-1,
        )
    if any(index.runtime[r] is not None for r in roles) or any(
        padded[i].static is None and blocks[i].static != 1 for i in range(1, rank)
    ):
        padded_vector = emit.node(
            "Add",
            [
                emit.node("Add", [emit.shape_of(facts.data), index.vector("pads_begin")], "pad"),
                index.vector("pads_end"),
            ],
            "padded",
        )
        checks.divisible(
            emit,
            "(data.shape + pads_begin + pads_end) % block_shape == 0",
            padded_vector,
            index.vector("block_shape"),
        )

    pad_axes = [i for i in range(rank) if begins[i].static != 0 or ends[i].static != 0]
    current = facts.data
    if pad_axes:
        current = _pad(emit, facts, dims, begins, ends, pad_axes)
    k = rank - 1
    factors = [padded[0]]
    for i in range(1, rank):
        factors += [padded[i] // blocks[i], blocks[i]]
    perm = [2 * i for i in range(1, k + 1)] + [0] + [2 * i - 1 for i in range(1, k + 1)]
    out_shape = [padded[0] * product(blocks[1:])] + [padded[i] // blocks[i] for i in range(1, rank)]
    moved = emit_movement(
        emit,
        current,
        padded,
        Movement(factors, perm, out_shape),
        output=facts.output,
        itemsize=facts.itemsize,
        strategy=options.strategy,
        threads=options.threads,
    )
    if moved is None:
        emit.node("Identity", [emit.gate_data(current)], "identity", output=facts.output)


def _pad(
    emit: Emitter,
    facts: NodeFacts,
    dims: list[Size],
    begins: list[Size],
    ends: list[Size],
    pad_axes: list[int],
) -> str:
    """Zero padding: Pad where onnxruntime has it for the type, else Concat with zero blocks."""
    elem_type = facts.data_info.elem_type
    if elem_type in PAD_TYPES:
        pads = emit.shape_vector(begins + ends, "pads", allow_infer=False)
        if emit.has_checks():
            pads = emit.gate(pads)
        return emit.node("Pad", [facts.data, pads], "pad")
    # float16/int16/uint16/bfloat16: zeros from ConstantOfShape + Cast (0.0 is exact in all).
    current = facts.data
    current_dims = list(dims)
    for axis in pad_axes:
        parts = []
        for side, amount in (("begin", begins[axis]), ("end", ends[axis])):
            if amount.static == 0:
                continue
            zero_shape = list(current_dims)
            zero_shape[axis] = amount
            shape = emit.shape_vector(zero_shape, f"zeros_{side}_shape", allow_infer=False)
            if emit.has_checks():
                shape = emit.gate(shape)
            zeros = emit.node("ConstantOfShape", [shape], f"zeros_{side}")
            parts.append((side, emit.node("Cast", [zeros], f"zeros_{side}_typed", to=elem_type)))
        ordered = (
            [p for s, p in parts if s == "begin"] + [current] + [p for s, p in parts if s == "end"]
        )
        current = emit.node("Concat", ordered, f"pad_axis{axis}", axis=axis)
        current_dims[axis] = current_dims[axis] + begins[axis] + ends[axis]
    return current


BATCH_TO_SPACE = LoweringRule(
    op_type=batch_to_space.OP_TYPE,
    index_roles=batch_to_space.INDEX_ROLES,
    lower=lower_batch_to_space,
)
SPACE_TO_BATCH = LoweringRule(
    op_type=space_to_batch.OP_TYPE,
    index_roles=space_to_batch.INDEX_ROLES,
    lower=lower_space_to_batch,
)
