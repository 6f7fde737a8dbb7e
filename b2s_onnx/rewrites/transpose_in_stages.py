"""A large Transpose whose permutation onnxruntime runs slowly -> the permutation planner's
cheaper sequence of Transposes (the one the data-movement lowerings use).

A pixel shuffle written as Reshape -> Transpose -> Reshape (PyTorch's export before
DepthToSpace existed, and TensorFlow graphs that spell it out) reaches onnxruntime as one
rank-6 Transpose that moves the innermost axis: its general strided copy costs ~13 copies
of the tensor, where single-axis moves cost ~2 each (``b2s_onnx.lowering._planner``).
Measured on a [1,48,270,480] -> [1,3,1080,1920] shuffle, one thread: 17.7 ms as one
Transpose, 3.9 ms in the planner's stages (another run: 18.3 -> 5.7 ms). At 2 threads
onnxruntime's inward kernel slows down on large tensors and the stages tie with the single
Transpose (18.2 -> 19.7 ms; docs/performance.md). Only static shapes are planned; below
the planner's size threshold a single Transpose is kept. Pure data movement: bit-exact.
"""

from __future__ import annotations

import onnx
from onnx import helper

from b2s_onnx.lowering._emit import Emitter
from b2s_onnx.lowering._movement import Movement, emit_movement
from b2s_onnx.lowering._planner import Stage, choose_plan, simplify
from b2s_onnx.lowering._sizes import Size
from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport


class TransposeInStages:
    name = "transpose-in-stages"
    exact = True
    anchors = ("Transpose",)

    def __init__(self, strategy: str = "auto", threads: int | None = None) -> None:
        #: The planner's strategy and the session's intra-op threads (None: several), as
        #: ``LoweringOptions`` gives them to the lowerings.
        self.strategy = strategy
        self.threads = threads

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        if self.strategy == "direct":
            return None
        info = index.info(node.input[0])
        if info.shape is None or not info.elem_type:
            return None
        if any(d is None for d in info.shape):
            return Declined(self.name, node.name, "the input's shape is not static")
        rank = len(info.shape)
        perm = index.attribute(node, "perm")
        perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
        if sorted(perm) != list(range(rank)):
            return None  # malformed: onnxruntime refuses it with its own message
        factors, simple = simplify([Size.of(d) for d in info.shape], perm)
        if simple == sorted(simple):
            return None  # only moves unit axes: a Reshape, left to onnxruntime
        itemsize = int(helper.tensor_dtype_to_np_dtype(info.elem_type).itemsize)
        stages = choose_plan(factors, simple, itemsize, self.strategy, self.threads)
        if stages == [Stage(factors, simple)]:
            return None
        if not index.is_free([node]):
            return None
        index.claim([node])
        # An unnamed Transpose (one a rewrite wrote) names its stages after its output.
        emit = Emitter(index.names, node.name or node.output[0], index.opset())
        out_shape = [Size.of(info.shape[p]) for p in perm]
        # Every factor a stage splits or merges is static, so no check or Shape is emitted.
        emit_movement(
            emit,
            node.input[0],
            [Size.of(d) for d in info.shape],
            Movement(factors, simple, out_shape),
            node.output[0],
            itemsize,
            self.strategy,
            self.threads,
        )
        index.graph.initializer.extend(emit.initializers)
        index.replace([node], emit.nodes)
        shapes = " -> ".join(str([s.static for s in stage.shape]) for stage in stages)
        return Fired(
            self.name,
            node.name or node.output[0],
            f"perm {perm} of {list(info.shape)} as {len(stages)} Transposes over {shapes}",
        )
