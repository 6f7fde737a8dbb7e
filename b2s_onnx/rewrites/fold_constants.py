"""Nodes whose inputs are all constants -> one constant (cheap shape and layout ops only).

A converted graph keeps a few such chains where a layer's other input is computed (a PReLU
slope reshaped to [C,1,1] beside a run-time activation): onnxruntime would fold them at
session start too, but the rewrites after this one could not see the constant. Only ops
whose output is never larger than their inputs are folded, so a hostile graph cannot make
the converter allocate what it describes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Deterministic ops whose output holds at most the elements of their inputs.
FOLDABLE = (
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Transpose",
    "Cast",
    "Identity",
    "Slice",
    "Gather",
    "Concat",
    "Neg",
    "Abs",
    "Reciprocal",
    "Sqrt",
    "Shape",
    "Size",
)
#: Folded values larger than this stay as they are.
FOLD_LIMIT = 1 << 22


class FoldConstants:
    name = "fold-constants"
    anchors = FOLDABLE

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        names = [name for name in node.input if name]
        values = [index.constant(name) for name in names]
        if not names or any(v is None for v in values):
            return None
        if any(v.size > FOLD_LIMIT for v in values) or any(
            o in index.graph_outputs for o in node.output
        ):
            return None
        graph = helper.make_graph(
            [node],
            "fold",
            [],
            [helper.make_empty_tensor_value_info(o) for o in node.output],
            [numpy_helper.from_array(v, n) for n, v in zip(names, values, strict=True)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", index.opset())])
        try:
            results = ReferenceEvaluator(model).run(None, {})
        except Exception as exc:  # the node stays; onnxruntime will say what is wrong
            return Declined(self.name, node.name, f"evaluation failed: {type(exc).__name__}")
        if not index.is_free([node]):
            return None
        index.claim([node])
        for output, value in zip(node.output, results, strict=True):
            value = np.asarray(value)
            index.add_initializer(output, value, exact_name=True)
            index.know_constant(output, value)
        index.replace([node], [])
        return Fired(self.name, node.name, node.op_type)
