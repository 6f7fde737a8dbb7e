"""GatherTree: the full beams of a beam search, traced back from their last step."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from b2s_onnx.ir.converters._constants import int64s
from b2s_onnx.ir.converters.kernel_types import cast, kernel_type
from b2s_onnx.ir.converters.registry import converts


@converts("GatherTree", (1,), inputs=(4, 4), attrs={})
def gather_tree(ctx, layer, inputs):
    """An ONNX Loop over the steps, last to first (any number of steps): at each step a beam
    takes its id from the beam it descends from, then moves to that beam's parent; steps at
    or beyond a batch's max_seq_len hold end_token. Afterwards everything after a beam's
    first end_token becomes end_token. Ids of a type onnxruntime's Where has no kernel for
    (int16, uint16, uint64) are traced in a type at least as wide and cast back."""
    step_ids, parent_ids, max_seq_len, end_token = inputs
    elem = ctx.type_of(step_ids)
    wide = kernel_type(ctx, layer, "Where", elem)
    if wide is not None:
        step_ids, end_token = cast(ctx, step_ids, wide), cast(ctx, end_token, wide)
    end = ctx.one("Reshape", [end_token, int64s(ctx, "scalar", [])])
    lengths = ctx.one(
        "Unsqueeze",
        [ctx.one("Cast", [max_seq_len], to=TensorProto.INT64), int64s(ctx, "beam", [1])],
    )
    shape = ctx.one("Shape", [step_ids])
    steps = ctx.one(
        "Squeeze", [ctx.one("Slice", [shape, int64s(ctx, "s", [0]), int64s(ctx, "e", [1])])]
    )
    last = ctx.one("Sub", [steps, int64s(ctx, "one", 1)])
    beams = ctx.one("Slice", [shape, int64s(ctx, "s2", [2]), int64s(ctx, "e2", [3])])
    beam_ids = ctx.one(
        "Range", [int64s(ctx, "zero", 0), ctx.one("Squeeze", [beams]), int64s(ctx, "one", 1)]
    )
    start = ctx.one(
        "Expand",
        [
            ctx.one("Unsqueeze", [beam_ids, int64s(ctx, "batch", [0])]),
            ctx.one("Slice", [shape, int64s(ctx, "s3", [1]), int64s(ctx, "e3", [3])]),
        ],
    )

    iteration, keep_going, parent = (ctx.tmp(n) for n in ("iteration", "cond", "parent"))
    t, ids, parents, active, row, moved, going = (
        ctx.tmp(n) for n in ("t", "ids", "parents", "active", "row", "moved", "going")
    )
    picked, from_parent = ctx.tmp("picked"), ctx.tmp("from_parent")
    body_nodes = [
        helper.make_node("Sub", [last, iteration], [t]),
        helper.make_node("Gather", [step_ids, t], [ids], axis=0),
        helper.make_node("Gather", [parent_ids, t], [ctx.tmp("parents_raw")], axis=0),
    ]
    body_nodes += [
        helper.make_node("Cast", [body_nodes[-1].output[0]], [parents], to=TensorProto.INT64),
        helper.make_node("Less", [t, lengths], [active]),
        helper.make_node("GatherElements", [ids, parent], [picked], axis=1),
        helper.make_node("Where", [active, picked, end], [row]),
        helper.make_node("GatherElements", [parents, parent], [from_parent], axis=1),
        helper.make_node("Where", [active, from_parent, parent], [moved]),
        helper.make_node("Identity", [keep_going], [going]),
    ]
    body = helper.make_graph(
        body_nodes,
        f"{layer.name}_steps",
        [
            helper.make_tensor_value_info(iteration, TensorProto.INT64, []),
            helper.make_tensor_value_info(keep_going, TensorProto.BOOL, []),
            helper.make_tensor_value_info(parent, TensorProto.INT64, None),
        ],
        [
            helper.make_tensor_value_info(going, TensorProto.BOOL, []),
            helper.make_tensor_value_info(moved, TensorProto.INT64, None),
            helper.make_tensor_value_info(row, wide or elem, None),
        ],
    )
    _, backwards = ctx.node(
        "Loop", [steps, "", start], [ctx.tmp("final_parent"), ctx.tmp("rows")], body=body
    )
    minimum = int64s(ctx, "min", [np.iinfo(np.int64).min])
    stacked = ctx.one(
        "Slice",
        [
            backwards,
            int64s(ctx, "from", [-1]),
            minimum,
            int64s(ctx, "t", [0]),
            int64s(ctx, "back", [-1]),
        ],
    )
    ended = ctx.one("Cast", [ctx.one("Equal", [stacked, end])], to=TensorProto.INT32)
    before = ctx.one("CumSum", [ended, int64s(ctx, "axis", 0)], exclusive=1)
    finished = ctx.one("Greater", [before, ctx.const("zero", np.zeros((), np.int32))])
    if wide is None:
        ctx.one("Where", [finished, end, stacked], ctx.out(layer))
        return
    traced = ctx.one("Where", [finished, end, stacked])
    ctx.one("Cast", [traced], ctx.out(layer), to=elem)
