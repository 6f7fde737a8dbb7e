"""Convolutions (plain, grouped, transposed), pooling and MatMul."""

from __future__ import annotations

import itertools

import numpy as np

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.context import NUMPY_OF_ONNX, ConversionContext
from b2s_onnx.ir.converters._constants import INT64_MAX, int64s
from b2s_onnx.ir.converters.kernel_types import INTEGERS, cast, has_kernel, wider_type
from b2s_onnx.ir.converters.registry import converts
from b2s_onnx.ir.converters.schema import SPATIAL, Bool, Choice, ElementType, Int, Ints
from b2s_onnx.ir.quantization import note_transposed
from b2s_onnx.ir.reader import Layer

_AUTO_PAD = {"same_upper": "SAME_UPPER", "same_lower": "SAME_LOWER", "valid": "VALID"}
AUTO_PAD = Choice(
    allowed=("explicit", "notset", "same_upper", "same_lower", "valid"), default="explicit"
)
#: Convolution-1 and GroupConvolution-1 (OpenVINO spec): every attribute is required.
CONVOLUTION = {
    "strides": Ints(required=True, length=SPATIAL, minimum=1),
    "dilations": Ints(required=True, length=SPATIAL, minimum=1),
    "pads_begin": Ints(required=True, length=SPATIAL, minimum=0),
    "pads_end": Ints(required=True, length=SPATIAL, minimum=0),
    "auto_pad": AUTO_PAD,
}
#: The transposed forms: pads and output_padding default to zeros.
BACKPROP = {
    "strides": Ints(required=True, length=SPATIAL, minimum=1),
    "dilations": Ints(required=True, length=SPATIAL, minimum=1),
    "pads_begin": Ints(length=SPATIAL, minimum=0),
    "pads_end": Ints(length=SPATIAL, minimum=0),
    "auto_pad": AUTO_PAD,
    "output_padding": Ints(length=SPATIAL, minimum=0),
}
_POOL = {
    "strides": Ints(required=True, length=SPATIAL, minimum=1),
    "pads_begin": Ints(required=True, length=SPATIAL, minimum=0),
    "pads_end": Ints(required=True, length=SPATIAL, minimum=0),
    "kernel": Ints(required=True, length=SPATIAL, minimum=1),
    "auto_pad": AUTO_PAD,
}
_ROUNDING = Choice(allowed=("floor", "ceil"), default="floor")
_ROUNDING_14 = Choice(allowed=("floor", "ceil", "ceil_torch"), default="floor")
MAX_POOL_1 = {**_POOL, "rounding_type": _ROUNDING}
MAX_POOL_8 = {
    **_POOL,
    "rounding_type": _ROUNDING,
    "dilations": Ints(length=SPATIAL, minimum=1),
    "index_element_type": ElementType(allowed=("i32", "i64"), default="i64"),
    "axis": Int(default=0),
}
MAX_POOL_14 = {**MAX_POOL_8, "rounding_type": _ROUNDING_14}
AVG_POOL_1 = {**_POOL, "rounding_type": _ROUNDING, "exclude-pad": Bool(required=True)}
AVG_POOL_14 = {**AVG_POOL_1, "rounding_type": _ROUNDING_14}


def _padding(layer: Layer, spatial: int) -> dict:
    """ONNX padding attributes from OpenVINO's auto_pad / pads_begin / pads_end."""
    auto_pad = layer.attrs["auto_pad"]
    if auto_pad in _AUTO_PAD:
        return {"auto_pad": _AUTO_PAD[auto_pad]}
    begin = layer.attrs["pads_begin"] or [0] * spatial
    end = layer.attrs["pads_end"] or [0] * spatial
    if len(begin) != spatial or len(end) != spatial:
        raise B2SError(f"{layer.where()}: pads_begin/pads_end need {spatial} values")
    return {"pads": begin + end}


def _without_dilated_same(ctx, layer, data, kernel, strides, dilations, padding):
    """(data, padding attributes): onnxruntime refuses SAME auto-padding with dilations at
    run time, so those pads are computed as OpenVINO computes them, here from static
    spatial sizes, or by a Pad of the data whose amounts come from its shape at run time."""
    mode = padding.get("auto_pad")
    if mode not in ("SAME_UPPER", "SAME_LOWER") or all(d == 1 for d in dilations):
        return data, padding
    if any(k is None for k in kernel):
        raise B2SError(f"{layer.where()}: dilated {mode.lower()} padding needs a static kernel")
    shape = ctx.shape(data)
    sizes = None if shape is None else shape[2:]
    upper = mode == "SAME_UPPER"
    if sizes is not None and all(s is not None for s in sizes):
        begins, ends = same_pads(sizes, kernel, strides, dilations, upper=upper)
        return data, {"pads": begins + ends}
    return _run_time_same_pad(ctx, data, kernel, strides, dilations, upper), {
        "pads": [0] * (2 * len(kernel))
    }


def _run_time_same_pad(ctx, data, kernel, strides, dilations, upper: bool) -> str:
    """``data`` zero-padded as :func:`same_pads` would pad it, on sizes read at run time."""
    spatial = len(kernel)
    sizes = ctx.one(
        "Slice", [ctx.one("Shape", [data]), int64s(ctx, "s", [2]), int64s(ctx, "e", [2 + spatial])]
    )
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    _, begins, ends = run_time_same_geometry(ctx, sizes, strides, reach, upper=upper)
    none = int64s(ctx, "none", [0, 0])
    pads = ctx.one("Concat", [none, begins, none, ends], axis=0)
    return ctx.one("Pad", [data, pads], mode="constant")


def run_time_same_geometry(ctx, sizes: str, strides, reach, *, upper: bool):
    """:func:`same_pads` on spatial ``sizes`` read at run time (an int64 vector), with
    windows spanning ``reach`` elements: (window counts, padding before, padding after),
    each an int64 vector. Shared by convolutions and ExtractImagePatches."""
    stride = int64s(ctx, "strides", strides)
    extent = int64s(ctx, "extent", reach)
    one, zero = int64s(ctx, "one", 1), int64s(ctx, "zero", 0)
    counts = ctx.one("Div", [ctx.one("Sub", [ctx.one("Add", [sizes, stride]), one]), stride])
    needed = ctx.one("Mul", [ctx.one("Sub", [counts, one]), stride])
    total = ctx.one("Sub", [ctx.one("Add", [needed, extent]), sizes])
    total = ctx.one("Where", [ctx.one("Less", [total, zero]), zero, total])
    half = ctx.one("Div", [total, int64s(ctx, "two", 2)])
    before = half if upper else ctx.one("Sub", [total, half])
    return counts, before, ctx.one("Sub", [total, before])


def same_pads(sizes, kernel, strides, dilations, *, upper: bool) -> tuple[list[int], list[int]]:
    """OpenVINO's SAME padding of static ``sizes`` (one per spatial axis): the output keeps
    ``ceil(size / stride)`` positions and the odd pixel of the total goes at the end
    (``same_upper``) or the beginning (``same_lower``). (begins, ends)."""
    begins, ends = [], []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=True):
        out = -(-size // stride)
        total = max(0, (out - 1) * stride + (k - 1) * dilation + 1 - size)
        front = total // 2 if upper else total - total // 2
        begins.append(front)
        ends.append(total - front)
    return begins, ends


def _kernel(ctx, weights: str, spatial: int) -> list[int | None]:
    shape = ctx.shape(weights)
    return [None] * spatial if shape is None else list(shape[-spatial:])


def _spatial_lists(layer: Layer, spatial: int, *keys: str) -> list[list[int]]:
    """The attributes ``keys`` (one value per spatial axis), 1s where absent; refused when
    the data's rank (known only at conversion when the IR omits it) does not fit them."""
    values = []
    for key in keys:
        value = layer.attrs[key]
        if value is None:
            value = [1] * spatial
        if len(value) != spatial:
            shown = ",".join(map(str, value))
            raise B2SError(
                f"{layer.where()}: attribute {key}='{shown}': needs {spatial} value(s), one "
                "per spatial axis of input 0"
            )
        values.append(value)
    return values


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


def _conv_spatial(ctx, layer, inputs) -> int:
    """The spatial rank, which the data and the weights must agree on (1-D to 3-D)."""
    spatial = _spatial(ctx, layer, inputs[0])
    weights = ctx.shape(inputs[1])
    if spatial < 1 or (weights is not None and len(weights) - 2 not in (spatial, spatial + 1)):
        raise B2SError(
            f"{layer.where()}: data of rank {spatial + 2} and weights of rank "
            f"{'?' if weights is None else len(weights)} do not form a convolution"
        )
    return spatial


@converts("Convolution", (1,), inputs=(2, 2), attrs=CONVOLUTION)
def convolution(ctx, layer, inputs):
    spatial = _conv_spatial(ctx, layer, inputs)
    strides, dilations = _spatial_lists(layer, spatial, "strides", "dilations")
    kernel = _kernel(ctx, inputs[1], spatial)
    padding = _padding(layer, spatial)
    if ctx.type_of(inputs[0]) in INTEGERS:
        _integer_convolution(ctx, layer, inputs, kernel, strides, dilations, padding)
        return
    data, padding = _without_dilated_same(
        ctx, layer, inputs[0], kernel, strides, dilations, padding
    )
    ctx.one(
        "Conv", [data, inputs[1]], ctx.out(layer), strides=strides, dilations=dilations, **padding
    )


def _integer_convolution(ctx, layer, inputs, kernel, strides, dilations, padding) -> None:
    """Convolution of integers, which ONNX's Conv (float only) cannot compute exactly.

    Each kernel tap's strided window of the zero-padded data is sliced out and the windows
    are stacked along the channel axis (im2col); one integer MatMul with the weights laid
    out to match then sums every product. onnxruntime's integer MatMul accumulates in its
    element type, which is arithmetic modulo 2**bits: the low bits of the exact sum, what
    OpenVINO's integer arithmetic gives, for every value (no float rounding anywhere; the
    CPU plugin computes in f32, exact only while sums stay below 2**24). Types narrower
    than 32 bits compute in a 32-bit type and keep the low bits.
    """
    data, weights = inputs
    elem = ctx.type_of(data)
    spatial = len(strides)
    if any(k is None for k in kernel):
        raise B2SError(f"{layer.where()}: an integer convolution needs static kernel sizes")
    work = elem if has_kernel("MatMul", elem, ctx.opset) else wider_type("MatMul", elem, ctx.opset)
    begins, ends = _integer_convolution_pads(ctx, layer, data, kernel, strides, dilations, padding)
    data = cast(ctx, data, work) if work != elem else data
    if any(begins) or any(ends):
        pads = int64s(ctx, "pads", [0, 0, *begins, 0, 0, *ends])
        data = ctx.one("Pad", [data, pads], mode="constant")
    axes = int64s(ctx, "axes", list(range(2, 2 + spatial)))
    steps = int64s(ctx, "steps", strides)
    windows = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        starts = [t * d for t, d in zip(tap, dilations, strict=True)]
        stops = [
            -(k - 1 - t) * d or INT64_MAX for t, k, d in zip(tap, kernel, dilations, strict=True)
        ]
        windows.append(
            ctx.one(
                "Slice",
                [data, int64s(ctx, "starts", starts), int64s(ctx, "ends", stops), axes, steps],
            )
        )
    stacked = ctx.one("Concat", windows, axis=1) if len(windows) > 1 else windows[0]
    rows = ctx.one("Transpose", [stacked], perm=[0, *range(2, 2 + spatial), 1])
    matrix = _integer_convolution_matrix(ctx, weights, elem, work)
    product = ctx.one("MatMul", [rows, matrix])
    last = [0, 1 + spatial, *range(1, 1 + spatial)]
    if work == elem:
        ctx.one("Transpose", [product], ctx.out(layer), perm=last)
        return
    ctx.one("Cast", [ctx.one("Transpose", [product], perm=last)], ctx.out(layer), to=elem)


def _integer_convolution_pads(ctx, layer, data, kernel, strides, dilations, padding):
    """Explicit pads (begins, ends); 'same_*' ones follow from static spatial sizes."""
    spatial = len(strides)
    if "pads" in padding:
        return padding["pads"][:spatial], padding["pads"][spatial:]
    if padding["auto_pad"] == "VALID":
        return [0] * spatial, [0] * spatial
    shape = ctx.shape(data)
    sizes = None if shape is None else shape[2:]
    if sizes is None or any(s is None for s in sizes):
        raise B2SError(
            f"{layer.where()}: an integer convolution with auto_pad "
            f"'{padding['auto_pad'].lower()}' needs static spatial sizes"
        )
    begins, ends = [], []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=True):
        total = max(0, (-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size)
        front = total // 2 if padding["auto_pad"] == "SAME_UPPER" else total - total // 2
        begins.append(front)
        ends.append(total - front)
    return begins, ends


def _integer_convolution_matrix(ctx, weights: str, elem: int, work: int) -> str:
    """[C_out, C_in, k...] weights as the [taps * C_in, C_out] matrix whose row
    ``tap * C_in + c`` matches the stacked windows."""
    value = ctx.value(weights)
    if value is not None:
        out_channels, in_channels = value.shape[:2]
        matrix = value.reshape(out_channels, in_channels, -1).transpose(2, 1, 0)
        matrix = matrix.reshape(-1, out_channels).astype(NUMPY_OF_ONNX[work])
        return ctx.const("weights", matrix)
    taps = ctx.one("Reshape", [weights, int64s(ctx, "shape", [0, 0, -1])])
    ordered = ctx.one("Transpose", [taps], perm=[2, 1, 0])
    matrix = ctx.one("Flatten", [ordered], axis=2)
    return matrix if work == elem else cast(ctx, matrix, work)


@converts("GroupConvolution", (1,), inputs=(2, 2), attrs=CONVOLUTION)
def group_convolution(ctx, layer, inputs):
    spatial = _conv_spatial(ctx, layer, inputs)
    strides, dilations = _spatial_lists(layer, spatial, "strides", "dilations")
    kernel = _kernel(ctx, inputs[1], spatial)
    padding = _padding(layer, spatial)
    if ctx.type_of(inputs[0]) in INTEGERS:
        weights = _block_diagonal_weights(ctx, layer, inputs[1])
        _integer_convolution(ctx, layer, [inputs[0], weights], kernel, strides, dilations, padding)
        return
    weights, groups = _grouped_weights(ctx, layer, inputs[1], transposed=False)
    data, padding = _without_dilated_same(
        ctx, layer, inputs[0], kernel, strides, dilations, padding
    )
    ctx.one(
        "Conv",
        [data, weights],
        ctx.out(layer),
        group=groups,
        strides=strides,
        dilations=dilations,
        **padding,
    )


def _block_diagonal_weights(ctx: ConversionContext, layer: Layer, weights: str) -> str:
    """[G, O/G, C/G, k...] grouped integer weights as the [O, C, k...] weights of one
    ungrouped convolution, zero outside each group's block: ONNX's Conv (float only) cannot
    take them, and ``_integer_convolution`` computes the grouped sums exactly from these
    (the zero products add nothing), at G times the work."""
    value = ctx.value(weights)
    if value is None or value.ndim < 3:
        raise B2SError(f"{layer.where()}: an integer group convolution needs constant weights")
    groups, outs, ins = value.shape[:3]
    dense = np.zeros((groups * outs, groups * ins, *value.shape[3:]), value.dtype)
    for group in range(groups):
        dense[group * outs : (group + 1) * outs, group * ins : (group + 1) * ins] = value[group]
    return ctx.const("weights", dense)


def _transposed(ctx, layer, inputs, weights, groups):
    spatial = _conv_spatial(ctx, layer, inputs)
    strides, dilations = _spatial_lists(layer, spatial, "strides", "dilations")
    attrs = {"strides": strides, "dilations": dilations, "group": groups}
    output_padding = layer.attrs["output_padding"] or [0] * spatial
    if len(output_padding) != spatial:
        raise B2SError(f"{layer.where()}: output_padding needs {spatial} values")
    if len(inputs) > 2:
        _transposed_to_output_shape(
            ctx, layer, inputs, weights, attrs, (strides, dilations, output_padding)
        )
        return
    padding = _padding(layer, spatial)
    if padding.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER"):
        # Without an output_shape input OpenVINO pads nothing under same_* (its spec: "if
        # auto_pads != None: pads_begin[i] = 0, pads_end[i] = 0"); ONNX's SAME would instead
        # make the output input * stride.
        padding = {"pads": [0] * (2 * spatial)}
    attrs.update(padding)
    if any(output_padding):
        attrs["output_padding"] = output_padding
    ctx.one("ConvTranspose", [inputs[0], weights], ctx.out(layer), **attrs)


def _output_shape(ctx, layer: Layer, tensor: str) -> list[int]:
    """The spatial output size: the input's value, or, when it is computed at run time
    (TensorFlow's Conv2DTranspose derives it from the input's ShapeOf), the layer's declared
    output dims, which OpenVINO's own shape inference wrote from that same computation."""
    value = ctx.value(tensor)
    if value is not None:
        return [int(v) for v in value.reshape(-1)]
    declared = ctx.shape(ctx.out(layer))
    if declared is None or any(d is None for d in declared[2:]):
        raise B2SError(
            f"{layer.where()}: output_shape is computed at run time and the declared output "
            "has no static spatial size to take instead"
        )
    return [int(d) for d in declared[2:]]


def _transposed_to_output_shape(ctx, layer, inputs, weights, attrs, geometry) -> None:
    """With an output_shape input, OpenVINO's output is the full transposed convolution
    (``s * (in - 1) + (k - 1) * d + 1`` per axis, zeros beyond it) read from a start offset
    for exactly output_shape elements. The offset (measured against OpenVINO's CPU plugin,
    every auto_pad, odd and negative totals, output_padding): with ``total = full +
    output_padding - output_shape`` clamped at 0, same_upper starts at ``ceil(total / 2)``,
    same_lower at ``floor(total / 2)``, valid at 0, explicit/notset at pads_begin (pads_end
    is ignored). ONNX's ConvTranspose crops with non-negative pads only, so the part of the
    window past the full result (a negative end padding) is appended as zeros with Pad."""
    strides, dilations, output_padding = geometry
    in_shape, w_shape = ctx.shape(inputs[0]), ctx.shape(weights)
    declared = ctx.shape(ctx.out(layer))
    if ctx.value(inputs[2]) is None and (declared is None or None in declared[2:]):
        _transposed_to_run_time_shape(ctx, layer, inputs, weights, attrs, output_padding)
        return
    out_spatial = _output_shape(ctx, layer, inputs[2])
    if in_shape is None or w_shape is None or any(d is None for d in [*in_shape[2:], *w_shape[2:]]):
        raise B2SError(f"{layer.where()}: output_shape needs static input and kernel spatial sizes")
    if len(out_spatial) != len(strides):
        raise B2SError(
            f"{layer.where()}: output_shape has {len(out_spatial)} values, the data "
            f"{len(strides)} spatial axes"
        )
    if any(v < 1 for v in out_spatial):
        raise B2SError(f"{layer.where()}: output_shape {out_spatial} must be positive")
    auto_pad = layer.attrs["auto_pad"]
    given = layer.attrs["pads_begin"] or [0] * len(out_spatial)
    begins, ends, appended = [], [], []
    for i, out in enumerate(out_spatial):
        full = strides[i] * (in_shape[2 + i] - 1) + (w_shape[2 + i] - 1) * dilations[i] + 1
        total = max(0, full + output_padding[i] - out)
        if auto_pad == "same_upper":
            front = total - total // 2
        elif auto_pad == "same_lower":
            front = total // 2
        elif auto_pad == "valid":
            front = 0
        else:
            front = given[i]
        if front >= full:
            raise B2SError(
                f"{layer.where()}: output_shape {out_spatial} with pads_begin {given} starts "
                f"past the {full} computed elements of spatial axis {i}"
            )
        end = max(0, full - front - out)
        begins.append(front)
        ends.append(end)
        appended.append(out - (full - front - end))
    attrs["pads"] = begins + ends
    if not any(appended):
        ctx.one("ConvTranspose", [inputs[0], weights], ctx.out(layer), **attrs)
        return
    result = ctx.one("ConvTranspose", [inputs[0], weights], **attrs)
    pads = [0] * (2 + len(appended)) + [0, 0, *appended]
    ctx.one(
        "Pad",
        [result, ctx.const("pads", np.asarray(pads, np.int64))],
        ctx.out(layer),
        mode="constant",
    )


def _transposed_to_run_time_shape(ctx, layer, inputs, weights, attrs, output_padding) -> None:
    """The same window as :func:`_transposed_to_output_shape` when output_shape and the
    spatial sizes are known only at run time (TensorFlow's Conv2DTranspose on a dynamic
    image): the full transposed convolution, sliced from the start offset computed from its
    run-time size, then zeros appended where the window runs past it."""
    spatial = len(output_padding)
    w_shape = ctx.shape(weights)
    if w_shape is None or any(d is None for d in w_shape[2:]):
        raise B2SError(f"{layer.where()}: output_shape needs static kernel spatial sizes")
    out_shape = ctx.shape(inputs[2])
    if out_shape is not None and out_shape != (spatial,):
        raise B2SError(f"{layer.where()}: output_shape must hold {spatial} values")
    full_result = ctx.one("ConvTranspose", [inputs[0], weights], **attrs)
    full = ctx.one(
        "Slice",
        [ctx.one("Shape", [full_result]), int64s(ctx, "s", [2]), int64s(ctx, "e", [2 + spatial])],
    )
    wanted = ctx.int64(inputs[2])
    zero = int64s(ctx, "zero", 0)
    total = ctx.one("Sub", [ctx.one("Add", [full, int64s(ctx, "extra", output_padding)]), wanted])
    total = ctx.one("Where", [ctx.one("Less", [total, zero]), zero, total])
    half = ctx.one("Div", [total, int64s(ctx, "two", 2)])
    auto_pad = layer.attrs["auto_pad"]
    if auto_pad == "same_upper":
        front = ctx.one("Sub", [total, half])
    elif auto_pad == "same_lower":
        front = half
    else:
        given = [0] * spatial if auto_pad == "valid" else layer.attrs["pads_begin"] or [0] * spatial
        front = int64s(ctx, "front", given)
    axes = int64s(ctx, "axes", list(range(2, 2 + spatial)))
    window = ctx.one("Slice", [full_result, front, ctx.one("Add", [front, wanted]), axes])
    short = ctx.one("Sub", [wanted, ctx.one("Sub", [full, front])])
    short = ctx.one("Where", [ctx.one("Less", [short, zero]), zero, short])
    # No padding before any axis, none after batch and channels, ``short`` after the rest.
    pads = ctx.one("Concat", [int64s(ctx, "none", [0] * (2 + spatial + 2)), short], axis=0)
    ctx.one("Pad", [window, pads], ctx.out(layer), mode="constant")


@converts("ConvolutionBackpropData", (1,), inputs=(2, 3), attrs=BACKPROP)
def convolution_backprop_data(ctx, layer, inputs):
    _transposed(ctx, layer, inputs, inputs[1], 1)


@converts("GroupConvolutionBackpropData", (1,), inputs=(2, 3), attrs=BACKPROP)
def group_convolution_backprop_data(ctx, layer, inputs):
    weights, groups = _grouped_weights(ctx, layer, inputs[1], transposed=True)
    _transposed(ctx, layer, inputs, weights, groups)


@converts(
    "MatMul",
    (1,),
    inputs=(2, 2),
    attrs={"transpose_a": Bool(default=False), "transpose_b": Bool(default=False)},
)
def matmul(ctx, layer, inputs):
    """A 1-D operand beside a matrix is lifted to a matrix and its axis squeezed out of
    the product: onnxruntime 1.31 folds a Transpose of the other operand into a FusedMatMul
    that computes a 1-D B wrongly (``A^T b`` came out as ``A.reshape(K, M) b``)."""
    ranks = [ctx.rank(layer, tensor) for tensor in inputs]
    lifted = None
    if sorted(ranks)[0] == 1 and max(ranks) >= 2:
        lifted = 0 if ranks[0] == 1 else 1  # the operand that is a vector
    operands = []
    for index, (tensor, key) in enumerate(zip(inputs, ("transpose_a", "transpose_b"), strict=True)):
        rank = ranks[index]
        if index == lifted:
            # [K] -> [1, K] as A, [K, 1] as B (a vector is never transposed).
            axis = int64s(ctx, "vector_axis", [index])
            operands.append(ctx.one("Unsqueeze", [tensor, axis]))
            continue
        if layer.attrs[key] and rank >= 2:
            perm = [*range(rank - 2), rank - 1, rank - 2]
            value = ctx.value(tensor)
            if value is None:
                tensor = ctx.one("Transpose", [tensor], perm=perm)
            else:
                transposed = ctx.const("transposed", np.transpose(value, perm))
                note_transposed(ctx, tensor, transposed, perm)
                tensor = transposed
        operands.append(tensor)
    if lifted is None:
        ctx.one("MatMul", operands, ctx.out(layer))
        return
    product = ctx.one("MatMul", operands)
    squeezed = int64s(ctx, "vector_axis", [-2 if lifted == 0 else -1])
    ctx.one("Squeeze", [product, squeezed], ctx.out(layer))
