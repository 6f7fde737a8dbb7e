"""Greedy CTC decoding (CTCGreedyDecoder-1, CTCGreedyDecoderSeqLen-6) composed from ONNX ops.

ONNX has no CTC decoder, but greedy decoding is a per-step ArgMax followed by a filter
(drop blanks, and repeats when merging) and a left-aligned compaction, which is a
ScatterElements to each kept class's running count. Dropped steps are scattered to one
spare column past the end, which is then cut off, so the output stays [N, T] padded with -1.
"""

from __future__ import annotations

from onnx import TensorProto

from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, ElementType
from b2s_onnx.ir.reader import Layer

_INDEX = ("i32", "i64")


def _greedy(
    ctx: ConversionContext, data: str, valid: str | None, blank: str, merge: bool
) -> tuple[str, str]:
    """Decodes batch-major ``data`` [N, T, C] at the steps where ``valid`` [N, T] holds;
    returns the decoded classes [N, T] (int64, -1 after the end) and their counts [N]."""
    best = ctx.one("ArgMax", [data], axis=2, keepdims=0)
    steps = ctx.one("Gather", [ctx.one("Shape", [data]), _i64(ctx, "t", [1])])
    keep = ctx.one("Not", [ctx.one("Equal", [best, blank])])
    if valid is not None:
        keep = ctx.one("And", [keep, valid])
    if merge:  # a class equal to the previous step's (blank or not) is a repeat
        shifted = ctx.one(
            "Pad",
            [best, _i64(ctx, "pads", [0, 1, 0, 0]), _i64(ctx, "none", -1)],
            mode="constant",
        )
        previous = ctx.one("Slice", [shifted, _i64(ctx, "0", [0]), steps, _i64(ctx, "ax1", [1])])
        keep = ctx.one("And", [keep, ctx.one("Not", [ctx.one("Equal", [best, previous])])])
    kept = ctx.one("Cast", [keep], to=TensorProto.INT64)
    position = ctx.one(
        "Sub", [ctx.one("CumSum", [kept, _i64(ctx, "axis", 1)]), _i64(ctx, "one", 1)]
    )
    target = ctx.one("Where", [keep, position, ctx.one("Squeeze", [steps])])
    spare = ctx.one("Add", [steps, _i64(ctx, "one", [1])])
    padded_shape = ctx.one(
        "Concat",
        [
            ctx.one("Slice", [ctx.one("Shape", [data]), _i64(ctx, "0", [0]), _i64(ctx, "1", [1])]),
            spare,
        ],
        axis=0,
    )
    blank_rows = ctx.one("Expand", [_i64(ctx, "fill", [-1]), padded_shape])
    updates = ctx.one("Where", [keep, best, _i64(ctx, "fill", -1)])
    scattered = ctx.one("ScatterElements", [blank_rows, target, updates], axis=1)
    decoded = ctx.one("Slice", [scattered, _i64(ctx, "0", [0]), steps, _i64(ctx, "ax1", [1])])
    return decoded, ctx.reduce("ReduceSum", kept, [1], keepdims=False)


def _cast_to(ctx: ConversionContext, tensor: str, output: str) -> None:
    wanted = ctx.type_of(output)
    if wanted == TensorProto.INT64:
        ctx.one("Identity", [tensor], output)
    else:
        ctx.one("Cast", [tensor], output, to=wanted)


@converts(
    "CTCGreedyDecoder",
    (1,),
    inputs=(2, 2),
    attrs={"ctc_merge_repeated": Bool(default=True)},
)
def ctc_greedy_decoder(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """[T, N, C] logits and a [T, N] mask (a sequence ends at its first 0) -> [N, T, 1, 1]
    float classes; the blank is the last class."""
    data = ctx.one("Transpose", [inputs[0]], perm=[1, 0, 2])
    present = ctx.one("Cast", [inputs[1]], to=TensorProto.BOOL)
    ended = ctx.one("Cast", [ctx.one("Not", [present])], to=TensorProto.INT64)
    running = ctx.one("Transpose", [ctx.one("CumSum", [ended, _i64(ctx, "axis", 0)])], perm=[1, 0])
    valid = ctx.one("Equal", [running, _i64(ctx, "zero", 0)])
    classes = ctx.one("Gather", [ctx.one("Shape", [data]), _i64(ctx, "c", 2)])
    blank = ctx.one("Sub", [classes, _i64(ctx, "one", 1)])
    decoded, _ = _greedy(ctx, data, valid, blank, layer.attrs["ctc_merge_repeated"])
    as_float = ctx.one("Cast", [decoded], to=ctx.type_of(ctx.out(layer)))
    ctx.one("Unsqueeze", [as_float, _i64(ctx, "axes", [2, 3])], ctx.out(layer))


@converts(
    "CTCGreedyDecoderSeqLen",
    (6,),
    inputs=(2, 3),
    attrs={
        "merge_repeated": Bool(default=True),
        "classes_index_type": ElementType(allowed=_INDEX, default="i32"),
        "sequence_length_type": ElementType(allowed=_INDEX, default="i32"),
    },
)
def ctc_greedy_decoder_seq_len(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """[N, T, C] logits, [N] lengths and an optional blank index (default C - 1) ->
    [N, T] classes padded with -1 and [N] decoded lengths."""
    data = inputs[0]
    lengths = ctx.one("Unsqueeze", [ctx.int64(inputs[1]), _i64(ctx, "ax1", [1])])
    steps = ctx.one("Gather", [ctx.one("Shape", [data]), _i64(ctx, "t", 1)])
    time = ctx.one("Range", [_i64(ctx, "start", 0), steps, _i64(ctx, "step", 1)])
    valid = ctx.one("Less", [time, lengths])
    if len(inputs) > 2:
        blank = ctx.one("Reshape", [ctx.int64(inputs[2]), _i64(ctx, "scalar", [])])
    else:
        classes = ctx.one("Gather", [ctx.one("Shape", [data]), _i64(ctx, "c", 2)])
        blank = ctx.one("Sub", [classes, _i64(ctx, "one", 1)])
    decoded, counts = _greedy(ctx, data, valid, blank, layer.attrs["merge_repeated"])
    _cast_to(ctx, decoded, ctx.out(layer, 0))
    _cast_to(ctx, counts, ctx.out(layer, 1))
