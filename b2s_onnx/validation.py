"""The proof that a model we return or write is valid: onnx's full checker passes and
onnxruntime creates a session for it.

A model that onnxruntime refuses is worse than an error: the user finds out later,
elsewhere. So ``convert`` and ``lower`` prove their result before returning it. The
session is created with graph optimizations off, which keeps the cost to loading and
shape inference. When the proof fails, the error names the node onnx or onnxruntime
complains about, mapped back to what the user gave us (an IR layer, or an input node);
``blame`` decides whether that is the input's fault (:class:`B2SError`, exit 2) or ours
(:class:`InvalidOutputError`, exit 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import onnx

from b2s_onnx.errors import B2SError
from b2s_onnx.ir.reader import Layer

#: Domains onnxruntime's CPU provider implements; other custom nodes cannot get a session.
SESSION_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

_NODE_PATTERNS = (
    re.compile(r"Node \(([^)]*)\) Op"),
    re.compile(r'In Node, \("([^"]*)"'),
    re.compile(r"Name: (\S+) OpType"),
    re.compile(r"[Nn]ode name: ?'?([^'\s,]+)"),
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
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:500]


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
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return f"onnxruntime: {_first_line(exc)}"
    return None


def prove(
    model: onnx.ModelProto,
    blame: Callable[[str | None, str], Exception],
    tolerated: str | None = None,
) -> None:
    """Raises ``blame(node name or None, reason)`` unless ``model`` passes the checker and
    loads in onnxruntime (see :func:`find_problem` for ``tolerated``)."""
    problem = find_problem(model, tolerated)
    if problem is not None:
        raise blame(complained_node(problem), problem)


def _layer_of(node: str | None, layers: dict[str, Layer]) -> Layer | None:
    """Converted nodes are named ``<layer name>/<what>`` (lowered ones extend that)."""
    name = node
    while name:
        if name in layers:
            return layers[name]
        name = name.rpartition("/")[0]
    return None


def conversion_blame(layers: Iterable[Layer]) -> Callable[[str | None, str], Exception]:
    """For ``convert``: every node is ours, so an invalid one is our bug, named by layer."""
    by_name = {layer.name: layer for layer in layers}

    def blame(node: str | None, problem: str) -> Exception:
        layer = _layer_of(node, by_name)
        where = layer.where() if layer else f"node '{node}'" if node else "the converted model"
        return InvalidOutputError(
            f"{where}: the converted model is invalid ({problem}); this is a bug in "
            "b2s_onnx, please report it"
        )

    return blame


def lowering_blame(given: onnx.ModelProto) -> Callable[[str | None, str], Exception]:
    """For ``lower``: a node the input already had (or a graph-level fault) is bad input;
    a node the lowering emitted is our bug."""
    original = {node.name for node in given.graph.node}

    def blame(node: str | None, problem: str) -> Exception:
        if node is not None and node not in original:
            return InvalidOutputError(
                f"node '{node}' emitted by the lowering is invalid ({problem}); this is a "
                "bug in b2s_onnx, please report it"
            )
        where = f"node '{node}'" if node else "the model"
        return B2SError(f"{where} is invalid input for onnxruntime ({problem})")

    return blame
