"""The proof that a model we return or write is valid: onnx's full checker passes and
onnxruntime creates a session for it.

A model that onnxruntime refuses is worse than an error: the user finds out later,
elsewhere. So ``convert`` and ``lower`` prove their result before returning it. The
session is created with basic graph optimizations only (constant folding, which checks
constant inputs' values), which keeps the cost near loading and shape inference. When the
proof fails, the error names the node onnx or onnxruntime complains about, mapped back to
what the user gave us (an IR layer, or an input node); ``blame`` decides whether that is
the input's fault (:class:`B2SError`, exit 2) or ours (:class:`InvalidOutputError`, exit 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

import onnx

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.consistency import agree, openvino_shape, read_with_openvino, shown
from b2s_onnx.ir.reader import Layer

#: Domains onnxruntime's CPU provider implements; other custom nodes cannot get a session.
SESSION_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

_NODE_PATTERNS = (
    re.compile(r"Node \(([^)]*)\) Op"),
    re.compile(r'In Node, \("([^"]*)"'),
    re.compile(r"Name: (\S+) OpType"),
    re.compile(r"node name: ([^)\s,']+)"),
    re.compile(r"\[node: ([^\]]+)\]"),
)


class InvalidOutputError(RuntimeError):
    """We built a model onnx or onnxruntime refuses: a bug of ours (exit 3)."""


def complained_node(message: str) -> str | None:
    """The node name an onnx/onnxruntime error message points at, if any."""
    for pattern in _NODE_PATTERNS:
        found = pattern.search(message)
        if found and found.group(1):
            return found.group(1)
    return None


def _first_line(exc: Exception) -> str:
    """The message's first line, and the node it names further down, if any."""
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    first = (lines[0] if lines else type(exc).__name__)[:500]
    node = complained_node(text)
    if node is not None and complained_node(first) is None:
        first += f" [node: {node}]"
    return first


def checker_problem(model: onnx.ModelProto) -> str | None:
    """What onnx's full checker says about ``model``, or None. Models above protobuf's
    2 GiB limit cannot be checked in memory and are passed."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except ValueError as exc:
        if "2GB" in str(exc) or "2 GB" in str(exc):
            return None
        return f"onnx.checker: {_first_line(exc)}"
    except Exception as exc:
        return f"onnx.checker: {_first_line(exc)}"
    return None


def find_problem(model: onnx.ModelProto, tolerated: str | None = None) -> str | None:
    """Why ``model`` is invalid (onnx's full checker, then an onnxruntime session), or None.

    ``tolerated``: the checker's complaint about the model we were given, which is the
    input's own (onnx's checker is stricter than onnxruntime, e.g. about unshaped graph
    outputs) and is passed on unchanged; onnxruntime must still load the result."""
    problem = checker_problem(model)
    if problem is not None and problem != tolerated:
        return problem
    if any(entry.domain not in SESSION_DOMAINS for entry in model.opset_import) or any(
        node.domain not in SESSION_DOMAINS for node in model.graph.node
    ):
        return None
    import onnxruntime as ort

    options = ort.SessionOptions()
    # All optimizations, as a session runs by default: constant folding is where
    # onnxruntime checks the values of constant inputs (Unsqueeze axes, Reshape shapes),
    # and its layout transformation refuses some graphs the lower levels take (an 8-bit
    # Resize with axes between QLinearConvs). They cost little more than loading.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return f"onnxruntime: {_first_line(exc)}"
    return None


Blame = Callable[[onnx.ModelProto, str | None, str], Exception]


def prove(
    model: onnx.ModelProto,
    blame: Blame,
    tolerated: str | None = None,
) -> None:
    """Raises ``blame(model, node name or None, reason)`` unless ``model`` passes the
    checker and loads in onnxruntime (see :func:`find_problem` for ``tolerated``)."""
    problem = find_problem(model, tolerated)
    if problem is not None:
        raise blame(model, complained_node(problem), problem)


def _layer_of(node: str | None, layers: dict[str, Layer]) -> Layer | None:
    """Converted nodes are named ``<layer name>/<what>`` (lowered ones extend that)."""
    name = node
    while name:
        if name in layers:
            return layers[name]
        name = name.rpartition("/")[0]
    return None


def _declared_output_wrong(layer: Layer, xml: Path, bin_path: Path | None) -> str | None:
    """How the layer's declared output shapes differ from the ones OpenVINO derives, if
    they do (a declaration the computed graph contradicts)."""
    for index, port in enumerate(layer.outputs):
        derived = openvino_shape(xml, bin_path, layer, index)
        if isinstance(derived, list) and not agree(derived, port.dims):
            return (
                f"output port {port.id} declares {shown(port.dims)} but OpenVINO's shape "
                f"rules give {shown(derived)}"
            )
    return None


def conversion_blame(layers: Iterable[Layer], xml: Path, bin_path: Path | None) -> Blame:
    """For ``convert``: the nodes are ours, built from shapes the IR declares; if OpenVINO
    refuses the IR too, the IR breaks an op's rule (bad input, named by layer), otherwise
    the invalid node is our bug."""
    by_name = {layer.name: layer for layer in layers}

    def blame(model: onnx.ModelProto, node: str | None, problem: str) -> Exception:
        layer = _layer_of(node, by_name)
        where = layer.where() if layer else f"node '{node}'" if node else "the converted model"
        _, refused = read_with_openvino(xml, bin_path)
        if refused is not None:
            return B2SError(f"{where}: {problem}; OpenVINO refuses this IR too: {refused}")
        if "has unsupported type" in problem:  # an element type ONNX lacks for this op
            return B2SError(f"{where}: not supported for this element type ({problem})")
        contradiction = layer is not None and _declared_output_wrong(layer, xml, bin_path)
        if contradiction:
            return B2SError(f"{where}: {contradiction}: the IR contradicts itself")
        return InvalidOutputError(
            f"{where}: the converted model is invalid ({problem}); this is a bug in "
            "b2s_onnx, please report it"
        )

    return blame


def _declarations_at_fault(model: onnx.ModelProto) -> bool:
    """True when the model's nodes type-check once its declared output and intermediate
    shapes and types are dropped: the declarations, not the nodes, are wrong."""
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    bare.graph.ClearField("value_info")
    outputs = [onnx.helper.make_empty_tensor_value_info(o.name) for o in bare.graph.output]
    bare.graph.ClearField("output")
    bare.graph.output.extend(outputs)
    try:
        onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True)
    except Exception:
        return False
    return True


def lowering_blame(given: onnx.ModelProto) -> Blame:
    """For ``lower``: a node the input already had, a graph-level fault, or declared shapes
    and types the nodes contradict are bad input; a node the lowering emitted is our bug."""
    original = {node.name for node in given.graph.node}

    def blame(model: onnx.ModelProto, node: str | None, problem: str) -> Exception:
        if node is not None and node not in original and _declarations_at_fault(model):
            return B2SError(
                f"the model's declared shapes or types contradict what its nodes compute "
                f"({problem})"
            )
        if node is not None and node not in original:
            return InvalidOutputError(
                f"node '{node}' emitted by the lowering is invalid ({problem}); this is a "
                "bug in b2s_onnx, please report it"
            )
        where = f"node '{node}'" if node else "the model"
        return B2SError(f"{where} is invalid input for onnxruntime ({problem})")

    return blame
