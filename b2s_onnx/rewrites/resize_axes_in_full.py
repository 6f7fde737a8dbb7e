"""A Resize with the ``axes`` attribute -> the same Resize with scales or sizes for every
axis and no ``axes``.

Not for speed: onnxruntime's layout transformation (``ORT_ENABLE_ALL``, a session's
default) moves an 8-bit Resize between QLinearConvs into NHWC and permutes its scales or
sizes as if they held one value per axis of the tensor. With ``axes`` they hold fewer, and
the session fails to load ("Number of elements of input 'sizes' (0) does not match the
number of axes (2)") or fails at run time in a Gather it inserted. An NNCF-quantized road
segmentation IR, whose bilinear upsampling sits between quantized convolutions, converted
to such a model. Spelled in full the Resize computes the same: onnxruntime fills the axes
not listed with scale 1 and their own size, which is what the full operand says.

So this runs on every converted model, also with ``fuse=False``: it is a condition for the
model to load, not a choice of form. Constant operands become constants; operands known at
run time are completed at run time (a Concat of their entries and the input's shape).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class ResizeAxesInFull:
    name = "resize-axes-in-full"
    anchors = ("Resize",)
    exact = True

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        axes = index.attribute(node, "axes")
        if axes is None:
            return None
        shape = index.info(node.input[0]).shape
        if shape is None:
            return Declined(self.name, node.name, "the input's rank is unknown")
        rank = len(shape)
        axes = [int(a) % rank for a in axes] if rank else []
        scales = node.input[2] if len(node.input) > 2 else ""
        sizes = node.input[3] if len(node.input) > 3 else ""
        policy = index.text(node, "keep_aspect_ratio_policy", "stretch")
        if sizes and policy != "stretch":
            # The policy takes one scale over the listed axes; listing all of them would
            # bring the unlisted axes' scale of 1 into that choice.
            return Declined(self.name, node.name, f"keep_aspect_ratio_policy '{policy}'")
        if not index.is_free([node]):
            return None
        index.claim([node])
        nodes: list[onnx.NodeProto] = []
        inputs = list(node.input)
        if sizes:
            inputs[3] = _in_full(index, node, sizes, axes, shape, nodes, fill=None)
        elif scales:
            inputs[2] = _in_full(index, node, scales, axes, shape, nodes, fill=1.0)
        resized = helper.make_node("Resize", inputs, list(node.output), name=node.name)
        resized.attribute.extend(a for a in node.attribute if a.name != "axes")
        index.replace([node], [*nodes, resized])
        return Fired(self.name, node.name, f"axes {axes} of rank {rank}")


def _in_full(
    index: GraphIndex,
    node: onnx.NodeProto,
    operand: str,
    axes: list[int],
    shape: list[int | None],
    nodes: list[onnx.NodeProto],
    fill: float | None,
) -> str:
    """``operand`` (one entry per axis of ``axes``) as one entry per axis of the input:
    ``fill`` for the others (scales), else the input's own size on them (sizes)."""
    rank = len(shape)
    dtype = np.float32 if fill is not None else np.int64
    value = index.constant(operand)
    own = [fill if fill is not None else d for d in shape]
    if value is not None and all(own[a] is not None for a in range(rank) if a not in axes):
        full = np.asarray([0 if v is None else v for v in own], dtype)
        full[axes] = value.reshape(-1).astype(dtype)
        return index.add_initializer(f"{node.name}/{'scales' if fill else 'sizes'}", full)
    fresh = index.names.fresh
    base = node.name or node.output[0]
    pieces: list[str] = []
    whole_shape = None
    for axis in range(rank):
        if axis in axes:
            position = axes.index(axis)
            if value is not None:
                entry = value.reshape(-1)[[position]].astype(dtype)
                pieces.append(index.add_initializer(f"{base}/entry", entry))
                continue
            piece = fresh(f"{base}/entry")
            start = index.add_initializer(f"{base}/start", np.asarray([position], np.int64))
            stop = index.add_initializer(f"{base}/stop", np.asarray([position + 1], np.int64))
            nodes.append(helper.make_node("Slice", [operand, start, stop], [piece], name=piece))
            pieces.append(piece)
        elif own[axis] is not None:
            pieces.append(index.add_initializer(f"{base}/own", np.asarray([own[axis]], dtype)))
        else:
            if whole_shape is None:
                whole_shape = fresh(f"{base}/shape")
                nodes.append(
                    helper.make_node("Shape", [node.input[0]], [whole_shape], name=whole_shape)
                )
            piece = fresh(f"{base}/own")
            start = index.add_initializer(f"{base}/start", np.asarray([axis], np.int64))
            stop = index.add_initializer(f"{base}/stop", np.asarray([axis + 1], np.int64))
            nodes.append(helper.make_node("Slice", [whole_shape, start, stop], [piece], name=piece))
            pieces.append(piece)
    full = fresh(f"{base}/{'scales' if fill else 'sizes'}")
    nodes.append(helper.make_node("Concat", pieces, [full], name=full, axis=0))
    return full
