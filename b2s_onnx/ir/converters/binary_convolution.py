"""BinaryConvolution-1 (mode ``xnor-popcount``): a convolution of binarized data with 1-bit
weights, as a Conv of +-1 values.

XNOR-popcount over a patch of B bits is ``2 * popcount(xnor) - B``, which is the sum of the
products of the +-1 values the bits stand for: a plain convolution of ``sign`` values. So:
data -> Where(data > 0, 1, -1) -> Pad(pad_value) -> Conv(weights as +-1, no bias). Every
sum is an integer of at most ``C * kh * kw``, exact in float32; OpenVINO's CPU plugin agrees
bit for bit (tests). Measured against that plugin (the reference the IRs are written for):

- a data value counts as 1 when it is above 0 (0, -0 and NaN count as -1);
- the padded border contributes ``pad_value`` times the weight (not binarized: 0 adds
  nothing);
- 1-bit weights (``u1`` constants) are read least significant bit first within each byte
  of the flat [C_out, C_in, kh, kw] bits, where OpenVINO's own Convert of a ``u1`` constant
  (and this converter's weight reader) reads most significant bit first. With input channel
  counts that are not a multiple of 8 the plugin's layout is something else again (flipping
  one stored bit changed several output channels), so those are refused with the reason;
  binary networks (resnet50-binary) binarize layers of 64 to 2048 channels.

Weights given as numbers (0/1 in any type) need no bit order.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx.helper import tensor_dtype_to_np_dtype

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import ConversionContext
from b2s_onnx.ir.converters.convolution import CONVOLUTION, _spatial_lists, same_pads
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import Choice, Float
from b2s_onnx.ir.reader import Layer

#: Convolution-1's attributes, and the mode and the border's value.
BINARY_CONVOLUTION = {
    **CONVOLUTION,
    "mode": Choice(allowed=("xnor-popcount",), required=True),
    "pad_value": Float(required=True),
}
#: The input channel counts whose 1-bit weight layout in OpenVINO's CPU plugin is known.
BIT_GROUP = 8


@converts("BinaryConvolution", (1,), inputs=(2, 2), attrs=BINARY_CONVOLUTION)
def binary_convolution(ctx: ConversionContext, layer: Layer, inputs: list[str]) -> None:
    data, kernel = inputs
    rank = ctx.rank(layer, data)
    if rank != 4:
        raise B2SError(f"{layer.where()}: input 0 has rank {rank}; BinaryConvolution is 2-D")
    bits = _weight_bits(ctx, layer, kernel)
    shape = ctx.shape(data)
    if shape is not None and shape[1] is not None and shape[1] != bits.shape[1]:
        raise B2SError(
            f"{layer.where()}: input 0 has {shape[1]} channels but input 1 (kernel) is for "
            f"{bits.shape[1]}"
        )
    strides, dilations = _spatial_lists(layer, 2, "strides", "dilations")
    signs = ctx.one(
        "Where",
        [
            ctx.one("Greater", [data, ctx.const("zero", np.zeros((), _numpy(ctx, data)))]),
            ctx.const("plus_one", np.ones((), np.float32)),
            ctx.const("minus_one", -np.ones((), np.float32)),
        ],
    )
    padded = _padded(ctx, layer, data, signs, bits.shape[2:], strides, dilations)
    weights = ctx.const("weights", np.where(bits > 0, 1.0, -1.0).astype(np.float32))
    out_type = ctx.type_of(ctx.out(layer)) or TensorProto.FLOAT
    # Sums of +-1 (and pad_value) terms: exact in float32, and in float16 up to 2048.
    target = ctx.out(layer) if out_type == TensorProto.FLOAT else None
    summed = ctx.one("Conv", [padded, weights], target, strides=strides, dilations=dilations)
    if target is None:
        ctx.one("Cast", [summed], ctx.out(layer), to=out_type)


def _numpy(ctx: ConversionContext, tensor: str) -> np.dtype:
    return tensor_dtype_to_np_dtype(ctx.type_of(tensor) or TensorProto.FLOAT)


def _weight_bits(ctx: ConversionContext, layer: Layer, kernel: str) -> np.ndarray:
    """The kernel as 0/1 values [C_out, C_in, kh, kw], in the order OpenVINO's CPU plugin
    reads them."""
    value = ctx.require_value(layer, kernel, "the kernel")
    if value.ndim != 4:
        raise B2SError(f"{layer.where()}: input 1 (kernel) has rank {value.ndim}; needs 4")
    if _source_element_type(ctx, layer) != "u1":
        return (np.asarray(value) != 0).astype(np.uint8)
    channels = value.shape[1]
    if channels % BIT_GROUP:
        raise B2SError(
            f"{layer.where()}: input 1 (kernel) holds 1-bit weights for {channels} input "
            f"channels; OpenVINO's CPU plugin reads such weights in a layout known only for "
            f"channel counts that are multiples of {BIT_GROUP}"
        )
    # The reader unpacked each byte most significant bit first; the plugin reads it least
    # significant bit first: reverse the bits within each byte of the flat array.
    flat = np.asarray(value, np.uint8).reshape(-1, BIT_GROUP)[:, ::-1]
    return np.ascontiguousarray(flat).reshape(value.shape)


def _source_element_type(ctx: ConversionContext, layer: Layer) -> str | None:
    """The element type of the Const layer feeding input 1, if a Const feeds it."""
    source_id, _ = ctx.model.sources[(layer.id, layer.inputs[1].id)]
    source = ctx.model.layers.get(source_id)
    if source is None or source.type.lower() != "const":
        return None
    return (source.data.get("element_type") or "").strip().lower() or None


def _padded(ctx, layer, data: str, signs: str, kernel, strides, dilations) -> str:
    """``signs`` (the binarized ``data``) padded with ``pad_value`` as OpenVINO pads (explicit
    or auto_pad)."""
    begin, end = _pads(ctx, layer, data, kernel, strides, dilations)
    if not any(begin) and not any(end):
        return signs
    pads = ctx.const("pads", np.asarray([0, 0, *begin, 0, 0, *end], np.int64))
    value = ctx.const("pad_value", np.asarray(layer.attrs["pad_value"], np.float32))
    return ctx.one("Pad", [signs, pads, value], mode="constant")


def _pads(ctx, layer, data, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    auto_pad = layer.attrs["auto_pad"]
    if auto_pad == "valid":
        return [0, 0], [0, 0]
    if auto_pad in ("same_upper", "same_lower"):
        shape = ctx.shape(data)
        if shape is None or any(d is None for d in shape[2:]):
            raise B2SError(
                f"{layer.where()}: auto_pad={auto_pad} needs the static height and width of input 0"
            )
        return same_pads(shape[2:], kernel, strides, dilations, upper=auto_pad == "same_upper")
    return list(layer.attrs["pads_begin"]), list(layer.attrs["pads_end"])
