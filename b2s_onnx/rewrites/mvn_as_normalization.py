"""MVN spelled out (ReduceMean, Sub, Mul, ReduceMean, Add eps, Sqrt, Div) over a tensor's
trailing axes -> onnxruntime's one-kernel InstanceNormalization or LayerNormalization,
with a following per-channel or per-feature Multiply/Add taken in as scale and bias.

The converter writes OpenVINO's MVN as its formula; onnxruntime fuses none of it (its
LayerNorm fusion wants Pow, not Mul). One kernel instead of seven passes, measured 1
thread: [1,32,52,52] over H, W (face-detection-0205 has 40 such MVNs) 0.061 -> 0.033 ms as
InstanceNormalization; [1,384,768] over the last axis (a transformer's LayerNorm, which
OpenVINO keeps as MVN -> Multiply -> Add) 0.269 -> 0.137 ms as LayerNormalization.

Only MVN with the epsilon inside the square root (both kernels add it there). Float
rounding only: against float64 on data centred at 100, the formula's error was 1.05e-5,
InstanceNormalization's 1.2e-5, LayerNormalization's 1.6e-6.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

STANDARD = ("", "ai.onnx")


def reduce_mean_axes(index: GraphIndex, node: onnx.NodeProto) -> list[int] | None:
    """The axes of a keepdims ReduceMean (attribute before opset 18, input after), as
    written (possibly negative); None for anything else."""
    if node.op_type != "ReduceMean" or node.domain not in STANDARD:
        return None
    if int(index.attribute(node, "keepdims", 1)) != 1:
        return None
    return index.reduction_axes(node) or None


def _reduced_axes(index: GraphIndex, node: onnx.NodeProto, rank: int) -> list[int] | None:
    axes = reduce_mean_axes(index, node)
    return None if axes is None else sorted(a % rank for a in axes)


def _match(index: GraphIndex, div: onnx.NodeProto):
    """(data, axes, epsilon, nodes) of the spelled MVN ending in ``div``, else None."""
    centered, deviation = div.input
    sub, sqrt = index.produced_by(centered, "Sub"), index.produced_by(deviation, "Sqrt")
    if sub is None or sqrt is None:
        return None
    data, mean_name = sub.input
    shape = index.info(data).shape
    if shape is None:
        return None
    rank = len(shape)
    mean = index.producer.get(mean_name)
    add = index.produced_by(sqrt.input[0], "Add")
    if mean is None or add is None or mean.input[0] != data:
        return None
    axes = _reduced_axes(index, mean, rank)
    for variance_name, epsilon_name in (add.input, add.input[::-1]):
        epsilon = index.constant(epsilon_name)
        variance = index.producer.get(variance_name)
        if epsilon is None or epsilon.size != 1 or variance is None:
            continue
        square = index.produced_by(variance.input[0], "Mul")
        if square is None or list(square.input) != [centered, centered]:
            return None
        if axes is None or _reduced_axes(index, variance, rank) != axes:
            return None
        nodes = [mean, sub, square, variance, add, sqrt, div]
        inner = [n.output[0] for n in nodes[:-1]]
        readers = {centered: 2}  # the square and the division read it
        for name in inner:
            count = len({id(n) for n in index.consumers.get(name, [])})
            if count != readers.get(name, 1) or name in index.graph_outputs:
                return None
        return data, axes, float(epsilon.reshape(-1)[0]), nodes
    return None


def _affine(index: GraphIndex, name: str, op: str, shape: tuple[int, ...]):
    """The ``op`` (Mul/Add) of a constant that alone reads ``name``, with the constant
    broadcast to ``shape``; else None."""
    reader = index.only_consumer(name)
    if reader is None or reader.op_type != op or reader.domain not in STANDARD:
        return None
    other = reader.input[1] if reader.input[0] == name else reader.input[0]
    value = index.constant(other)
    if value is None or value.dtype != np.float32:
        return None
    while value.ndim > len(shape) and value.shape[0] == 1:
        value = value[0]
    if value.ndim > len(shape):
        return None
    try:
        broadcast = np.broadcast_to(value, shape)
    except ValueError:
        return None
    return reader, np.ascontiguousarray(broadcast)


class MvnAsNormalization:
    name = "mvn-as-normalization"
    exact = False
    anchors = ("Div",)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        found = _match(index, node)
        if found is None:
            return None
        data, axes, epsilon, nodes = found
        info = index.info(data)
        shape = info.shape
        rank = len(shape)
        if info.elem_type != onnx.TensorProto.FLOAT:
            return None
        if axes != list(range(axes[0], rank)):
            return Declined(self.name, node.name, "the normalised axes are not the trailing ones")
        # Feature maps (N, C, spatial...) normalised over the spatial axes: per channel;
        # sequences (N, T, D) over D: per feature (a LayerNorm's scale and shift follow).
        instance = axes[0] == 2 and rank >= 4 and shape[1] is not None
        if instance:
            kind, param_shape = "InstanceNormalization", (shape[1],)
            full = (1, shape[1]) + (1,) * (rank - 2)
        else:
            trailing = tuple(shape[axes[0] :])
            if None in trailing:
                return Declined(self.name, node.name, "the normalised dims are not static")
            kind, param_shape, full = "LayerNormalization", trailing, trailing
        matched = list(nodes)
        output = node.output[0]
        scale = np.ones(param_shape, np.float32)
        bias = np.zeros(param_shape, np.float32)
        multiply = _affine(index, output, "Mul", full)
        if multiply is not None:
            matched.append(multiply[0])
            scale = multiply[1].reshape(param_shape)
            output = multiply[0].output[0]
            add = _affine(index, output, "Add", full)
            if add is not None:
                matched.append(add[0])
                bias = add[1].reshape(param_shape)
                output = add[0].output[0]
        if not index.is_free(matched):
            return None
        index.claim(matched)
        base = node.name or node.output[0]
        inputs = [
            data,
            index.add_initializer(f"{base}/scale", np.ascontiguousarray(scale)),
            index.add_initializer(f"{base}/bias", np.ascontiguousarray(bias)),
        ]
        attrs = {"epsilon": epsilon}
        if kind == "LayerNormalization":
            attrs["axis"] = axes[0]
        index.replace(matched, [helper.make_node(kind, inputs, [output], name=base, **attrs)])
        for absorbed in matched[:-1]:
            report.absorbed[absorbed.output[0]] = output
        return Fired(self.name, node.name, f"{kind} over axes {axes}")
