"""Convolutions (plain, grouped, transposed), pooling and MatMul."""

from __future__ import annotations

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters._attrs import choice, flag, ints
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.reader import Layer

_AUTO_PAD = {"same_upper": "SAME_UPPER", "same_lower": "SAME_LOWER", "valid": "VALID"}


def _padding(layer: Layer, spatial: int) -> dict:
    """ONNX padding attributes from OpenVINO's auto_pad / pads_begin / pads_end."""
    auto_pad = layer.data.get("auto_pad", "explicit").strip().lower() or "explicit"
    if auto_pad in _AUTO_PAD:
        return {"auto_pad": _AUTO_PAD[auto_pad]}
    if auto_pad not in ("explicit", "notset"):
        raise B2SError(f"{layer.where()}: auto_pad='{auto_pad}' is not supported")
    begin = ints(layer, "pads_begin", "0," * spatial)
    end = ints(layer, "pads_end", "0," * spatial)
    if len(begin) != spatial or len(end) != spatial:
        raise B2SError(f"{layer.where()}: pads_begin/pads_end need {spatial} values")
    return {"pads": begin + end}


def _spatial(ctx: ConversionContext, layer: Layer, data: str) -> int:
    return ctx.rank(layer, data) - 2


def _grouped_weights(
    ctx: ConversionContext, layer: Layer, weights: str, transposed: bool
) -> tuple[str, int]:
    """[G, A, B, k...] -> [G*A, B, k...]: ONNX's grouped layout for Conv and ConvTranspose."""
    shape = ctx.shape(weights)
    if shape is None or any(d is None for d in shape[:3]):
        raise B2SError(f"{layer.where()}: grouped weights need a static [G, ...] shape")
    groups = shape[0]
    target = [shape[0] * shape[1], shape[2], *(-1 if d is None else d for d in shape[3:])]
    value = ctx.value(weights)
    if value is not None:
        return ctx.const("weights", value.reshape(target)), groups
    return ctx.one(
        "Reshape", [weights, ctx.const("weights_shape", np.asarray(target, np.int64))]
    ), groups


@converts("Convolution", (1,))
def convolution(ctx, layer, inputs):
    spatial = _spatial(ctx, layer, inputs[0])
    ctx.one(
        "Conv",
        inputs[:2],
        ctx.out(layer),
        strides=ints(layer, "strides"),
        dilations=ints(layer, "dilations"),
        **_padding(layer, spatial),
    )


@converts("GroupConvolution", (1,))
def group_convolution(ctx, layer, inputs):
    spatial = _spatial(ctx, layer, inputs[0])
    weights, groups = _grouped_weights(ctx, layer, inputs[1], transposed=False)
    ctx.one(
        "Conv",
        [inputs[0], weights],
        ctx.out(layer),
        group=groups,
        strides=ints(layer, "strides"),
        dilations=ints(layer, "dilations"),
        **_padding(layer, spatial),
    )


def _transposed(ctx, layer, inputs, weights, groups):
    spatial = _spatial(ctx, layer, inputs[0])
    strides, dilations = ints(layer, "strides"), ints(layer, "dilations")
    attrs = {"strides": strides, "dilations": dilations, "group": groups}
    output_padding = ints(layer, "output_padding", "") or [0] * spatial
    if len(inputs) > 2:
        attrs["pads"] = _pads_for_output_shape(
            ctx, layer, inputs, weights, strides, dilations, output_padding
        )
    else:
        attrs.update(_padding(layer, spatial))
    if any(output_padding):
        attrs["output_padding"] = output_padding
    ctx.one("ConvTranspose", [inputs[0], weights], ctx.out(layer), **attrs)


def _pads_for_output_shape(ctx, layer, inputs, weights, strides, dilations, output_padding):
    """With an output_shape input the total padding follows from the shapes; how it splits
    (measured against OpenVINO): explicit keeps pads_begin and crops the rest at the end,
    same_upper puts the larger half in front, same_lower the smaller half."""
    in_shape, w_shape = ctx.shape(inputs[0]), ctx.shape(weights)
    out_spatial = ctx.require_value(layer, inputs[2], "output_shape").reshape(-1)
    if in_shape is None or w_shape is None or any(d is None for d in [*in_shape, *w_shape]):
        raise B2SError(f"{layer.where()}: output_shape needs static input and weight shapes")
    auto_pad = layer.data.get("auto_pad", "explicit").strip().lower()
    given = ints(layer, "pads_begin", "0," * len(out_spatial))
    begins, ends = [], []
    for i, out in enumerate(out_spatial):
        total = (
            strides[i] * (in_shape[2 + i] - 1)
            + (w_shape[2 + i] - 1) * dilations[i]
            + 1
            + output_padding[i]
            - int(out)
        )
        if auto_pad == "same_upper":
            front = total - total // 2
        elif auto_pad == "same_lower":
            front = total // 2
        else:
            front = given[i]
        begins.append(front)
        ends.append(total - front)
    return begins + ends


@converts("ConvolutionBackpropData", (1,))
def convolution_backprop_data(ctx, layer, inputs):
    _transposed(ctx, layer, inputs, inputs[1], 1)


@converts("GroupConvolutionBackpropData", (1,))
def group_convolution_backprop_data(ctx, layer, inputs):
    weights, groups = _grouped_weights(ctx, layer, inputs[1], transposed=True)
    _transposed(ctx, layer, inputs, weights, groups)


def _pool_attrs(ctx, layer, data) -> dict:
    spatial = _spatial(ctx, layer, data)
    rounding = choice(layer, "rounding_type", ("floor", "ceil", "ceil_torch"), "floor")
    if rounding == "ceil_torch":
        raise B2SError(f"{layer.where()}: rounding_type='ceil_torch' is not supported")
    attrs = {
        "kernel_shape": ints(layer, "kernel"),
        "strides": ints(layer, "strides"),
        **_padding(layer, spatial),
    }
    if rounding == "ceil":
        attrs["ceil_mode"] = 1
    return attrs


@converts("MatMul", (1,))
def matmul(ctx, layer, inputs):
    operands = []
    for tensor, key in zip(inputs, ("transpose_a", "transpose_b"), strict=True):
        rank = ctx.rank(layer, tensor)
        if flag(layer, key, False) and rank >= 2:
            perm = [*range(rank - 2), rank - 1, rank - 2]
            value = ctx.value(tensor)
            tensor = (
                ctx.const("transposed", np.transpose(value, perm))
                if value is not None
                else ctx.one("Transpose", [tensor], perm=perm)
            )
        operands.append(tensor)
    ctx.one("MatMul", operands, ctx.out(layer))
