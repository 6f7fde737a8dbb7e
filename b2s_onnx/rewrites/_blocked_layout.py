"""Will onnxruntime hold this tensor in its blocked channel layout (NCHWc)?

onnxruntime's CPU provider, at its default optimization level, moves 2-D convolutions whose
channel counts fit its channel block into a blocked layout and keeps the tensor blocked
through the ops that have blocked kernels: pools, Add/Sum of two blocked tensors (folded
into the producing convolution as an accumulation), Relu/Sigmoid/Tanh (folded into the
convolution when it is the only reader), BatchNormalization and Mul by a per-channel
constant (run as depthwise 1x1 convolutions), channel Concat of aligned inputs, and
nearest or linear upsampling by whole factors given as scales; an Identity, which its
first optimization level removes, changes nothing (onnxruntime 1.31's rules, each checked
in its optimized graph by the tests). Any other reader gets the tensor back through a
reorder pass, so a rewrite that wants an element-wise op to stay cheap must know whether
its input is blocked; this module answers that by walking producers with those
rules. The answer only steers speed: a wrong one never changes an output.

The block is 16 channels with AVX-512 and 8 with AVX2; asking for multiples of 16 holds
for both.
"""

from __future__ import annotations

import onnx

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._per_channel import channel_vector

#: Channels per block on AVX-512 (a multiple of AVX2's 8).
BLOCK = 16

#: Ops whose output is blocked when their (first) input is.
_PASS_THROUGH = (
    "Identity",  # removed by onnxruntime's first optimization level
    "Relu",
    "Sigmoid",
    "Tanh",
    "BatchNormalization",
    "GlobalAveragePool",
    "GlobalMaxPool",
)


#: Activations onnxruntime folds into the Conv before it when that Conv's only reader
#: (``activation`` of its fused Conv); Relu, Sigmoid and Tanh pass through above anyway.
_FOLDED_INTO_CONV = ("HardSigmoid", "LeakyRelu", "Clip")


def channels(index: GraphIndex, name: str) -> int | None:
    """The static channel count of a 4-D float32 tensor, else None."""
    info = index.info(name)
    if info.elem_type != onnx.TensorProto.FLOAT or info.shape is None or len(info.shape) != 4:
        return None
    return info.shape[1]


def _weight_dims(index: GraphIndex, name: str) -> tuple[int, ...] | None:
    """Dims of a float convolution weight that onnxruntime sees as an initializer: one
    directly, or one cast from float16 (onnxruntime folds that cast before laying out)."""
    tensor = index.initializers.get(name)
    if tensor is None:
        cast = index.produced_by(name, "Cast")
        if cast is None or index.attribute(cast, "to") != onnx.TensorProto.FLOAT:
            return None
        tensor = index.initializers.get(cast.input[0])
        if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT16:
            return None
    elif tensor.data_type != onnx.TensorProto.FLOAT:
        return None
    return tuple(tensor.dims)


def _conv_is_blocked(index: GraphIndex, node: onnx.NodeProto) -> bool:
    dims = _weight_dims(index, node.input[1])
    if dims is None or len(dims) != 4:
        return False
    if len(node.input) > 2 and node.input[2]:
        bias = _weight_dims(index, node.input[2])
        if bias is None or bias != (dims[0],):
            return False
    out_channels, in_per_group = dims[0], dims[1]
    group = int(index.attribute(node, "group", 1))
    if group == 1:
        return True  # onnxruntime 1.31 blocks any count, padding the last block
    if out_channels % BLOCK:
        return False
    if in_per_group == 1 and out_channels == group:
        return True  # depthwise
    return in_per_group % BLOCK == 0 and (out_channels // group) % BLOCK == 0


def _is_conv_bias(index: GraphIndex, node: onnx.NodeProto) -> str | None:
    """For Add(Conv output, per-channel constant) that onnxruntime folds into the Conv's
    bias: the Conv's output; else None."""
    for data, other in (node.input, node.input[::-1]):
        conv = index.produced_by(data, "Conv")
        value = index.constant(other)
        if conv is None or value is None or index.only_consumer(data) is None:
            continue
        if channel_vector(value) is not None:
            return data
    return None


def is_blocked(index: GraphIndex, name: str) -> bool:
    """Whether onnxruntime will hold ``name`` in its blocked layout (see the module doc).

    Producers are walked iteratively with a per-pass memo, so a deep chain of residual
    blocks costs one visit per tensor."""
    memo: dict[str, bool] = index.memo.setdefault("blocked-layout", {})
    visiting: set[str] = set()
    stack = [name]
    while stack:
        current = stack[-1]
        if current in memo:
            stack.pop()
            continue
        needed, verdict = _rule(index, current)
        for tensor in needed:
            if tensor in visiting and tensor not in memo:
                memo[tensor] = False  # a cycle (a malformed graph): no layout to keep
        missing = [n for n in needed if n not in memo]
        if missing:
            visiting.add(current)
            stack.extend(missing)
            continue
        stack.pop()
        memo[current] = verdict(memo)
    return memo[name]


def _rule(index: GraphIndex, name: str):
    """(tensors whose answer this one needs, a function of their answers)."""
    node = index.producer.get(name)
    if node is None or node.domain not in ("", "ai.onnx") or channels(index, name) is None:
        return [], lambda _: False
    op = node.op_type
    if op == "Conv":
        return [], lambda _: _conv_is_blocked(index, node)
    if op in ("MaxPool", "AveragePool"):
        return [], lambda _: len(node.output) == 1 and channels(index, name) % BLOCK == 0
    spelled = _spelled_prelu_data(index, node)
    if spelled is not None or op == "PRelu":
        # A PReLU that the prelu rewrites turn into the blocked form keeps the layout.
        data = spelled if spelled is not None else node.input[0]
        return [data], lambda m: m[data]
    if op in _PASS_THROUGH:
        return [node.input[0]], lambda m: m[node.input[0]]
    if op in _FOLDED_INTO_CONV and _folded_into_conv(index, node):
        # The Conv computes the activation on its blocked output.
        return [node.input[0]], lambda m: m[node.input[0]]
    if op in ("Add", "Sum", "Mul"):
        if op == "Add" and (data := _is_conv_bias(index, node)) is not None:
            return [data], lambda m: m[data]
        if op == "Mul" and (data := _per_channel_scaling(index, node)) is not None:
            return [data], lambda m: m[data]  # run as a blocked depthwise 1x1 Conv
        shapes = {index.info(i).shape for i in node.input}
        if len(shapes) != 1:
            return [], lambda _: False
        inputs = list(node.input)
        return inputs, lambda m: all(m[i] for i in inputs)
    if op == "Concat":
        inputs = list(node.input)
        aligned = int(index.attribute(node, "axis", 0)) in (1, -3) and all(
            (c := channels(index, i)) is not None and c % BLOCK == 0 for i in inputs
        )
        return inputs, lambda m: aligned and all(m[i] for i in inputs)
    if op == "Resize" and _is_blocked_upsample(index, node):
        return [node.input[0]], lambda m: m[node.input[0]]
    return [], lambda _: False


def _folded_into_conv(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Whether onnxruntime folds activation ``node`` into the Conv before it: the Conv's
    output (or its bias Add's, folded too) is read by ``node`` alone, or, for HardSigmoid,
    by ``node`` and a Mul of the two (HSwish, which it folds as one activation)."""
    data = node.input[0]
    producer = index.producer.get(data)
    if producer is None or producer.domain not in ("", "ai.onnx"):
        return False
    if producer.op_type != "Conv" and not (
        producer.op_type == "Add" and _is_conv_bias(index, producer) is not None
    ):
        return False
    readers = index.consumers.get(data, [])
    if data in index.graph_outputs:
        return False
    if readers == [node]:
        return True
    if node.op_type != "HardSigmoid" or len(readers) != 2:
        return False
    other = readers[1] if readers[0] is node else readers[0]
    return other.op_type == "Mul" and sorted(other.input) == sorted([data, node.output[0]])


def _per_channel_scaling(index: GraphIndex, node: onnx.NodeProto) -> str | None:
    """For Mul(t, constant [1,C,1,1] or [C,1,1]): ``t``, else None."""
    for data, other in (node.input, node.input[::-1]):
        value = index.constant(other)
        if value is None or index.constant(data) is not None:
            continue
        if channel_vector(value) is not None:
            return data
    return None


def upsample_mode_is_blocked(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Whether a Resize's modes are ones onnxruntime 1.31's blocked Upsample computes:
    nearest asymmetric/floor, or linear half_pixel, align_corners or asymmetric."""
    mode = index.text(node, "mode", "nearest")
    coordinates = index.text(node, "coordinate_transformation_mode", "half_pixel")
    if mode == "nearest":
        return coordinates == "asymmetric" and index.text(node, "nearest_mode", "") == "floor"
    return mode == "linear" and coordinates in ("half_pixel", "align_corners", "asymmetric")


def _is_blocked_upsample(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """onnxruntime 1.31's blocked Upsample (checked in its optimized graph): whole factors on
    H and W, given as constant scales or as constant sizes of all four axes (not of
    some ``axes``), in the modes of :func:`upsample_mode_is_blocked`."""
    if not upsample_mode_is_blocked(index, node):
        return False
    if len(node.input) == 4 and node.input[3] and not node.input[2]:
        return _whole_factor_sizes(index, node)
    if len(node.input) != 3 or not node.input[2]:
        return False
    scales = index.constant(node.input[2])
    if scales is None or scales.shape != (4,):
        return False
    return bool(scales[0] == 1 and scales[1] == 1 and all(s >= 1 and s == int(s) for s in scales))


def _whole_factor_sizes(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Constant sizes of all four axes that keep N and C and multiply H and W by whole
    factors of the (static) input."""
    sizes = index.constant(node.input[3])
    shape = index.info(node.input[0]).shape
    if sizes is None or sizes.shape != (4,) or shape is None or None in shape:
        return False
    axes = index.attribute(node, "axes")
    if axes is not None and [int(a) % 4 for a in axes] != [0, 1, 2, 3]:
        return False
    if index.text(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return False
    keeps = int(sizes[0]) == shape[0] and int(sizes[1]) == shape[1]
    return keeps and all(
        size > 0 and int(out) >= size and int(out) % size == 0
        for out, size in zip(sizes[2:], shape[2:], strict=True)
    )


def _spelled_prelu_data(index: GraphIndex, node: onnx.NodeProto) -> str | None:
    # Imported here: prelu_spelled_out imports this module (through prelu_as_leaky_relu).
    from b2s_onnx.rewrites.prelu_spelled_out import match_spelled_prelu

    if node.op_type != "Add":
        return None
    found = match_spelled_prelu(index, node)
    return None if found is None else found.data
