"""GatherTree: the full beams of a beam search, traced back from their last step."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.registry import converts


def _i64(ctx: ConversionContext, hint: str, values) -> str:
    return ctx.const(hint, np.asarray(values, dtype=np.int64))


@converts("GatherTree", (1,), inputs=(4, 4), attrs={})
def gather_tree(ctx, layer, inputs):
    """Unrolled over the (static) number of steps, last to first: at each step a beam takes
    its id from the beam it descends from, then moves to that beam's parent; steps at or
    beyond a batch's max_seq_len hold end_token. Finally everything after a beam's first
    end_token becomes end_token."""
    step_ids, parent_ids, max_seq_len, end_token = inputs
    shape = ctx.shape(step_ids)
    if shape is None or len(shape) != 3 or shape[0] is None:
        raise B2SError(
            f"{layer.where()}: input 'step_ids' must be [max_time, batch, beam] with a static "
            f"max_time, got {None if shape is None else list(shape)}"
        )
    steps = shape[0]
    end = ctx.one("Reshape", [end_token, _i64(ctx, "scalar", [])])
    lengths = ctx.one(
        "Unsqueeze", [ctx.one("Cast", [max_seq_len], to=TensorProto.INT64), _i64(ctx, "beam", [1])]
    )
    beam_ids = ctx.one(
        "Range",
        [
            _i64(ctx, "zero", 0),
            ctx.one(
                "Squeeze",
                [
                    ctx.one(
                        "Slice",
                        [ctx.one("Shape", [step_ids]), _i64(ctx, "s", [2]), _i64(ctx, "e", [3])],
                    )
                ],
            ),
            _i64(ctx, "one", 1),
        ],
    )
    parent = ctx.one(
        "Expand",
        [
            ctx.one("Unsqueeze", [beam_ids, _i64(ctx, "batch", [0])]),
            ctx.one(
                "Slice", [ctx.one("Shape", [step_ids]), _i64(ctx, "s", [1]), _i64(ctx, "e", [3])]
            ),
        ],
    )
    rows: list[str] = [""] * steps
    for t in reversed(range(steps)):
        at = _i64(ctx, "t", t)
        ids = ctx.one("Gather", [step_ids, at], axis=0)
        parents = ctx.one(
            "Cast", [ctx.one("Gather", [parent_ids, at], axis=0)], to=TensorProto.INT64
        )
        active = ctx.one("Less", [at, lengths])
        rows[t] = ctx.one("Where", [active, ctx.one("GatherElements", [ids, parent], axis=1), end])
        parent = ctx.one(
            "Where", [active, ctx.one("GatherElements", [parents, parent], axis=1), parent]
        )
    stacked = ctx.one(
        "Concat", [ctx.one("Unsqueeze", [r, _i64(ctx, "time", [0])]) for r in rows], axis=0
    )
    ended = ctx.one("Cast", [ctx.one("Equal", [stacked, end])], to=TensorProto.INT32)
    before = ctx.one("CumSum", [ended, _i64(ctx, "axis", 0)], exclusive=1)
    finished = ctx.one("Greater", [before, ctx.const("zero", np.zeros((), np.int32))])
    ctx.one("Where", [finished, end, stacked], ctx.out(layer))
