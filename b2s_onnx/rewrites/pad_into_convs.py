"""A zero Pad of the spatial axes read only by convolutions -> the pads of those
convolutions.

TensorFlow writes a strided 'same' convolution's asymmetric padding as an explicit Pad
(ZeroPadding2D, or OpenVINO's frontend for 'same' with stride 2), and NASNet-style cells
read one padded tensor with two separable convolutions. onnxruntime folds a Pad into a
Conv only when the Conv is its sole reader; otherwise the Pad runs as its own pass, outside
the blocked channel layout (a reorder out and back around it). ONNX Conv takes begin and
end pads per axis, so every reading Conv can pad for itself. Measured on NASNetMobile
(Keras, 224x224), 1 thread: see docs/performance.md.

Zero padding inside the Conv adds the same zero products the padded tensor did: float
rounding only (a zero sum may change sign).
"""

from __future__ import annotations

import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


def _spatial_pads(index: GraphIndex, node: onnx.NodeProto, rank: int) -> list[int] | None:
    """The Pad's [begin..., end...] over the spatial axes when it pads only those, with
    zeros, by constant non-negative amounts; else None."""
    if index.text(node, "mode", "constant") != "constant":
        return None
    if index.opset() >= 11:
        pads = index.constant(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        if len(node.input) > 2 and node.input[2]:
            value = index.constant(node.input[2])
            if value is None or value.size != 1 or float(value.reshape(-1)[0]) != 0.0:
                return None
        if len(node.input) > 3 and node.input[3]:
            return None  # explicit axes: rare, left alone
    else:
        pads = index.attribute(node, "pads")
        if float(index.attribute(node, "value", 0.0)) != 0.0:
            return None
    if pads is None:
        return None
    pads = [int(p) for p in list(pads)]
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        return None
    begin, end = pads[:rank], pads[rank:]
    if begin[:2] != [0, 0] or end[:2] != [0, 0]:
        return None
    return begin[2:] + end[2:]


class PadIntoConvs:
    name = "pad-into-convs"
    #: Zero products added inside the Conv (see the module doc).
    exact = False
    anchors = ("Pad",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        shape = index.info(node.input[0]).shape
        if shape is None or len(shape) != 4:
            return None
        readers = index.consumers.get(node.output[0], [])
        if len(readers) < 2 or node.output[0] in index.graph_outputs:
            return None  # a sole Conv reader: onnxruntime folds the Pad itself
        if not all(
            r.op_type == "Conv"
            and r.domain in ("", "ai.onnx")
            and r.input[0] == node.output[0]
            and list(r.input).count(node.output[0]) == 1
            and index.text(r, "auto_pad", "NOTSET") in ("NOTSET", "VALID")
            for r in readers
        ):
            return None
        spatial = _spatial_pads(index, node, 4)
        if spatial is None:
            return Declined(self.name, node.name, "not a constant zero padding of H and W")
        if not index.is_free([node, *readers]):
            return None
        index.claim([node, *readers])
        index.replace([node], [])
        for reader in readers:  # each in its own place: their outputs are read in between
            # VALID (no padding) is how OpenVINO's frontend writes a Conv after its Pad.
            own = [int(p) for p in index.attribute(reader, "pads", [0, 0, 0, 0])]
            conv = onnx.NodeProto()
            conv.CopyFrom(reader)
            conv.input[0] = node.input[0]
            del conv.attribute[:]
            conv.attribute.extend(a for a in reader.attribute if a.name not in ("pads", "auto_pad"))
            conv.attribute.append(
                helper.make_attribute("pads", [a + b for a, b in zip(own, spatial, strict=True)])
            )
            index.replace([reader], [conv])
        report.absorbed[node.output[0]] = readers[0].output[0]
        return Fired(self.name, node.name, f"pads {spatial} into {len(readers)} convolutions")
