"""The four data-movement layers become custom-domain nodes; the lowering registry (the
same one ``b2s_onnx.lower`` runs) replaces them with standard ONNX afterwards."""

from __future__ import annotations

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice, Int

#: DepthToSpace-1 and SpaceToDepth-1: the lowering rules check the rest against the data.
DEPTH_SPACE = {
    "block_size": Int(default=1, minimum=1),
    "mode": Choice(required=True, allowed=("blocks_first", "depth_first")),
}


@converts("BatchToSpace", (2,), inputs=(4, 4), attrs={})
@converts("SpaceToBatch", (2,), inputs=(4, 4), attrs={})
def batch_space(ctx, layer, inputs):
    ctx.one(
        layer.type,
        [inputs[0], *(ctx.int64(t) for t in inputs[1:])],
        ctx.out(layer),
        domain=DEFAULT_DOMAIN,
    )


@converts("DepthToSpace", (1,), inputs=(1, 1), attrs=DEPTH_SPACE)
@converts("SpaceToDepth", (1,), inputs=(1, 1), attrs=DEPTH_SPACE)
def depth_space(ctx, layer, inputs):
    ctx.one(
        layer.type,
        inputs,
        ctx.out(layer),
        domain=DEFAULT_DOMAIN,
        block_size=layer.attrs["block_size"],
        mode=layer.attrs["mode"],
    )
