"""SpaceToBatch -> MaxPool/AveragePool -> BatchToSpace (TensorFlow's ``pool`` with a
dilation rate) -> explicit zero Pad and one dilated pool.

The atrous-convolution match finds the pattern; this module says when a pool fuses and
builds it. SpaceToBatch pads with zeros, and those zeros take part in the phases' pooling,
while a pool's own padding is -inf (MaxPool) or left out of the count (AveragePool). So the
fused form pads with zeros explicitly (``pads_begin - crops_begin`` before,
``pads_end - crops_end`` after, per spatial axis) and pools with no padding of its own,
which reads exactly the elements the pattern reads, provided the pool inside the pattern
pads nothing itself ('VALID', what ``with_space_to_batch`` writes): with its own padding,
a window at a phase border would mix -inf or a shorter count into what becomes a zero in
the fused form, so that declines.

- MaxPool: a maximum of the same elements in any order: bit-exact. The zeros are
  concatenated (static shapes only): onnxruntime's PadFusion folds a zero Pad in front of
  MaxPool into MaxPool's own padding, which is -inf.
- AveragePool: every window holds ``prod(kernel)`` elements either way, so
  ``count_include_pad`` does not matter, and the average is a depthwise Conv with weights
  ``1 / prod(kernel)`` whose own (zero) padding is SpaceToBatch's. Not a dilated
  AveragePool (opset 19): onnxruntime folds a zero Pad into it, refuses pads as large as
  the kernel, and would leave the padding out of the count. Sum order and the division
  differ: float rounding only.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex

POOLS = ("MaxPool", "AveragePool")


def pool_declines(
    index: GraphIndex,
    pool: onnx.NodeProto,
    inner_pads: list[int],
    channels: int | None,
    shape: list[int] | None,
) -> str:
    """Why ``pool`` inside an atrous pattern cannot become a dilated pool ("" when it can);
    ``channels`` and ``shape`` (of the data, laid out as the pool reads it): when known
    and the data is float32."""
    if pool.op_type == "AveragePool" and channels is None:
        return (
            "an average over zero-padded windows becomes a depthwise Conv, which needs "
            "float32 data with a known channel count"
        )
    if pool.op_type == "MaxPool" and shape is None:
        return (
            "the zeros MaxPool must see need a static shape of float32 data (onnxruntime "
            "folds a zero Pad into MaxPool's -inf padding, so they are concatenated)"
        )
    if any(inner_pads):
        return f"'{pool.name}' pads its phases itself (its padding is not SpaceToBatch's zeros)"
    indices = pool.output[1] if len(pool.output) > 1 else ""
    if indices and (index.consumers.get(indices) or indices in index.graph_outputs):
        return f"'{pool.name}' also returns indices, which depend on the phase layout"
    return ""


def _zeros_around(
    index: GraphIndex,
    pool: onnx.NodeProto,
    data: str,
    shape: list[int],
    pad_begin: list[int],
    pad_end: list[int],
    nodes: list[onnx.NodeProto],
) -> str:
    """``data`` with zero blocks concatenated before and after each spatial axis. A Pad
    would do, but onnxruntime folds a zero Pad in front of MaxPool into MaxPool's own
    padding, which is -inf: the zeros must come from an op it does not fold."""
    shape = list(shape)
    for k, (begin, end) in enumerate(zip(pad_begin, pad_end, strict=True)):
        axis = 2 + k
        parts = []
        for count in (begin, end):
            if not count:
                parts.append(None)
                continue
            block = [*shape[:axis], count, *shape[axis + 1 :]]
            dims = index.add_initializer(f"{pool.name}/zeros_shape", np.asarray(block, np.int64))
            zeros = index.names.fresh(f"{pool.name}/zeros")
            nodes.append(
                helper.make_node(
                    "ConstantOfShape",
                    [dims],
                    [zeros],
                    name=zeros,
                    value=helper.make_tensor("zero", onnx.TensorProto.FLOAT, [1], [0.0]),
                )
            )
            parts.append(zeros)
        if parts == [None, None]:
            continue
        joined = index.names.fresh(f"{pool.name}/atrous_padded")
        inputs = [p for p in (parts[0], data, parts[1]) if p is not None]
        nodes.append(helper.make_node("Concat", inputs, [joined], name=joined, axis=axis))
        data = joined
        shape[axis] += begin + end
    return data


def fused_pool(
    index: GraphIndex,
    pool: onnx.NodeProto,
    data: str,
    dilations: list[int],
    pad_begin: list[int],
    pad_end: list[int],
    channels: int | None,
    shape: list[int] | None,
) -> tuple[list[onnx.NodeProto], bool]:
    """Nodes computing the pattern from ``data`` (laid out as the pool reads it), the last
    one writing ``pool.output[0]``, and whether the result is bit-exact (call
    :func:`pool_declines` first)."""
    kernel = list(index.attribute(pool, "kernel_shape", []))
    nodes: list[onnx.NodeProto] = []
    if pool.op_type == "MaxPool":
        if any(pad_begin + pad_end):
            data = _zeros_around(index, pool, data, shape, pad_begin, pad_end, nodes)
        nodes.append(
            helper.make_node(
                "MaxPool",
                [data],
                [pool.output[0]],
                name=pool.name,
                kernel_shape=kernel,
                dilations=dilations,
            )
        )
        return nodes, True
    assert channels is not None, "pool_declines checks the channel count"
    weights = np.full([channels, 1, *kernel], 1 / math.prod(kernel), np.float32)
    name = index.add_initializer(f"{pool.name}/atrous_mean_weights", weights)
    nodes.append(
        helper.make_node(
            "Conv",
            [data, name],
            [pool.output[0]],
            name=pool.name,
            group=channels,
            kernel_shape=kernel,
            dilations=dilations,
            pads=[*pad_begin, *pad_end],
        )
    )
    return nodes, False
