"""The four data-movement layers become custom-domain nodes; the lowering registry (the
same one ``b2s_onnx.lower`` runs) replaces them with standard ONNX afterwards."""

from __future__ import annotations

from b2s_onnx.builders import DEFAULT_DOMAIN
from b2s_onnx.ir.converters._attrs import choice, integer
from b2s_onnx.ir.converters.registry import converts


@converts("BatchToSpace", (2,))
@converts("SpaceToBatch", (2,))
def batch_space(ctx, layer, inputs):
    ctx.one(
        layer.type,
        [inputs[0], *(ctx.int64(t) for t in inputs[1:])],
        ctx.out(layer),
        domain=DEFAULT_DOMAIN,
    )


@converts("DepthToSpace", (1,))
@converts("SpaceToDepth", (1,))
def depth_space(ctx, layer, inputs):
    ctx.one(
        layer.type,
        inputs,
        ctx.out(layer),
        domain=DEFAULT_DOMAIN,
        block_size=integer(layer, "block_size", 1),
        mode=choice(layer, "mode", ("blocks_first", "depth_first")),
    )
