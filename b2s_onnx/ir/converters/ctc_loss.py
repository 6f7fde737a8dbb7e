"""CTCLoss: the negative log-likelihood of each target over all aligned paths.

The forward (alpha) recursion of Graves et al. runs in log space, unrolled over the static
number of time steps and vectorised over the batch and the target positions; a batch item
stops updating after its logit_length. Targets are first cut to label_length, then, as the
attributes ask, collapsed (repeats merged) and made unique (first occurrences kept), by
moving the kept labels to the front.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import int64s
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool


class _LogSpace:
    """Log-space sums that stay -inf (not NaN) when every term is -inf."""

    def __init__(self, ctx: ConversionContext, dtype: np.dtype) -> None:
        self.ctx = ctx
        self.dtype = dtype
        self.minus_inf = ctx.const("minus_inf", np.asarray(-np.inf, dtype))
        self.zero = ctx.const("zero", np.asarray(0, dtype))

    def add(self, *terms: str) -> str:
        ctx = self.ctx
        peak = ctx.one("Max", list(terms))
        safe = ctx.one("Where", [ctx.one("Equal", [peak, self.minus_inf]), self.zero, peak])
        total = ctx.one("Sum", [ctx.one("Exp", [ctx.one("Sub", [t, safe])]) for t in terms])
        return ctx.one("Add", [safe, ctx.one("Log", [total])])

    def shifted(self, tensor: str, by: int, width: int) -> str:
        """tensor[:, s - by] (-inf where s < by) for an [N, width] tensor."""
        ctx = self.ctx
        kept = ctx.one(
            "Slice",
            [tensor, int64s(ctx, "s", [0]), int64s(ctx, "e", [width - by]), int64s(ctx, "a", [1])],
        )
        pad = ctx.one(
            "Expand",
            [
                self.minus_inf,
                ctx.one(
                    "Concat",
                    [
                        ctx.one(
                            "Slice",
                            [
                                ctx.one("Shape", [tensor]),
                                int64s(ctx, "s0", [0]),
                                int64s(ctx, "e1", [1]),
                            ],
                        ),
                        int64s(ctx, "by", [by]),
                    ],
                    axis=0,
                ),
            ],
        )
        return ctx.one("Concat", [pad, kept], axis=1)


def _compact(ctx: ConversionContext, labels: str, keep: str, width: int) -> tuple[str, str]:
    """Moves the kept labels of each row to the front, in order; returns them and their
    count per row."""
    positions = int64s(ctx, "positions", np.arange(width))
    dropped = ctx.one("Cast", [ctx.one("Not", [keep])], to=TensorProto.INT64)
    keys = ctx.one("Add", [ctx.one("Mul", [dropped, int64s(ctx, "width", width)]), positions])
    _, order = ctx.node(
        "TopK",
        [keys, int64s(ctx, "k", [width])],
        [ctx.tmp("keys"), ctx.tmp("order")],
        axis=1,
        largest=0,
        sorted=1,
    )
    count = ctx.reduce(
        "ReduceSum", ctx.one("Cast", [keep], to=TensorProto.INT64), [1], keepdims=False
    )
    return ctx.one("GatherElements", [labels, order], axis=1), count


@converts(
    "CTCLoss",
    (4,),
    inputs=(4, 5),
    attrs={
        "preprocess_collapse_repeated": Bool(default=False),
        "ctc_merge_repeated": Bool(default=True),
        "unique": Bool(default=False),
    },
)
def ctc_loss(ctx, layer, inputs):
    logits, logit_length, labels, label_length = inputs[:4]
    shape = ctx.shape(logits)
    label_shape = ctx.shape(labels)
    if (
        shape is None
        or len(shape) != 3
        or None in shape[1:]
        or label_shape is None
        or label_shape[1] is None
    ):
        raise B2SError(
            f"{layer.where()}: logits [batch, time, classes] and labels need static time, "
            "class and label sizes"
        )
    steps, classes, width = shape[1], shape[2], label_shape[1]
    dtype = np.dtype(NUMPY_OF_ONNX[ctx.type_of(logits)])
    space = _LogSpace(ctx, dtype)
    log_probs = ctx.one("LogSoftmax", [logits], axis=2)
    blank = ctx.int64(inputs[4]) if len(inputs) > 4 else int64s(ctx, "blank", classes - 1)
    blank = ctx.one("Reshape", [blank, int64s(ctx, "scalar", [])])
    target = ctx.int64(labels)
    lengths = ctx.one("Unsqueeze", [ctx.int64(label_length), int64s(ctx, "col", [1])])
    positions = int64s(ctx, "positions", np.arange(width))
    valid = ctx.one("Less", [positions, lengths])
    count = ctx.one("Squeeze", [lengths, int64s(ctx, "col", [1])])
    if layer.attrs["preprocess_collapse_repeated"]:
        previous = ctx.one(
            "Concat",
            [
                ctx.one(
                    "Slice",
                    [target, int64s(ctx, "s", [0]), int64s(ctx, "e", [1]), int64s(ctx, "a", [1])],
                ),
                ctx.one(
                    "Slice",
                    [
                        target,
                        int64s(ctx, "s", [0]),
                        int64s(ctx, "e", [width - 1]),
                        int64s(ctx, "a", [1]),
                    ],
                ),
            ],
            axis=1,
        )
        first = ctx.const("first", (np.arange(width) == 0)[None, :])
        changed = ctx.one(
            "Or",
            [
                ctx.one("Not", [ctx.one("Equal", [target, previous])]),
                first,
            ],
        )
        target, count = _compact(ctx, target, ctx.one("And", [valid, changed]), width)
        valid = ctx.one("Less", [positions, ctx.one("Unsqueeze", [count, int64s(ctx, "col", [1])])])
    if layer.attrs["unique"]:
        same = ctx.one(
            "Equal",
            [
                ctx.one("Unsqueeze", [target, int64s(ctx, "i", [2])]),
                ctx.one("Unsqueeze", [target, int64s(ctx, "j", [1])]),
            ],
        )
        earlier = ctx.const("earlier", np.tril(np.ones((width, width), bool), -1))
        valid_earlier = ctx.one("Unsqueeze", [valid, int64s(ctx, "i", [1])])
        seen = ctx.one("And", [ctx.one("And", [same, earlier]), valid_earlier])
        repeated = ctx.one(
            "Cast",
            [
                ctx.reduce(
                    "ReduceMax", ctx.one("Cast", [seen], to=TensorProto.INT32), [2], keepdims=False
                )
            ],
            to=TensorProto.BOOL,
        )
        target, count = _compact(
            ctx, target, ctx.one("And", [valid, ctx.one("Not", [repeated])]), width
        )
    frames = ctx.one("Unsqueeze", [ctx.int64(logit_length), int64s(ctx, "col", [1])])
    if layer.attrs["ctc_merge_repeated"]:
        total = _merged_paths(ctx, space, log_probs, target, blank, frames, count, steps, width)
    else:
        total = _unmerged_paths(ctx, space, log_probs, target, blank, frames, count, steps, width)
    ctx.one("Neg", [total], ctx.out(layer))


def _at_step(ctx: ConversionContext, log_probs: str, t: int) -> str:
    return ctx.one("Gather", [log_probs, int64s(ctx, "t", t)], axis=1)  # [N, C]


def _merged_paths(ctx, space, log_probs, target, blank, frames, count, steps, width) -> str:
    """Standard CTC over the target with blanks around every label (2L + 1 states); a state
    may skip the blank before it when its label differs from the one two states back."""
    states = 2 * width + 1
    batch = ctx.one(
        "Slice", [ctx.one("Shape", [target]), int64s(ctx, "s", [0]), int64s(ctx, "e", [1])]
    )
    blanks = ctx.one(
        "Expand",
        [
            blank,
            ctx.one("Concat", [batch, int64s(ctx, "w", [width]), int64s(ctx, "one", [1])], axis=0),
        ],
    )
    pairs = ctx.one(
        "Concat", [blanks, ctx.one("Unsqueeze", [target, int64s(ctx, "last", [2])])], axis=2
    )
    extended = ctx.one(
        "Reshape", [pairs, ctx.one("Concat", [batch, int64s(ctx, "w2", [2 * width])], axis=0)]
    )
    closing = ctx.one(
        "Expand", [blank, ctx.one("Concat", [batch, int64s(ctx, "one", [1])], axis=0)]
    )
    extended = ctx.one("Concat", [extended, closing], axis=1)
    two_back = ctx.one(
        "Concat",
        [
            ctx.one("Expand", [blank, ctx.one("Concat", [batch, int64s(ctx, "two", [2])], axis=0)]),
            ctx.one(
                "Slice",
                [
                    extended,
                    int64s(ctx, "s", [0]),
                    int64s(ctx, "e", [states - 2]),
                    int64s(ctx, "a", [1]),
                ],
            ),
        ],
        axis=1,
    )
    skip = ctx.one(
        "And",
        [
            ctx.one("Not", [ctx.one("Equal", [extended, blank])]),
            ctx.one("Not", [ctx.one("Equal", [extended, two_back])]),
        ],
    )
    start = np.full(states, -np.inf)
    start[:2] = 0
    alpha = ctx.one(
        "Add",
        [
            ctx.one("GatherElements", [_at_step(ctx, log_probs, 0), extended], axis=1),
            ctx.const("start", start.astype(space.dtype)),
        ],
    )
    for t in range(1, steps):
        emit = ctx.one("GatherElements", [_at_step(ctx, log_probs, t), extended], axis=1)
        jump = ctx.one("Where", [skip, space.shifted(alpha, 2, states), space.minus_inf])
        updated = ctx.one("Add", [space.add(alpha, space.shifted(alpha, 1, states), jump), emit])
        alpha = ctx.one("Where", [ctx.one("Less", [int64s(ctx, "t", t), frames]), updated, alpha])
    last = ctx.one(
        "Unsqueeze", [ctx.one("Mul", [count, int64s(ctx, "two", 2)]), int64s(ctx, "col", [1])]
    )
    final = ctx.one("GatherElements", [alpha, last], axis=1)
    before = ctx.one(
        "GatherElements",
        [
            alpha,
            ctx.one("Max", [ctx.one("Sub", [last, int64s(ctx, "one", 1)]), int64s(ctx, "zero", 0)]),
        ],
        axis=1,
    )
    before = ctx.one(
        "Where", [ctx.one("Greater", [last, int64s(ctx, "zero", 0)]), before, space.minus_inf]
    )
    return ctx.one("Squeeze", [space.add(final, before), int64s(ctx, "col", [1])])


def _unmerged_paths(ctx, space, log_probs, target, blank, frames, count, steps, width) -> str:
    """Without merging, a path's labels are its non-blank frames: state s counts the labels
    emitted so far, and each frame either is blank or emits the next label."""
    states = width + 1
    batch = ctx.one(
        "Slice", [ctx.one("Shape", [target]), int64s(ctx, "s", [0]), int64s(ctx, "e", [1])]
    )
    blank_column = ctx.one(
        "Expand", [blank, ctx.one("Concat", [batch, int64s(ctx, "one", [1])], axis=0)]
    )
    start = np.full(states, -np.inf)
    start[0] = 0
    alpha = ctx.const("start", start.astype(space.dtype))
    alpha = ctx.one(
        "Expand", [alpha, ctx.one("Concat", [batch, int64s(ctx, "states", [states])], axis=0)]
    )
    for t in range(steps):
        probs = _at_step(ctx, log_probs, t)
        stay = ctx.one("Add", [alpha, ctx.one("GatherElements", [probs, blank_column], axis=1)])
        emit = ctx.one("GatherElements", [probs, target], axis=1)  # [N, L]
        advance = ctx.one(
            "Concat",
            [
                ctx.one(
                    "Expand",
                    [space.minus_inf, ctx.one("Concat", [batch, int64s(ctx, "one", [1])], axis=0)],
                ),
                ctx.one(
                    "Add",
                    [
                        ctx.one(
                            "Slice",
                            [
                                alpha,
                                int64s(ctx, "s", [0]),
                                int64s(ctx, "e", [width]),
                                int64s(ctx, "a", [1]),
                            ],
                        ),
                        emit,
                    ],
                ),
            ],
            axis=1,
        )
        updated = space.add(stay, advance)
        alpha = ctx.one("Where", [ctx.one("Less", [int64s(ctx, "t", t), frames]), updated, alpha])
    final = ctx.one(
        "GatherElements", [alpha, ctx.one("Unsqueeze", [count, int64s(ctx, "col", [1])])], axis=1
    )
    return ctx.one("Squeeze", [final, int64s(ctx, "col", [1])])
