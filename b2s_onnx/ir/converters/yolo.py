"""YOLO heads: RegionYolo-1 (activations of the region layer) and ReorgYolo-1 (darknet's
space-to-depth, written as opset2).

RegionYolo views the channels as [regions, coords + 1 + classes] and activates each part
(sigmoid on x, y and the confidence, softmax or sigmoid on the classes); ReorgYolo is a
pure permutation, so it is a Reshape/Transpose/Reshape and bit-exact.
"""

from __future__ import annotations

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._constants import int64s as _i64
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Bool, Floats, Int, Ints
from b2s_onnx.ir.reader import Layer


@converts(
    "RegionYolo",
    (1,),
    inputs=(1, 1),
    attrs={
        "coords": Int(required=True, minimum=0),
        "classes": Int(required=True, minimum=0),
        "num": Int(required=True, minimum=1),
        "do_softmax": Bool(required=True),
        "mask": Ints(default=[]),
        "axis": Int(required=True),
        "end_axis": Int(required=True),
        "anchors": Floats(default=[]),
    },
)
def region_yolo(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    attrs = layer.attrs
    data = inputs[0]
    rank = ctx.rank(layer, data)
    if rank != 4:
        raise B2SError(f"{layer.where()}: input 'data' must be 4-D [N, C, H, W], got rank {rank}")
    softmax = attrs["do_softmax"]
    regions = attrs["num"] if softmax else len(attrs["mask"])
    if regions == 0:
        raise B2SError(f"{layer.where()}: attribute mask='': needs one value per region")
    coords, entry = attrs["coords"], attrs["coords"] + 1 + attrs["classes"]
    if coords < 2:
        raise B2SError(f"{layer.where()}: attribute coords='{coords}': values must be >= 2")
    channels = ctx.shape(data)[1]
    if channels is not None and channels < regions * entry:
        raise B2SError(
            f"{layer.where()}: input 'data' has {channels} channels, fewer than "
            f"{regions} regions x (coords + 1 + classes = {entry})"
        )
    shape = ctx.one("Shape", [data])
    used = ctx.one(
        "Slice", [data, _i64(ctx, "b", [0]), _i64(ctx, "e", [regions * entry]), _i64(ctx, "a", [1])]
    )
    grid = ctx.one("Reshape", [used, _i64(ctx, "grid", [0, regions, entry, -1])])

    def part(begin: int, end: int) -> str:
        return ctx.one(
            "Slice", [grid, _i64(ctx, "b", [begin]), _i64(ctx, "e", [end]), _i64(ctx, "a", [2])]
        )

    pieces = [ctx.one("Sigmoid", [part(0, 2)])]
    if coords > 2:
        pieces.append(part(2, coords))
    pieces.append(ctx.one("Sigmoid", [part(coords, coords + 1)]))
    if attrs["classes"] > 0:
        classes = part(coords + 1, entry)
        pieces.append(
            ctx.one("Softmax", [classes], axis=2) if softmax else ctx.one("Sigmoid", [classes])
        )
    activated = ctx.one("Concat", pieces, axis=2)
    if regions * entry != channels:  # channels past the regions are copied as they are
        rest = ctx.one(
            "Slice",
            [data, _i64(ctx, "b", [regions * entry]), _i64(ctx, "e", [2**62]), _i64(ctx, "a", [1])],
        )
        used_shape = ctx.one("Shape", [used])
        activated = ctx.one("Concat", [ctx.one("Reshape", [activated, used_shape]), rest], axis=1)
    if softmax:  # the output flattens axes axis..end_axis
        first, last = attrs["axis"] % rank, attrs["end_axis"] % rank
        if first > last:
            raise B2SError(
                f"{layer.where()}: attribute axis='{attrs['axis']}' is after "
                f"end_axis='{attrs['end_axis']}'"
            )
        target = ctx.one(
            "Concat",
            [
                ctx.one("Slice", [shape, _i64(ctx, "b", [0]), _i64(ctx, "e", [first])]),
                _i64(ctx, "flat", [-1]),
                ctx.one("Slice", [shape, _i64(ctx, "b", [last + 1]), _i64(ctx, "e", [rank])]),
            ],
            axis=0,
        )
    else:
        target = shape
    ctx.one("Reshape", [activated, target], ctx.out(layer))


@converts("ReorgYolo", (1, 2), inputs=(1, 1), attrs={"stride": Ints(required=True, minimum=1)})
def reorg_yolo(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    """out viewed as [N, C, H, W] at (n, (oy * s + ox) * C / s^2 + c, h, w) is the input
    viewed as [N, C / s^2, H * s, W * s] at (n, c, h * s + oy, w * s + ox)."""
    strides = layer.attrs["stride"]
    if not strides or len(set(strides)) != 1:
        shown = ",".join(map(str, strides))
        raise B2SError(
            f"{layer.where()}: attribute stride='{shown}': needs one value (or equal values)"
        )
    step = strides[0]
    data = inputs[0]
    shape = ctx.shape(data)
    if shape is None or len(shape) != 4:
        raise B2SError(f"{layer.where()}: input 'data' must be 4-D [N, C, H, W]")
    channels = shape[1]
    if channels is None:
        raise B2SError(f"{layer.where()}: the channel count of input 'data' must be static")
    if channels % (step * step):
        raise B2SError(
            f"{layer.where()}: attribute stride='{step}': {channels} channels are not "
            f"divisible by stride^2 = {step * step}"
        )
    for axis, name in ((2, "height"), (3, "width")):
        if shape[axis] is not None and shape[axis] % step:
            raise B2SError(
                f"{layer.where()}: attribute stride='{step}': the {name} {shape[axis]} is "
                "not divisible by it"
            )
    runtime = ctx.one("Shape", [data])
    spatial = ctx.one("Slice", [runtime, _i64(ctx, "b", [2]), _i64(ctx, "e", [4])])
    height, width = (
        ctx.one("Slice", [spatial, _i64(ctx, "b", [i]), _i64(ctx, "e", [i + 1])]) for i in (0, 1)
    )
    inner = channels // (step * step)
    s = _i64(ctx, "s", [step])
    blocks = ctx.one("Concat", [_i64(ctx, "nc", [0, inner]), height, s, width, s], axis=0)
    view = ctx.one("Reshape", [data, blocks])  # [N, C/s^2, H, s, W, s]
    moved = ctx.one("Transpose", [view], perm=[0, 3, 5, 1, 2, 4])
    target = ctx.one(
        "Concat",
        [
            _i64(ctx, "nc", [0, channels * step * step]),
            ctx.one("Div", [spatial, _i64(ctx, "ss", [step, step])]),
        ],
        axis=0,
    )
    ctx.one("Reshape", [moved, target], ctx.out(layer))
