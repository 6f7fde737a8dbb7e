"""A chain of element-wise ops over one large tensor -> the same chain run chunk by chunk
in a Scan, so that its intermediate tensors stay in the core's cache.

onnxruntime runs every node over the whole tensor before the next starts. A chain such
as Mish (six passes, ``mish-as-exponentials``) over a [1,32,416,416] activation then
streams 22 MB through memory six times, where a fused kernel (OpenVINO's) reads it once.
A Scan over a flat view of the tensor runs the same nodes on one slice at a time: the
slices of the inputs are views and each slice of the output is written in place, so the
only full-size traffic left is the chain's first read and its last write.

The chunk depends on the threads the model will run with. One thread wants the slice's
intermediates in its L2 cache (64K elements); with several, each node of a slice must be
large enough for onnxruntime to split across them: 128K elements per thread, 256K when the
count is not given (two threads' worth; measured at two). Measured on a CSPDarknet stem of
17 Mish layers at 416x416 (docs/performance.md): 145 -> 113 ms at one thread with 64K
slices; with 256K slices 0.85x at one thread and 0.83x at two. Chains below two slices
(one thread) or four (several) are left whole: there the Scan's per-slice cost wins (at
four 256K slices the Scan already ties or wins: 0.95-0.99x at one and two threads).

Every node computes each element from the same elements as before, with the same
kernel: bit-exact.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from b2s_onnx.rewrites._index import GraphIndex
from b2s_onnx.rewrites._rule import Declined, Fired, RewriteReport

#: Ops that compute each output element from the same element of their inputs. Not Erf,
#: nor an op reading one: that is Gelu's spelled form (``gelu-fusable-form``), which
#: onnxruntime fuses into one kernel; in a Scan, ConvNeXt-T ran 1.005x its time at one
#: thread and 1.03x at two. Nor the tanh Gelu the converter writes, which onnxruntime fuses
#: into FastGelu (``_fast_gelu``).
_UNARY = frozenset(
    {
        "Abs",
        "Neg",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Sigmoid",
        "Tanh",
        "Relu",
        "Softplus",
        "Floor",
        "Ceil",
        "Sign",
        "LeakyRelu",
        "HardSigmoid",
        "Elu",
        "Selu",
        "Clip",
    }
)
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Min", "Max", "Pow"})

#: Activations onnxruntime folds into the convolution that produces their input: kept out
#: of a chunked chain so that the fold still happens.
_FOLDED_INTO_CONV = frozenset({"Relu", "Clip", "LeakyRelu", "HardSigmoid", "Sigmoid", "Tanh"})

#: Elements per slice: one thread (L2-sized intermediates); per thread of several (each
#: node split across them); several, not counted (two threads' worth).
CHUNK_ONE_THREAD = 1 << 16
CHUNK_PER_THREAD = 1 << 17
CHUNK_SEVERAL = 2 * CHUNK_PER_THREAD
#: The fewest slices for which the Scan pays, per those two cases.
MIN_CHUNKS_ONE_THREAD = 2
MIN_CHUNKS_SEVERAL = 4
#: The fewest nodes worth a Scan: a single node has no intermediate to keep in cache.
MIN_NODES = 3

#: The constants of the tanh Gelu, ``0.5 x (1 + tanh(k (x + c x^3)))``, as float32.
_GELU_C = 0.044715
_GELU_K = math.sqrt(2 / math.pi)


def _near(value: np.ndarray | None, expected: float) -> bool:
    return (
        value is not None and value.size == 1 and abs(float(value.reshape(-1)[0]) - expected) < 1e-6
    )


def _fast_gelu(index: GraphIndex, tanh: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The nodes of the tanh Gelu around ``tanh`` in the spelling onnxruntime fuses into its
    FastGelu kernel (``Pow(x, 3) * c + x``, ``* k``, Tanh, ``+ 1``, ``* (x * 0.5)``), else
    []. A Scan would hide them from that fusion: 0.875x the time of the sliced chain."""

    def scalar_operand(node: onnx.NodeProto, expected: float) -> str | None:
        """The other operand of a binary ``node`` whose one operand is ``expected``."""
        for mine, other in (node.input, node.input[::-1]):
            if _near(index.constant(mine), expected):
                return other
        return None

    scaled = index.produced_by(tanh.input[0], "Mul")
    poly = (
        None if scaled is None else index.produced_by(scalar_operand(scaled, _GELU_K) or "", "Add")
    )
    if poly is None:
        return []
    for x, term in (poly.input, poly.input[::-1]):
        mul = index.produced_by(term, "Mul")
        cube = None if mul is None else index.produced_by(scalar_operand(mul, _GELU_C) or "", "Pow")
        if cube is None or cube.input[0] != x or not _near(index.constant(cube.input[1]), 3.0):
            continue
        shift = index.only_consumer(tanh.output[0])
        if shift is None or shift.op_type != "Add" or scalar_operand(shift, 1.0) != tanh.output[0]:
            return []
        product = index.only_consumer(shift.output[0])
        if product is None or product.op_type != "Mul":
            return []
        half = index.produced_by(next(n for n in product.input if n != shift.output[0]), "Mul")
        if half is None or scalar_operand(half, 0.5) != x:
            return []
        return [cube, mul, poly, scaled, tanh, shift, half, product]
    return []


def chunk_size(total: int, target: int) -> int | None:
    """The largest divisor of ``total`` in (target/2, target], else None: slices must tile
    the tensor exactly, and one far smaller than ``target`` costs more Scan steps."""
    for size in range(min(target, total), target // 2, -1):
        if total % size == 0:
            return size
    return None


class ElementwiseInChunks:
    name = "element-wise-in-chunks"
    exact = True
    anchors = tuple(sorted(_UNARY | _BINARY))

    def __init__(self, threads: int | None = None) -> None:
        #: The session's intra-op threads (None: several).
        self.threads = threads

    def _shape(self, index: GraphIndex, name: str) -> tuple[int, ...] | None:
        info = index.info(name)
        if info.elem_type != onnx.TensorProto.FLOAT or info.shape is None:
            return None
        if any(d is None for d in info.shape):
            return None
        return tuple(info.shape)

    def _scalar(self, index: GraphIndex, name: str) -> np.ndarray | None:
        value = index.constant(name)
        if value is None or value.size != 1:
            return None
        return value

    def _member(self, index: GraphIndex, node: onnx.NodeProto, shape: tuple[int, ...]) -> bool:
        """Whether ``node`` can run slice by slice in a chain over ``shape``."""
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return False
        if node.op_type in _UNARY:
            operands, extras = node.input[:1], node.input[1:]
        elif node.op_type in _BINARY:
            operands, extras = node.input, []
        else:
            return False
        if self._shape(index, node.output[0]) != shape:
            return False
        if any(e and self._scalar(index, e) is None for e in extras):
            return False  # Clip's bounds: constants of one element only
        if not operands or not all(operands):
            return False
        for operand in operands:
            if self._scalar(index, operand) is None and self._shape(index, operand) != shape:
                return False  # a broadcast other than a scalar's
        if any(index.produced_by(name, "Erf") is not None for name in operands):
            return False
        if id(node) in self._fused(index):
            return False
        if node.op_type in _FOLDED_INTO_CONV:
            producer = index.producer.get(node.input[0])
            if producer is not None and producer.op_type in ("Conv", "ConvTranspose"):
                return False
        return True

    def _fused(self, index: GraphIndex) -> set[int]:
        """Ids of the nodes onnxruntime fuses into one kernel of its own (tanh Gelu)."""
        memo = index.memo.setdefault(self.name, {})
        if "fused" not in memo:
            tanhs = [n for n in index.graph.node if n.op_type == "Tanh"]
            memo["fused"] = {id(n) for tanh in tanhs for n in _fast_gelu(index, tanh)}
        return memo["fused"]

    def _grow(
        self, index: GraphIndex, sink: onnx.NodeProto, shape: tuple[int, ...]
    ) -> list[onnx.NodeProto]:
        """The sink and every producer upstream of it whose output only the chain reads."""
        members = {id(sink): sink}
        changed = True
        while changed:
            changed = False
            for node in list(members.values()):
                for name in node.input:
                    producer = index.producer.get(name)
                    if producer is None or id(producer) in members:
                        continue
                    if not self._member(index, producer, shape) or not index.is_free([producer]):
                        continue
                    if not index.can_rename(name):
                        continue
                    if any(id(r) not in members for r in index.consumers.get(name, [])):
                        continue
                    members[id(producer)] = producer
                    changed = True
        return sorted(members.values(), key=index.position)

    def _is_sink(self, index: GraphIndex, node: onnx.NodeProto, shape: tuple[int, ...]) -> bool:
        """Whether the chain ends at ``node``: something other than another member reads it."""
        name = node.output[0]
        readers = index.consumers.get(name, [])
        if not readers or not index.can_rename(name):
            return True
        return not all(self._member(index, r, shape) for r in readers)

    def attempt(
        self, index: GraphIndex, node: onnx.NodeProto, report: RewriteReport
    ) -> Fired | Declined | None:
        shape = self._shape(index, node.output[0]) if len(node.output) == 1 else None
        if shape is None or not self._member(index, node, shape):
            return None
        if not self._is_sink(index, node, shape) or not index.is_free([node]):
            return None
        total = math.prod(shape)
        several = self.threads is None or self.threads > 1
        if not several:
            target = CHUNK_ONE_THREAD
        elif self.threads is None:
            target = CHUNK_SEVERAL
        else:
            target = CHUNK_PER_THREAD * self.threads
        fewest = MIN_CHUNKS_SEVERAL if several else MIN_CHUNKS_ONE_THREAD
        if total < target * fewest:
            return None
        members = self._grow(index, node, shape)
        if len(members) < MIN_NODES:
            return None
        if index.opset() < 9:
            return Declined(self.name, node.name, "Scan takes its current form from opset 9")
        size = chunk_size(total, target)
        if size is None:
            return Declined(
                self.name,
                node.name,
                f"no slice of {target // 2 + 1}..{target} elements "
                f"tiles the {total} of {list(shape)}",
            )
        index.claim(members)
        self._replace(index, members, shape, size)
        for member in members[:-1]:
            report.absorbed[member.output[0]] = node.output[0]
        index.forget_shapes([m.output[0] for m in members])
        return Fired(
            self.name,
            node.name,
            f"{len(members)} ops over {list(shape)} in {total // size} slices of {size}",
        )

    def _replace(
        self,
        index: GraphIndex,
        members: list[onnx.NodeProto],
        shape: tuple[int, ...],
        size: int,
    ) -> None:
        sink = members[-1]
        base = sink.name or sink.output[0]
        fresh = index.names.fresh
        produced = {m.output[0] for m in members}
        externals: dict[str, str] = {}  # outer tensor -> the body's slice of it
        constants: dict[str, str] = {}  # outer constant -> the body's copy
        body_initializers: list[onnx.TensorProto] = []
        body_nodes = []
        for member in members:
            copy = onnx.NodeProto()
            copy.CopyFrom(member)
            for position, name in enumerate(copy.input):
                if not name or name in produced:
                    continue
                scalar = self._scalar(index, name)
                if scalar is not None:
                    if name not in constants:
                        constants[name] = fresh(f"{base}/slice_{name}")
                        # Rank 0 in the body: a [1, 1, 1, 1] one-element constant (an IR's
                        # Multiply by 1/6) would lift the rank-1 slice to rank 4.
                        body_initializers.append(
                            onnx.numpy_helper.from_array(scalar.reshape(()), constants[name])
                        )
                    copy.input[position] = constants[name]
                else:
                    if name not in externals:
                        externals[name] = fresh(f"{base}/slice_of_{name}")
                    copy.input[position] = externals[name]
            body_nodes.append(copy)
        body_out = fresh(f"{base}/slice_out")
        body_nodes[-1].output[0] = body_out
        sliced = helper.make_tensor_value_info
        body = helper.make_graph(
            body_nodes,
            fresh(f"{base}/slice"),
            [sliced(v, onnx.TensorProto.FLOAT, [size]) for v in externals.values()],
            [sliced(body_out, onnx.TensorProto.FLOAT, [size])],
            body_initializers,
        )
        flat = index.add_initializer(
            f"{base}/slices", np.asarray([math.prod(shape) // size, size], np.int64)
        )
        whole = index.add_initializer(f"{base}/shape", np.asarray(shape, np.int64))
        nodes = []
        flat_inputs = []
        for outer in externals:
            view = fresh(f"{base}/flat_{outer}")
            nodes.append(helper.make_node("Reshape", [outer, flat], [view], name=view))
            flat_inputs.append(view)
        stacked = fresh(f"{base}/slices_out")
        nodes.append(
            helper.make_node(
                "Scan",
                flat_inputs,
                [stacked],
                name=fresh(f"{base}/in_slices"),
                body=body,
                num_scan_inputs=len(flat_inputs),
            )
        )
        nodes.append(helper.make_node("Reshape", [stacked, whole], [sink.output[0]], name=base))
        index.replace(members, nodes)
