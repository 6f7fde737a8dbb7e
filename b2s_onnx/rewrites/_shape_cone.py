"""Values computed from tensor shapes only, evaluated for sample shapes.

TensorFlow computes an atrous convolution's paddings and crops from ``tf.shape`` at run
time. To decide whether such values always equal those of a dilated convolution, the
subgraph that computes them (its "cone", back to Shape nodes and constants) is evaluated
with every Shape output replaced by a free input, for many sample shapes. Sampling is no
proof, so the fused graph also guards the relation at run time.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from b2s_onnx.rewrites._index import GraphIndex

#: Cones larger than this are not evaluated (a real paddings computation is ~20 nodes).
MAX_CONE_NODES = 200


class ShapeCone:
    """The nodes computing ``targets`` from Shape outputs and constants, or why not."""

    def __init__(self, index: GraphIndex, targets: list[str]) -> None:
        self.index = index
        self.targets = targets
        self.nodes: list[onnx.NodeProto] = []
        self.shape_sources: dict[str, tuple[int | None, ...]] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.reason = self._collect()

    def _collect(self) -> str:
        index = self.index
        seen: set[str] = set()
        stack = list(self.targets)
        found: list[onnx.NodeProto] = []
        while stack:
            name = stack.pop()
            if not name or name in seen:
                continue
            seen.add(name)
            value = index.constant(name)
            if value is not None:
                self.constants[name] = value
                continue
            node = index.producer.get(name)
            if node is None:
                return f"'{name}' is a graph input, not computed from shapes"
            if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
                shape = index.info(node.input[0]).shape
                if shape is None or index.attribute(node, "start") or index.attribute(node, "end"):
                    return f"the rank of '{node.input[0]}' is unknown"
                self.shape_sources[name] = shape
                continue
            if node.domain not in ("", "ai.onnx") or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute
            ):
                return f"'{node.name}' is not a plain standard op"
            found.append(node)
            if len(found) > MAX_CONE_NODES:
                return "the computation is too large to analyse"
            stack.extend(node.input)
        positions = {id(n): i for i, n in enumerate(index.graph.node)}
        self.nodes = sorted(found, key=lambda n: positions[id(n)])
        return ""

    def samples(self, count: int, modulus: int) -> list[dict[str, np.ndarray]]:
        """Sample values of ``targets`` for ``count`` shape assignments: every dynamic dim
        takes each residue modulo ``modulus`` across the samples, at several magnitudes."""
        dynamic = sorted(
            {
                (name, axis)
                for name, shape in self.shape_sources.items()
                for axis, d in enumerate(shape)
                if d is None
            }
        )
        graph = helper.make_graph(
            self.nodes,
            "cone",
            [
                helper.make_tensor_value_info(n, TensorProto.INT64, [len(s)])
                for n, s in self.shape_sources.items()
            ],
            [helper.make_empty_tensor_value_info(t) for t in self.targets],
            [numpy_helper.from_array(v, n) for n, v in self.constants.items()],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", self.index.opset())]
        )
        evaluator = ReferenceEvaluator(model)
        results = []
        magnitudes = itertools.cycle((1, 3, 7, 20))
        for sample in range(count):
            base = modulus * next(magnitudes)
            values = {d: base + (sample + 3 * i) % modulus + 1 for i, d in enumerate(dynamic)}
            feeds = {
                name: np.asarray(
                    [values[(name, axis)] if d is None else d for axis, d in enumerate(shape)],
                    np.int64,
                )
                for name, shape in self.shape_sources.items()
            }
            outputs = evaluator.run(None, feeds)
            results.append(
                {
                    t: np.asarray(v).astype(np.int64).reshape(-1)
                    for t, v in zip(self.targets, outputs, strict=True)
                }
            )
        return results
