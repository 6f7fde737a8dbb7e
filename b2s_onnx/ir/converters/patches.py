"""Col2Im: sliding-window columns summed back into an image."""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Ints

_PAIR = {"minimum": 0, "length": 2}


def _positions(
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    padded: list[int],
) -> tuple[np.ndarray, int]:
    """The flat position in the padded image of every (kernel row, kernel column, block)
    column entry, in the order Col2Im's input holds them; and the block count."""
    blocks = [(padded[d] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1 for d in (0, 1)]
    ki, kj, bi, bj = np.meshgrid(
        np.arange(kernel[0]),
        np.arange(kernel[1]),
        np.arange(blocks[0]),
        np.arange(blocks[1]),
        indexing="ij",
    )
    rows = bi * strides[0] + ki * dilations[0]
    columns = bj * strides[1] + kj * dilations[1]
    return (rows * padded[1] + columns).reshape(-1).astype(np.int64), blocks[0] * blocks[1]


@converts(
    "Col2Im",
    (15,),
    inputs=(3, 3),
    attrs={
        "strides": Ints(default=[1, 1], minimum=1, length=2),
        "dilations": Ints(default=[1, 1], minimum=1, length=2),
        "pads_begin": Ints(default=[0, 0], **_PAIR),
        "pads_end": Ints(default=[0, 0], **_PAIR),
    },
)
def col2im(ctx, layer, inputs):
    """Every column entry is added (ScatterElements 'add') at its position in the padded
    image, which is then cropped; output and kernel sizes must be constants."""
    data, size_input, kernel_input = inputs
    if ctx.opset < 16:
        raise B2SError(
            f"{layer.where()}: needs ONNX opset 16 or later (converting to opset {ctx.opset})"
        )
    size = [
        int(v) for v in ctx.require_value(layer, size_input, "the output_size input").reshape(-1)
    ]
    kernel = [
        int(v) for v in ctx.require_value(layer, kernel_input, "the kernel_size input").reshape(-1)
    ]
    attrs = layer.attrs
    padded = [size[d] + attrs["pads_begin"][d] + attrs["pads_end"][d] for d in (0, 1)]
    positions, blocks = _positions(kernel, attrs["strides"], attrs["dilations"], padded)
    shape = ctx.shape(data)
    batched = shape is not None and len(shape) == 3
    if shape is None or shape[-1] is None or shape[-2] is None:
        raise B2SError(f"{layer.where()}: the shape of input 'data' must be static")
    if shape[-1] != blocks or shape[-2] % (kernel[0] * kernel[1]):
        raise B2SError(
            f"{layer.where()}: input 'data' {list(shape)} does not fit kernel {kernel} and "
            f"{blocks} blocks"
        )
    channels = shape[-2] // (kernel[0] * kernel[1])
    columns = data if batched else ctx.one("Unsqueeze", [data, ctx.const("batch", np.asarray([0]))])
    columns = ctx.one("Reshape", [columns, ctx.const("grouped", np.asarray([0, channels, -1]))])
    target = ctx.one("Expand", [ctx.const("positions", positions), ctx.one("Shape", [columns])])
    canvas_shape = ctx.one(
        "Concat",
        [
            ctx.one(
                "Slice",
                [
                    ctx.one("Shape", [columns]),
                    ctx.const("s", np.asarray([0])),
                    ctx.const("e", np.asarray([2])),
                ],
            ),
            ctx.const("area", np.asarray([padded[0] * padded[1]])),
        ],
        axis=0,
    )
    dtype = NUMPY_OF_ONNX[ctx.type_of(data)]
    canvas = ctx.one("Expand", [ctx.const("zero", np.zeros((), dtype)), canvas_shape])
    summed = ctx.one("ScatterElements", [canvas, target, columns], axis=2, reduction="add")
    image = ctx.one("Reshape", [summed, ctx.const("image", np.asarray([0, channels, *padded]))])
    cropped = ctx.one(
        "Slice",
        [
            image,
            ctx.const("top", np.asarray(attrs["pads_begin"])),
            ctx.const("bottom", np.asarray([attrs["pads_begin"][d] + size[d] for d in (0, 1)])),
            ctx.const("axes", np.asarray([2, 3])),
        ],
    )
    if batched:
        ctx.one("Identity", [cropped], ctx.out(layer))
    else:
        ctx.one("Squeeze", [cropped, ctx.const("batch", np.asarray([0]))], ctx.out(layer))
