"""Shared test helpers: run a lowered model, make values of any dtype, independent oracles."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from b2s_onnx.graph.versions import MAX_RUNTIME_IR_VERSION
from b2s_onnx.parity.runtime import run_onnxruntime
from b2s_onnx.rewrites import apply_rewrites


def float_model(
    nodes: list[onnx.NodeProto],
    initializers: Mapping[str, object] | Iterable[tuple[str, object]] = (),
    shape: list[int] | None = None,
    opset: int = 18,
) -> onnx.ModelProto:
    """A graph of ``nodes`` from one float32 input ``x`` of ``shape`` to one output ``y``
    of the same rank (the rewrite tests' models), loadable by the pinned onnxruntime."""
    shape = list(shape or [])
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(shape))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = MAX_RUNTIME_IR_VERSION
    return model


#: What onnxruntime raises when a run fails (a guard, a bad shape).
ORT_ERRORS = (Fail, InvalidArgument, RuntimeException)

#: Every element type the lowering promises to move, with its numpy dtype.
DTYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.BFLOAT16: ml_dtypes.bfloat16,
    TensorProto.INT8: np.int8,
    TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: np.int64,
    TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16,
    TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64,
    TensorProto.BOOL: np.bool_,
}


def spelled_prelu_nodes(data: str, output: str, name: str) -> list[onnx.NodeProto]:
    """TensorFlow's spelled-out PReLU, ``Relu(data) + c * Relu(-data)``, with the negated
    slopes in the constant ``c`` (the prelu-spelled-out tests' pattern)."""
    return [
        helper.make_node("Relu", [data], ["pos"]),
        helper.make_node("Neg", [data], [f"neg{data}"]),
        helper.make_node("Relu", [f"neg{data}"], ["neg"]),
        helper.make_node("Mul", ["c", "neg"], ["scaled"]),
        helper.make_node("Add", ["pos", "scaled"], [output], name=name),
    ]


def distinct_values(shape, elem_type: int, seed: int = 0) -> np.ndarray:
    """Values whose bits differ from element to element where the dtype allows, so any
    misplaced element shows; floats include NaN payloads and -0.0."""
    dtype = DTYPES[elem_type]
    size = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=size).astype(np.bool_).reshape(shape)
    width = np.dtype(dtype).itemsize
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    bits = rng.integers(0, np.iinfo(unsigned).max, size=size, dtype=unsigned, endpoint=True)
    return bits.view(dtype).reshape(shape)


def assert_well_formed(model: onnx.ModelProto, already_dangling: frozenset = frozenset()) -> None:
    """Every graph is topologically sorted; no node output or initializer dangles (except
    ``already_dangling``: names the input model left unused, which lowering keeps)."""
    from b2s_onnx.graph.walk import subgraphs, used_names

    used = used_names(model.graph) | already_dangling

    def visit(graph: onnx.GraphProto, visible: set[str]) -> None:
        known = visible | {v.name for v in graph.input} | {t.name for t in graph.initializer}
        for node in graph.node:
            for name in node.input:
                assert not name or name in known, f"{name} read by {node.name} before defined"
            for sub in subgraphs(node):
                visit(sub, known)
            known.update(node.output)
            for name in node.output:
                assert not name or name in used, f"output {name} of {node.name} dangles"
        for tensor in graph.initializer:
            assert tensor.name in used, f"initializer {tensor.name} dangles"

    visit(model.graph, set())


def rewritten_copy(model: onnx.ModelProto, *rewrites) -> tuple:
    """``rewrites`` applied to a copy of ``model``, which must come out well formed and pass
    ONNX's full check: (the report, the copy)."""
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    report = apply_rewrites(rewritten, rewrites)
    assert_well_formed(rewritten)
    onnx.checker.check_model(rewritten, full_check=True)
    return report, rewritten


def run_unoptimized(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    """The first output of ``model`` run by onnxruntime with every graph optimization off:
    the graph as written, before any fusion (what a fused kernel must reproduce)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(feeds))[0]


def run_lowered(
    model: onnx.ModelProto, feeds: dict, already_dangling: frozenset = frozenset()
) -> np.ndarray:
    """Runs a lowered model in onnxruntime (asserting it loads and is well formed) and
    returns its first output."""
    assert model.ir_version <= MAX_RUNTIME_IR_VERSION
    assert_well_formed(model, already_dangling)
    names = [o.name for o in model.graph.output]
    return run_onnxruntime(model, feeds)[names[0]]


def converted_matches_openvino(
    ov_model, tmp_path, feeds: Mapping[str, np.ndarray], *, rtol: float, atol: float, options=None
):
    """Saves ``ov_model`` (an ``openvino.Model``) as an IR with f32 weights, converts it, and
    asserts that onnxruntime on the converted model matches OpenVINO's CPU plugin (f32
    inference) on every output within ``rtol``/``atol``; returns the conversion result for
    the caller's own checks. Callers skip first when OpenVINO is missing."""
    import openvino as ov

    from b2s_onnx.ir.convert import convert_ir_model

    xml = tmp_path / "model.xml"
    ov.save_model(ov_model, xml, compress_to_fp16=False)
    result = convert_ir_model(xml, options=options)
    compiled = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = compiled(dict(feeds))
    actual = list(run_onnxruntime(result.model, feeds).values())
    for port, got in zip(compiled.outputs, actual, strict=True):
        np.testing.assert_allclose(got, np.asarray(expected[port]), rtol=rtol, atol=atol)
    return result


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


def batch_to_space_by_index(data, block_shape, crops_begin, crops_end) -> np.ndarray:
    """BatchToSpace written element by element from the spec's index arithmetic: an oracle
    that shares no code (and no reshape/transpose reasoning) with the implementation."""
    rank = data.ndim
    blocks = [int(b) for b in block_shape]
    batch_out = data.shape[0] // int(np.prod(blocks))
    out_shape = [batch_out] + [
        data.shape[i] * blocks[i] - int(crops_begin[i]) - int(crops_end[i]) for i in range(1, rank)
    ]
    out = np.empty(out_shape, dtype=data.dtype)
    for index in itertools.product(*(range(d) for d in out_shape)):
        spread = [index[i] + int(crops_begin[i]) for i in range(1, rank)]
        offsets = [s % b for s, b in zip(spread, blocks[1:], strict=True)]
        source = [s // b for s, b in zip(spread, blocks[1:], strict=True)]
        block_index = 0
        for offset, b in zip(offsets, blocks[1:], strict=True):
            block_index = block_index * b + offset
        out[index] = data[(block_index * batch_out + index[0], *source)]
    return out


def with_output_offset(model: onnx.ModelProto, offset: float) -> onnx.ModelProto:
    """A copy of ``model`` with ``offset`` added to its first output: a conversion error
    for ``check`` to find."""
    shifted = onnx.ModelProto()
    shifted.CopyFrom(model)
    graph = shifted.graph
    output = graph.output[0].name
    graph.initializer.append(helper.make_tensor("offset", TensorProto.FLOAT, [], [offset]))
    for node in graph.node:
        node.output[:] = [f"{o}/before" if o == output else o for o in node.output]
        node.input[:] = [f"{i}/before" if i == output else i for i in node.input]
    graph.node.append(helper.make_node("Add", [f"{output}/before", "offset"], [output]))
    return shifted
